"""How raw text becomes the model's tokens: recorded once with the data, kept in every checkpoint, applied when
translating.

A data directory may hold ``preprocessing.json`` (``examples/sated/prepare.py`` writes it; any other data can
have one written by hand)::

    {"tokenizer": {"name": "moses_lowercase", "source_lang": "en", "target_lang": "fr"},
     "bpe": {"name": "subword_nmt", "bpe_codes": "codes.txt"}}

Each part names a tokenizer or a BPE of fairseq's registries (the choices of ``--tokenizer`` and ``--bpe``) and
its options, the fields of its options dataclass (``--bpe-codes`` is ``bpe_codes``); either part may be null or
left out. A file an option names (:data:`FILE_OPTIONS`) is relative to the JSON file's folder.
``source_lang``/``target_lang``, when the part has them and the file does not say, are the task's.

``fairseq-train`` reads it when it loads the training split and keeps it, checked and with every option
resolved (:func:`read_record`), in the task state that fairseq saves in each checkpoint. Translating, the task
builds from it what ``--tokenizer``/``--bpe`` would build (:func:`build`), so that ``fairseq-interactive``,
``fairseq-generate``'s ``D-`` lines, ``SpeakerTranslator.from_pretrained`` and ``fairseq-speaker-serve`` take
raw text and give detokenized text. A file the record names (BPE codes) is looked for where it was at
training, then under its name in the data directory the model is loaded with; one that is missing or not the
same file (its sha256 is recorded) stops the command with what to do.

:class:`MosesLowercase` (``--tokenizer moses_lowercase``) is the chain of SATED and of ``prepare.py --raw``:
Moses tokenization with its escapes (``&apos;``), then lowercasing; decoding detokenizes, and with ``recase``
(``prepare.py`` records it) restores the case the lowercasing took: sentence starts, and with a ``truecase_model``
(``prepare.py --raw`` learns one from the cased training translations) every word's most frequent casing.
"""

import copy
import dataclasses
import hashlib
import json
import os
from argparse import Namespace
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence

from fairseq.data import encoders
from fairseq.data.encoders import register_tokenizer
from fairseq.dataclass import FairseqDataclass
from fairseq.registry import REGISTRIES

from fairseq_speaker.errors import UserError

#: the file in a data directory that records its preprocessing
PREPROCESSING_FILE = "preprocessing.json"
#: the parts of a record, in the order they are applied to the input: fairseq's registries of the same names
KINDS = ("tokenizer", "bpe")
#: what each part is called in messages, and the fairseq option that chooses it
OPTION = {"tokenizer": "--tokenizer", "bpe": "--bpe"}
#: options of fairseq's tokenizers and BPEs that name a file (those fairseq's hub finds beside a model, and gpt2's)
FILE_OPTIONS = ("bpe_codes", "sentencepiece_model", "bpe_merges", "bpe_vocab", "gpt2_encoder_json", "gpt2_vocab_bpe",
                "truecase_model")
#: options filled with the task's value when the file does not give them
TASK_OPTIONS = ("source_lang", "target_lang")


class PreprocessingError(UserError):
    """A preprocessing record that cannot be read, or rebuilt; the message says what to do."""


# -- the tokenizer of SATED and of prepare.py --raw ---------------------------------------------------------


@dataclass
class MosesLowercaseConfig(FairseqDataclass):
    source_lang: str = field(default="en", metadata={"help": "source language (Moses's rules for it)"})
    target_lang: str = field(default="en", metadata={"help": "target language (Moses's rules for it)"})
    recase: bool = field(default=False, metadata={
        "help": "decoding restores the case: each sentence's first word capitalized (Moses's detruecaser), and "
        "with --truecase-model every word in its most frequent casing first"})
    truecase_model: Optional[str] = field(default=None, metadata={
        "help": "with --recase: a Moses truecasing model learnt from cased text of the target language (sacremoses "
        "MosesTruecaser; examples/sated/prepare.py --raw writes one from the training translations)"})


#: tokens after which a sentence's first word is still to come, beside Moses's own: other languages' opening quotes
#: and marks, a dialogue's dash (the truecasing model is learnt and applied with the same list)
SENTENCE_OPENERS = frozenset({"«", "„", "“", "‘", "¿", "¡", "-", "—", "–"})


def sentence_openers(caser) -> None:
    """Give a sacremoses truecaser or detruecaser :data:`SENTENCE_OPENERS` beside Moses's own."""
    caser.DELAYED_SENT_START = set(caser.DELAYED_SENT_START) | SENTENCE_OPENERS


def load_truecaser(path: str):
    """A sacremoses truecasing model read from ``path``, or a :class:`PreprocessingError` that names the file."""
    from sacremoses import MosesTruecaser

    if not os.path.isfile(path):
        raise PreprocessingError(f"moses_lowercase: truecase_model {path}: no such file")
    try:
        truecaser = MosesTruecaser(load_from=path)
    except Exception as e:  # sacremoses's own errors differ between its releases
        raise PreprocessingError(f"moses_lowercase: truecase_model {path} is not a truecasing model "
                                 f"({type(e).__name__}: {e}); learn one with sacremoses's MosesTruecaser "
                                 f"(examples/sated/prepare.py --raw does)") from None
    sentence_openers(truecaser)
    return truecaser


@register_tokenizer("moses_lowercase", dataclass=MosesLowercaseConfig)
class MosesLowercase:
    """Moses tokenization with escapes (``It's`` -> ``it &apos;s``), then lowercasing: how SATED was made and how
    ``examples/sated/prepare.py --raw`` makes text; :meth:`decode` Moses-detokenizes and unescapes, and with
    ``recase`` restores the case first (``je suis rentrée .`` -> ``Je suis rentrée.``)."""

    def __init__(self, cfg: MosesLowercaseConfig):
        from sacremoses import MosesDetokenizer, MosesDetruecaser, MosesTokenizer

        self.cfg = cfg
        self.tok = MosesTokenizer(lang=cfg.source_lang)
        self.detok = MosesDetokenizer(lang=cfg.target_lang)
        self.truecaser = self.detruecaser = None
        recase, model = getattr(cfg, "recase", False), getattr(cfg, "truecase_model", None)
        if not isinstance(recase, bool):
            raise PreprocessingError(f"moses_lowercase: recase must be true or false, got {recase!r}")
        if model and not recase:
            raise PreprocessingError(f"moses_lowercase: truecase_model {model} is only used with recase: give recase "
                                     f"true (--recase), or leave truecase_model out")
        if recase:
            self.detruecaser = MosesDetruecaser()
            sentence_openers(self.detruecaser)
            if model:
                self.truecaser = load_truecaser(model)

    def encode(self, x: str) -> str:
        return self.tok.tokenize(x, escape=True, return_str=True).lower()

    def decode(self, x: str) -> str:
        if self.detruecaser is None:
            return self.detok.detokenize(x.split())
        if self.truecaser is not None:
            x = self.truecaser.truecase(x, return_str=True)
        return self.detok.detokenize(self.detruecaser.detruecase(x))


# -- reading a record (training) ------------------------------------------------------------------------------


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _is_url(value) -> bool:
    return isinstance(value, str) and "://" in value


def _options_dataclass(kind: str, name) -> Optional[type]:
    """The options dataclass of the registered ``name`` (None if it has none), or an error naming the choices."""
    registry = REGISTRIES[kind]
    if not isinstance(name, str) or name not in registry["registry"]:
        choices = ", ".join(sorted(registry["registry"]))
        raise PreprocessingError(f"no {kind} called {name!r} (the choices of {OPTION[kind]}: {choices})")
    return registry["dataclass_registry"].get(name)


def _part(kind: str, given, folder: str, task_options: Dict[str, Optional[str]]) -> Optional[dict]:
    """One part of a record: ``{"name", "options", "sha256"}`` with every option of the part's dataclass."""
    if given is None:
        return None
    if not isinstance(given, dict) or "name" not in given:
        raise PreprocessingError(f"{kind} must be null or an object with a \"name\" (e.g. {{\"name\": \"moses\"}}), "
                                 f"got {json.dumps(given)[:80]}")
    name = given["name"]
    dataclass_ = _options_dataclass(kind, name)
    fields = {f.name: f for f in dataclasses.fields(dataclass_)} if dataclass_ else {}
    fields.pop("_name", None)
    options = {k: v for k, v in given.items() if k != "name"}
    unknown = sorted(set(options) - set(fields))
    if unknown:
        known = ", ".join(sorted(fields)) or "none"
        raise PreprocessingError(f"{kind} {name}: no option {', '.join(map(repr, unknown))} (its options: {known})")
    for key, value in options.items():
        if value is not None and not isinstance(value, (str, bool, int, float)):
            raise PreprocessingError(f"{kind} {name}: option {key!r} must be a string, a number or true/false, "
                                     f"got {json.dumps(value)[:80]}")
        if fields[key].type in (bool, "bool") and not isinstance(value, bool):
            raise PreprocessingError(f"{kind} {name}: option {key!r} must be true or false, got "
                                     f"{json.dumps(value)[:80]}")
    resolved = {}
    for key, f in fields.items():
        if key in options:
            value = options[key]
        elif key in task_options and task_options[key] is not None:
            value = task_options[key]
        elif f.default is not dataclasses.MISSING:
            value = f.default
        elif f.default_factory is not dataclasses.MISSING:
            value = f.default_factory()
        else:
            value = None
        if value == "???":  # omegaconf's MISSING: fairseq's mark of a required option
            raise PreprocessingError(f"{kind} {name}: option {key!r} is required (fairseq's "
                                     f"--{key.replace('_', '-')})")
        if isinstance(value, (str, bool, int, float)) or value is None:
            resolved[key] = value
    digests = {}
    for key in FILE_OPTIONS:
        value = resolved.get(key)
        if not isinstance(value, str) or _is_url(value):
            continue
        path = os.path.abspath(os.path.join(folder, os.path.expanduser(value)))
        if not os.path.isfile(path):
            raise PreprocessingError(f"{kind} {name}: {key} {value!r}: no such file {path} (a path relative to the "
                                     f"folder of {PREPROCESSING_FILE})")
        resolved[key], digests[key] = path, sha256(path)
    return {"name": name, "options": resolved, "sha256": digests}


_FIX_FILE = f"correct it (docs/sated.md describes {PREPROCESSING_FILE}) or remove it to record no preprocessing"


def read_record(path: str, source_lang: Optional[str] = None, target_lang: Optional[str] = None) -> dict:
    """The record of ``path`` (a ``preprocessing.json``), checked: what the task keeps in the checkpoint."""
    try:
        with open(path, encoding="utf-8") as f:
            given = json.load(f)
    except (OSError, UnicodeDecodeError) as e:
        raise PreprocessingError(f"{path}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    except json.JSONDecodeError as e:
        raise PreprocessingError(f"{path}:{e.lineno}: not JSON ({e.msg}); {_FIX_FILE}") from None
    if not isinstance(given, dict):
        raise PreprocessingError(f"{path}: expected an object with \"tokenizer\" and/or \"bpe\", got "
                                 f"{json.dumps(given)[:80]}; {_FIX_FILE}")
    unknown = sorted(set(given) - set(KINDS))
    if unknown:
        raise PreprocessingError(f"{path}: unknown key(s) {', '.join(map(repr, unknown))}: expected \"tokenizer\" "
                                 f"and/or \"bpe\"; {_FIX_FILE}")
    folder = os.path.dirname(os.path.abspath(path))
    record: Dict[str, object] = {"source": os.path.abspath(path)}
    for kind in KINDS:
        try:
            record[kind] = _part(kind, given.get(kind), folder, {"source_lang": source_lang,
                                                                 "target_lang": target_lang})
        except PreprocessingError as e:
            raise PreprocessingError(f"{path}: {e}; {_FIX_FILE}") from None
    return record


def describe(record: Optional[dict]) -> str:
    """``tokenizer moses_lowercase (source_lang en, target_lang fr), no BPE``: for logs and messages."""
    if not record:
        return "none"
    shown = []
    for kind in KINDS:
        part = record.get(kind)
        if not part:
            shown.append(f"no {kind if kind == 'tokenizer' else 'BPE'}")
            continue
        options = ", ".join(f"{k} {v}" for k, v in part.get("options", {}).items() if v not in (None, False, ""))
        shown.append(f"{kind} {part.get('name')}" + (f" ({options})" if options else ""))
    return ", ".join(shown)


# -- rebuilding (translating) -------------------------------------------------------------------------------


def chosen(args, kind: str) -> bool:
    """Whether fairseq's options ``args`` (``cfg.tokenizer``/``cfg.bpe``: a config, a namespace, a name or
    None) choose a ``kind`` themselves (``--tokenizer``/``--bpe`` given): then they win over a record."""
    if args is None:
        return False
    if isinstance(args, str):
        return bool(args)
    name = args.get("_name") if hasattr(args, "get") else getattr(args, kind, None)
    return name is not None


def _find(path: str, data_dirs: Sequence[str]) -> List[str]:
    """``path``, then its name in each data directory: the places a recorded file is looked for."""
    return [path] + [os.path.join(d, os.path.basename(path)) for d in data_dirs]


def build(kind: str, record: dict, data_dirs: Sequence[str] = (), checkpoint: Optional[str] = None):
    """The tokenizer or BPE (``kind``) of a record kept in a checkpoint (None if it has none), built by fairseq's
    registry as ``--tokenizer``/``--bpe`` would build it."""
    model = checkpoint or "the checkpoint"
    undo = (f"or give {OPTION[kind]} yourself (it wins over the checkpoint's), or --preprocessing none "
            f"(preprocessing=\"none\") for input already in the model's tokens")
    try:
        part = record.get(kind)
        if part is None:
            return None
        name, options, digests = part["name"], dict(part["options"]), dict(part.get("sha256") or {})
        _options_dataclass(kind, name)
    except PreprocessingError as e:
        raise PreprocessingError(f"{model}: the text preprocessing saved with the model needs a {kind} this "
                                 f"installation does not have: {e}: import the package that registers it "
                                 f"(--user-dir), {undo}") from None
    except (AttributeError, KeyError, TypeError) as e:
        raise PreprocessingError(f"{model}: the text preprocessing saved with the model is not readable "
                                 f"({type(e).__name__}: {e}): {undo}") from None
    for key, digest in digests.items():
        recorded = options.get(key)
        if not isinstance(recorded, str) or not isinstance(digest, str):
            raise PreprocessingError(f"{model}: the text preprocessing saved with the model is not readable (the "
                                     f"{kind}'s {key} is not a file name): {undo}")
        places = _find(recorded, data_dirs)
        found = next((p for p in places if os.path.isfile(p)), None)
        what = f"the file {os.path.basename(recorded)} ({OPTION[kind]} {name} --{key.replace('_', '-')})"
        if found is None:
            raise PreprocessingError(
                f"{model}: the text preprocessing saved with the model needs {what}, which is missing: not at "
                f"{recorded}, where it was at training{', nor in ' + ', '.join(data_dirs) if data_dirs else ''}. "
                f"Put that file back in one of these places, {undo}")
        if sha256(found) != digest:
            raise PreprocessingError(
                f"{model}: {found} is not {what} the model was trained with (its sha256 differs): put the training "
                f"data's file there, {undo}")
        options[key] = found
    options[kind] = name
    try:
        return getattr(encoders, f"build_{kind}")(Namespace(**options))
    except PreprocessingError as e:  # the part's own message names what is wrong
        raise PreprocessingError(f"{model}: the text preprocessing saved with the model: {e}; {undo}") from None
    except (ImportError, OSError, ValueError, TypeError) as e:
        raise PreprocessingError(f"{model}: the text preprocessing saved with the model uses the {kind} {name}, "
                                 f"which cannot be built here ({type(e).__name__}: {e}); {undo}") from None


def for_target(tokenizer):
    """``tokenizer`` encoding with the target language's rules (a translation to learn a speaker from), where it
    has languages (Moses's ``source_lang``/``target_lang``); else ``tokenizer`` itself (None stays None)."""
    cfg: Any = getattr(tokenizer, "cfg", None)  # the options dataclass of a fairseq tokenizer
    source, target = getattr(cfg, "source_lang", None), getattr(cfg, "target_lang", None)
    if source is None or target is None or source == target:
        return tokenizer
    cfg = copy.deepcopy(cfg)
    cfg.source_lang = target
    if hasattr(cfg, "recase"):  # it only encodes: no case to restore, no truecasing model to read again
        cfg.recase, cfg.truecase_model = False, None
    return type(tokenizer)(cfg)
