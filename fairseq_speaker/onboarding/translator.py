"""A speaker model in a service: load once, translate each sentence as its speaker, onboard speakers live.

::

    from fairseq_speaker.serving import SpeakerTranslator

    translator = SpeakerTranslator.from_pretrained("checkpoints/checkpoint_best.pt", data="data-bin")
    translator.translate(["i am tired ."], speakers=["spk003"])
    translator.add_speaker("dr-lee", sources=[...], targets=[...])    # a few corrected translations
    translator.update_speaker("dr-lee", "one more source .", "its translation .")
    translator.export_speakers("dr-lee.npz", ["dr-lee"])              # keep per-user parameters outside
    translator.save("checkpoint_with_dr_lee.pt")                       # or a checkpoint fairseq loads

Every method is safe to call from several threads at once (and from an asyncio service through a thread
pool): each call holds the translator for its duration, so every sentence is translated as its own speaker
and a speaker being added or updated is never seen half-written; a call waits at most for the calls
before it (an onboarding fit, a batch of translations). Throughput comes from batching sentences into a
call, not from threads. :meth:`SpeakerTranslator.fit_speaker` fits a speaker on a copy of the model that
shares its weights, holding the translator only while it takes the copy: translations go on meanwhile, and
the rows enter the model in one call (:meth:`SpeakerTranslator.import_speakers`) when the caller chooses.

Loading, tokenization and BPE (the checkpoint's own preprocessing, or ``tokenizer="moses"``,
``bpe="subword_nmt"``, ``bpe_codes=...``) and generation are fairseq's own hub interface
(:class:`fairseq.hub_utils.GeneratorHubInterface`, available as :attr:`SpeakerTranslator.hub`); speakers are added with
:class:`~fairseq_speaker.onboarding.adapter.SpeakerAdapter`.
"""

import copy
import functools
import math
import os
import threading
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import scipy.sparse
import torch
from fairseq import hub_utils
from fairseq.dataclass.configs import GenerationConfig
from omegaconf import open_dict

import fairseq_speaker  # noqa: F401  (registers the task and the models)
from fairseq_speaker.checkpoints import not_a_file, read_checkpoint
from fairseq_speaker.data import preprocessing
from fairseq_speaker.data.speaker_dictionary import sentence_problem
from fairseq_speaker.modules.speaker_words import speaker_words_of
from fairseq_speaker.modules.word_kinds import kind_posteriors, kind_words
from fairseq_speaker.onboarding.adapter import SpeakerAdapter, check_pair_counts
from fairseq_speaker.onboarding.checkpoint import OnboardingError, SpeakerCheckpoint, adaptable_bias, speaker_bias_of
from fairseq_speaker.onboarding.fit import FitOptions, FitReport
from fairseq_speaker.onboarding.prior import prior_of_checkpoint
from fairseq_speaker.tasks.speaker_translation import BEAM_STOPS
from fairseq_speaker.user_dir import check_registered

if TYPE_CHECKING:
    from fairseq_speaker.onboarding.vectors import SpeakerVectors

Sentences = Union[str, Sequence[str]]


@dataclass(frozen=True)
class SpeakerTrait:
    """What a speaker's words suggest of one trait of the model's kinds of speaker (``fairseq-speaker-words``;
    :mod:`fairseq_speaker.analysis.choices`): the trait (1, 2, ... in the order of the model's record, as the command
    lists them), the speaker's likeliest ``kind`` of its ``kinds`` (1, 2, ...) and its posterior ``probability``,
    ``evidence`` (how many of the trait's alternatives the speaker said), and ``words``, the words that tell that
    kind from the others (:func:`~fairseq_speaker.modules.word_kinds.kind_words`)."""

    trait: int
    kind: int
    kinds: int
    probability: float
    evidence: int
    words: Tuple[str, ...]


def _as_list(x: Sentences, what: str = "sentences") -> List[str]:
    if isinstance(x, str):
        return [x]
    if x is None or not isinstance(x, (list, tuple)) or not all(isinstance(item, str) for item in x):
        raise OnboardingError(f"{what}: give a string or a list of strings, got {type(x).__name__} {x!r:.80}")
    return list(x)


def _not_blank(sentences: List[str], what: str = "sentences") -> List[str]:
    """``sentences`` if none is empty or only whitespace: the model would answer one with an invented sentence, and
    a speaker fitted on one learns the end of sentence alone."""
    for i, sentence in enumerate(sentences):
        problem = sentence_problem(sentence)
        if problem:
            raise OnboardingError(f"{what}[{i}] is {problem}: give a sentence (or leave it out)")
    return sentences


def _per_sentence(speakers: Sentences, n: int) -> List[str]:
    """One speaker label per sentence of ``n``, from one label for all or one per sentence."""
    labels = _as_list(speakers, "speakers")
    if len(labels) == 1:
        labels = labels * n
    if len(labels) != n:
        raise OnboardingError(f"{len(labels)} speakers for {n} sentences: give one speaker for all, or one per "
                              f"sentence")
    return labels


def _name_list(names, method: str, empty: bool = True, every: bool = True) -> List[str]:
    """``names`` if it is a list (or tuple) of speaker names: a string would be read as its characters. ``empty``:
    whether an empty list is a list of names here; ``every``: whether leaving names out means every speaker."""
    if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
        raise OnboardingError(f"{method}: give a list of speaker names, got {type(names).__name__} {names!r:.80}"
                              + (f" ({method}([{names!r:.60}]) for one)" if isinstance(names, str) else ""))
    if not names and not empty:
        raise OnboardingError(f"{method}: names is an empty list: give at least one speaker"
                              + (" (or leave names out: every speaker)" if every else ": nothing would be done"))
    return list(names)


def _checked_beam(beam) -> int:
    """``beam`` if it is a whole number of at least 1 (fairseq's search would fail on anything else)."""
    if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
        raise OnboardingError(f"beam must be a whole number of at least 1, got {beam!r}")
    return beam


def _checked_nbest(nbest, beam: int) -> int:
    """``nbest`` if it is a whole number from 1 to ``beam`` (the beam keeps ``beam`` hypotheses: a larger nbest would
    give fewer translations than asked, 0 none)."""
    if isinstance(nbest, bool) or not isinstance(nbest, int) or not 1 <= nbest <= beam:
        raise OnboardingError(f"nbest must be a whole number from 1 to the beam ({beam}), got {nbest!r}: the beam "
                              f"keeps {beam} translations of each sentence; raise beam for more")
    return nbest


#: what fairseq's hub interface takes besides the generation options (fairseq-generate's, with underscores)
HUB_GENERATE_OPTIONS = ("verbose", "inference_step_args", "prefix_allowed_tokens_fn",
                        "beam_stop")  # the last the task's (--beam-stop): when the beam search ends a sentence

#: generation options that fairseq-generate and -interactive read but the hub interface does not (each would be accepted
#: and change nothing), and one that would lose sentences: option -> why it is refused, and what to do instead
NOT_FOR_THE_HUB = {
    "nbest": "translate gives each sentence's best translation; translate_nbest(nbest=N) gives N",
    "prefix_size": "the hub does not read it (it forces a prefix of a reference translation, which these sentences do "
                   "not have); inference_step_args={'prefix_tokens': ...} forces one",
    "replace_unk": "the hub does not read it (it is fairseq-generate's and -interactive's post-processing)",
    "sacrebleu": "the hub does not read it (it is fairseq-generate's scoring)",
    "score_reference": "the hub does not read it (it scores reference translations, which these sentences do not have)",
    "print_step": "the hub does not read it (it is fairseq-generate's output)",
    "lm_path": "the hub does not read it (fairseq-generate loads the language model)",
    "lm_weight": "the hub does not read it (fairseq-generate fuses the language model)",
    "constraints": "the hub passes no constraints to the search",
    "skip_invalid_size_inputs": "a sentence longer than the model takes is refused, naming it; skipped, it would leave "
                                "fewer translations than sentences, out of step with them",
    **{name: "this model's search does not read it (fairseq reads it for other kinds of models: speech translation's "
             "second pass, non-autoregressive decoding, or its command lines)"
       for name in ("beam_mt", "lenpen_mt", "max_len_a_mt", "max_len_b_mt", "decoding_format",
                    "iter_decode_eos_penalty", "iter_decode_max_iter", "iter_decode_force_max_iter",
                    "iter_decode_with_beam", "iter_decode_with_external_reranker", "retain_iter_history",
                    "retain_dropout", "retain_dropout_modules", "no_seed_provided", "eos_token")},
}


def _value_problem(value, hint) -> Optional[str]:
    """What is wrong with ``value`` for a generation option typed ``hint`` (fairseq's ``GenerationConfig``), or None:
    a bool where a number goes, text where a bool goes (fairseq took ``"yes"`` for true, ``"20"`` ended in a
    ``TypeError`` deep in the search), a number that is not finite."""
    if typing.get_origin(hint) is Union:
        if value is None:
            return None
        hint = next((arg for arg in typing.get_args(hint) if arg is not type(None)), hint)
    if hint is bool:
        return None if isinstance(value, bool) else "True or False"
    if hint is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "a whole number"
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return None if ok else "a finite number"
    if hint is str:
        return None if isinstance(value, str) else "text"
    return None  # a choice of fairseq's: its own check


#: the type of each of fairseq's generation options
GENERATION_TYPES: Dict[str, object] = typing.get_type_hints(GenerationConfig)


def _checked_options(options: dict, generation) -> dict:
    """``options`` if each is one of fairseq's generation options (``generation``: the hub's, a ``GenerationConfig``)
    or of its hub interface: fairseq would set a misspelt one (``beem=3``) aside without a word."""
    for name in options:
        if name in NOT_FOR_THE_HUB:
            raise OnboardingError(f"{name!r} is refused here: {NOT_FOR_THE_HUB[name]}")
        problem = _value_problem(options[name], GENERATION_TYPES[name]) if name in GENERATION_TYPES else None
        if problem:
            raise OnboardingError(f"{name} must be {problem}, got {type(options[name]).__name__} "
                                  f"{options[name]!r:.60}")
        if name not in generation and name not in HUB_GENERATE_OPTIONS:
            raise OnboardingError(f"{name!r} is not an option of fairseq's generation (fairseq-generate's options, "
                                  f"written with underscores: beam, lenpen, max_len_b, sampling, ...): it would be "
                                  f"ignored")
    if "beam_stop" in options and options["beam_stop"] is None:  # the translator's own, as from_pretrained's None
        options = {name: value for name, value in options.items() if name != "beam_stop"}
    if options.get("beam_stop", BEAM_STOPS[0]) not in BEAM_STOPS:
        raise OnboardingError(f"beam_stop must be one of {', '.join(BEAM_STOPS)}, got {options['beam_stop']!r}")
    alignment = options.get("print_alignment")
    if alignment not in (None, False, "hard", "soft"):  # fairseq's generator would fail on another value
        raise OnboardingError(f"print_alignment must be 'hard' or 'soft' (or left out), got {alignment!r}")
    return options


def _checked_step_args(options: dict, sentences: int, vocab: int) -> None:
    """The hub's ``inference_step_args``: the task's ``inference_step`` takes ``prefix_tokens`` only, a ``[1, k]``
    tensor of target word ids for one sentence (the hub gives the same tensor to every batch it makes, in its order of
    lengths: rows for several sentences would go to other sentences)."""
    args = options.get("inference_step_args")
    if args is None:
        return
    if not isinstance(args, dict) or set(args) - {"prefix_tokens"}:
        raise OnboardingError(f"inference_step_args: give a dict whose only key is 'prefix_tokens', got "
                              f"{args!r:.80}")
    prefix = args.get("prefix_tokens")
    if prefix is None:
        return
    if not torch.is_tensor(prefix) or prefix.dim() != 2 or prefix.size(0) != 1 or prefix.dtype != torch.long:
        raise OnboardingError(f"inference_step_args: prefix_tokens must be a LongTensor [1, k] of target word ids for "
                              f"one sentence, got {prefix!r:.80}")
    if sentences != 1:
        raise OnboardingError(f"inference_step_args: prefix_tokens forces the start of one sentence, and {sentences} "
                              f"are given: translate them one at a time")
    if prefix.numel() and (int(prefix.min()) < 0 or int(prefix.max()) >= vocab):
        raise OnboardingError(f"inference_step_args: prefix_tokens holds ids outside the target dictionary (0 to "
                              f"{vocab - 1})")


def _check_overrides(overrides: dict, cfg, checkpoint: str) -> None:
    """Refuse an override of ``from_pretrained`` that names no option of the checkpoint's configuration (nor of a
    tokenizer or BPE): fairseq sets it aside without a word (``max_len_bb=3``)."""
    import dataclasses

    from fairseq.registry import REGISTRIES

    groups = dict(cfg) if isinstance(cfg, dict) else ({name: cfg[name] for name in cfg} if cfg is not None else {})
    known = set(groups)
    for group in groups.values():
        if hasattr(group, "keys"):
            known.update(group.keys())
    for kind in ("bpe", "tokenizer"):
        for options in REGISTRIES[kind]["dataclass_registry"].values():
            if options is not None:
                known.update(f.name for f in dataclasses.fields(options))
    given = [name for name in ("speaker", "speaker_per_line") if name in overrides]
    if given:
        raise OnboardingError(f"from_pretrained: {', '.join(map(repr, given))} are fairseq-interactive's speakers of "
                              f"its input lines; translate(sentences, speakers) names each sentence's speaker")
    unknown = [name for name in overrides if name not in known]
    if unknown and groups:
        raise OnboardingError(f"from_pretrained: {', '.join(map(repr, unknown))} is no option of {checkpoint}'s "
                              f"configuration (fairseq's options, with underscores: max_len_b, unknown_speaker, "
                              f"tokenizer, bpe_codes, ...): fairseq would set it aside without a word")


def _serialized(method):
    """Run ``method`` holding the translator's lock (see the module's text)."""
    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)
    return locked


#: what a translator keeps of its checkpoint to save a new one: all but the weights it holds in memory and
#: the optimizer state, which a saved model does not keep
_NOT_KEPT = ("model", "last_optimizer_state")


def _fitting_copy(model, keep: Sequence = ()):
    """A copy of ``model`` to fit a speaker on while the model translates: modules of its own (a fit swaps their
    parameters: ``torch.func.functional_call``) and speaker rows of its own (a fit writes them); the shared
    weights, the buffers and the objects of ``keep`` are the model's, not copied."""
    owned = {id(p) for p in speaker_bias_of(model).speaker_parameters().values()}
    memo = {id(t): t for t in list(model.parameters()) + list(model.buffers()) if id(t) not in owned}
    memo.update({id(x): x for x in keep})
    return copy.deepcopy(model, memo)


def _file_identity(path: str):
    stat = os.stat(path)
    return stat.st_ino, stat.st_size, stat.st_mtime_ns


class SpeakerTranslator:
    """A loaded speaker model (see the module documentation)."""

    def __init__(self, hub: hub_utils.GeneratorHubInterface, checkpoint: str, fit: Optional[FitOptions] = None,
                 state: Optional[dict] = None):
        self.hub = hub
        self.checkpoint = checkpoint
        self._fit = fit
        self._adapter: Optional[SpeakerAdapter] = None
        self._lock = threading.RLock()
        #: (the hub's tokenizer, the same for target sentences): :meth:`encode_pairs`
        self._target_tokenizer: Optional[tuple] = None
        #: the checkpoint as it was read, without the weights (:meth:`save` writes the model in memory)
        self._state = {k: v for k, v in (state or {}).items() if k not in _NOT_KEPT}

    @classmethod
    def from_pretrained(cls, checkpoint: str, data: str, fit: Optional[FitOptions] = None,
                        **overrides) -> "SpeakerTranslator":
        """Load ``checkpoint`` with the dictionaries of ``data``; ``overrides`` are fairseq options (``beam=5``, the
        beam of a translation that names none, ``tokenizer="moses"``, ``bpe="subword_nmt"``, ``bpe_codes=...``,
        ``source_lang=...``, ``unknown_speaker="fail"``, ``preprocessing="none"``; a name that is no option is
        refused). A checkpoint trained on data that records its preprocessing (``examples/sated/prepare.py``) takes
        raw text and gives detokenized text, unless ``tokenizer=``/``bpe=`` or ``preprocessing="none"`` say otherwise
        (docs/sated.md)."""
        if os.path.isdir(checkpoint):
            raise OnboardingError(f"checkpoint {checkpoint} is a directory: give the checkpoint file in it (e.g. "
                                  f"{os.path.join(checkpoint, 'checkpoint_best.pt')})")
        if not os.path.isfile(checkpoint):
            raise OnboardingError(not_a_file(checkpoint) or f"checkpoint not found: {checkpoint}")
        if os.pathsep in os.path.basename(checkpoint):
            # fairseq's hub reads a file name as checkpoints separated by ':' (an ensemble): 'co' and 'lon.pt'
            raise OnboardingError(f"checkpoint {checkpoint}: fairseq reads a file name holding {os.pathsep!r} as "
                                  f"several checkpoints (an ensemble): rename the file, or link it under a name "
                                  f"without {os.pathsep!r} (ln -s)")
        before = _file_identity(checkpoint)
        # the search's stop: a generation default of the translator (a checkpoint saved before the option existed
        # has no such key for fairseq to override, which would drop it without a word)
        beam_stop = overrides.pop("beam_stop", None)
        if beam_stop is not None and beam_stop not in BEAM_STOPS:
            raise OnboardingError(f"beam_stop must be one of {', '.join(BEAM_STOPS)}, got {beam_stop!r}")
        state = read_checkpoint(checkpoint)  # what save() keeps of it: the same file, checked below
        check_registered(state, checkpoint)  # a variant of another package: say to import it (--user-dir)
        _check_overrides(overrides, state.get("cfg"), checkpoint)
        # fairseq-interactive's speakers, where the training command line gave them, are left out, as the
        # onboarding commands leave them out (SpeakerCheckpoint.load)
        loaded = hub_utils.from_pretrained(os.path.dirname(os.path.abspath(checkpoint)),
                                           checkpoint_file=os.path.basename(checkpoint),
                                           data_name_or_path=os.path.abspath(data), speaker=None,
                                           speaker_per_line=False, **overrides)
        if _file_identity(checkpoint) != before:
            raise OnboardingError(f"{checkpoint} was replaced while it was being loaded: load it again")
        translator = cls._of(loaded["args"], loaded["task"], loaded["models"], checkpoint, fit, state)
        # raw text in, raw text out: the task builds the checkpoint's preprocessing where tokenizer=/bpe= are not
        # given (fairseq's hub builds only those)
        hub, cfg = translator.hub, loaded["args"]
        hub.tokenizer, hub.bpe = hub.task.build_tokenizer(cfg.tokenizer), hub.task.build_bpe(cfg.bpe)
        if beam_stop is not None:
            with open_dict(hub.cfg.generation):
                hub.cfg.generation.beam_stop = beam_stop
        return translator

    @classmethod
    def from_checkpoint(cls, opened: SpeakerCheckpoint, fit: Optional[FitOptions] = None) -> "SpeakerTranslator":
        """A translator of a checkpoint opened with :meth:`SpeakerCheckpoint.load` (whose errors say
        which file or data folder is wrong)."""
        return cls._of(opened.state["cfg"], opened.task, [opened.model], opened.path, fit, opened.state)

    @classmethod
    def _of(cls, cfg, task, models, checkpoint: str, fit: Optional[FitOptions], state: dict) -> "SpeakerTranslator":
        hub = hub_utils.GeneratorHubInterface(cfg, task, models)
        hub.eval()
        return cls(hub, checkpoint, fit, state)

    # -- translating --------------------------------------------------------------------------------
    @property
    def task(self):
        return self.hub.task

    @property
    def model(self):
        return self.hub.models[0]

    @property
    def speakers(self) -> List[str]:
        """The speakers the model knows, in the order of their rows."""
        with self._lock:
            return list(self.task.speaker_dictionary.names)

    def _not_lookalikes(self, labels: List[str]) -> List[str]:
        """``labels`` if none looks like a speaker of the model without being it (invisible characters added, another
        normalization, another space: docs/reliability.md, "Speaker labels"): such a label would silently get the
        unknown-speaker policy instead of the speaker meant."""
        dictionary = self.task.speaker_dictionary
        for i, label in enumerate(labels):
            if not label.strip():
                raise OnboardingError(f"speakers[{i}] is {'empty' if not label else 'only whitespace'}: give a "
                                      f"speaker's name (an unknown one gets the unknown-speaker policy)")
            twin = dictionary.lookalike(label) if label not in dictionary else None
            if twin is not None:
                raise OnboardingError(f"speakers[{i}]: {label!r} looks like {twin!r}, a speaker of the model, but is "
                                      f"not it (invisible characters, another space or another Unicode normalization): "
                                      f"write {twin!r}")
        return labels

    @_serialized
    def translate(self, sentences: Sentences, speakers: Sentences, beam: Optional[int] = None,
                  **kwargs) -> Union[str, List[str]]:
        """Translate each sentence as its speaker (one name for all, or one per sentence). Speakers the
        model does not know get what the task's ``unknown_speaker`` says (the mean speaker by default).
        A single sentence gives a single translation."""
        hypotheses = self._search(sentences, speakers, beam, None, kwargs)
        out = [self.hub.decode(best[0]["tokens"]) for best in hypotheses]
        return out[0] if isinstance(sentences, str) else out

    def _search(self, sentences: Sentences, speakers: Sentences, beam: Optional[int], nbest: Optional[int],
                options: dict) -> List[List[dict]]:
        """The beam search of :meth:`translate` and :meth:`translate_nbest`, every argument checked first (``beam``:
        the translator's own where None; ``nbest``: checked against the beam where given): each sentence's
        hypotheses, best first."""
        batch = _not_blank(_as_list(sentences))
        beam = _checked_beam(self.hub.cfg.generation.beam if beam is None else beam)
        if nbest is not None:
            _checked_nbest(nbest, beam)
        options = _checked_options(options, self.hub.cfg.generation)
        tokens = self._encoded(batch)
        _checked_step_args(options, len(batch), len(self.task.target_dictionary))
        self.task.set_inference_speakers(self._not_lookalikes(_per_sentence(speakers, len(batch))))
        return self.hub.generate(tokens, beam, **options)

    def source_lengths(self, sentences: Sequence[str]) -> List[int]:
        """How many tokens the model reads of each sentence (its tokenizer and BPE, the end of sentence); a sentence
        longer than the model takes is refused, naming its place in ``sentences``."""
        return [len(tokens) for tokens in self._encoded(list(sentences))]

    def _encoded(self, batch: List[str]) -> List[torch.Tensor]:
        """Each sentence as the model's token ids (the hub's ``encode``); one longer than the model takes is refused,
        naming it (fairseq's batching ends in an assertion or an exception)."""
        tokens = [self.hub.encode(sentence) for sentence in batch]
        positions = self.hub.max_positions
        positions = positions[0] if isinstance(positions, tuple) else positions
        max_tokens = self.hub.cfg.dataset.max_tokens
        for i, sentence in enumerate(tokens):
            for limit, what in ((positions, "source positions the model takes"),
                                (max_tokens, "tokens of a batch (max_tokens)")):
                if limit is not None and len(sentence) > limit:
                    raise OnboardingError(f"sentences[{i}]: {len(sentence)} tokens (with the end of sentence), more "
                                          f"than the {int(limit)} {what}: split it into sentences")
        return tokens

    @_serialized
    def translate_nbest(self, sentences: Sequence[str], speakers: Sentences, beam: Optional[int] = None, nbest: int = 1,
                        **kwargs) -> List[List[Tuple[str, float]]]:
        """The ``nbest`` best translations of each sentence as its speaker, best first, each with fairseq's score
        (the mean log-probability of its tokens, with their speaker's words' bias in a model that remembers them);
        the first is what :meth:`translate` gives."""
        hypotheses = self._search(sentences, speakers, beam, nbest, kwargs)
        return [[(self.hub.decode(h["tokens"]), float(h["score"])) for h in best[:nbest]] for best in hypotheses]

    @_serialized
    def translate_nbest_known(self, sentences: Sequence[str], speakers: Sentences, beam: Optional[int] = None,
                              nbest: int = 1, **kwargs) -> Tuple[List[List[Tuple[str, float]]], List[bool]]:
        """:meth:`translate_nbest`, and for each sentence whether the model knew its speaker when it was translated
        (False: the speaker got the unknown-speaker policy). Both come from one call, holding the translator: a
        speaker another thread imports meanwhile is known to both or to neither, so the answer says which rows
        were read."""
        labels = _per_sentence(speakers, len(_as_list(sentences)))
        known = [label in self.task.speaker_dictionary for label in labels]
        return self.translate_nbest(sentences, labels, beam=beam, nbest=nbest, **kwargs), known

    # -- onboarding ---------------------------------------------------------------------------------
    @property
    def adapter(self) -> SpeakerAdapter:
        if self._adapter is None:
            self._adapter = self._new_adapter(self.model, self.task)
        return self._adapter

    def _new_adapter(self, model, task) -> SpeakerAdapter:
        """The adapter of ``model`` (this translator's, or a copy of it: :meth:`fit_speaker`)."""
        return SpeakerAdapter(model, task, self._fit,
                              prior=prior_of_checkpoint(self._state, adaptable_bias(model, task)))

    def encode_pairs(self, sources: Sentences, targets: Sentences, named: Tuple[str, str] = ("sources", "targets")):
        """Token ids of raw sentence pairs, tokenized and BPE-encoded as the model's inputs are (the targets with
        the target language's tokenization rules, where the tokenizer has languages: Moses); ``named``: the two
        lists' names in a refusal."""
        source_name, target_name = named
        sources, targets = _as_list(sources, source_name), _as_list(targets, target_name)
        check_pair_counts(sources, targets, named)
        tokenizer = self.hub.tokenizer
        if self._target_tokenizer is None or self._target_tokenizer[0] is not tokenizer:
            self._target_tokenizer = (tokenizer, preprocessing.for_target(tokenizer))
        target_tokenizer = self._target_tokenizer[1]
        sources = [self.hub.apply_bpe(self.hub.tokenize(x)) for x in _not_blank(sources, source_name)]
        targets = [self.hub.apply_bpe(target_tokenizer.encode(x) if target_tokenizer is not None else x)
                   for x in _not_blank(targets, target_name)]
        return self.adapter.encode(sources, targets)

    @_serialized
    def add_speaker(self, name: str, sources: Sentences, targets: Sentences, heldout_sources: Sentences = (),
                    heldout_targets: Sentences = (), replace: bool = False) -> FitReport:
        """Learn a speaker's parameters from their sentences and their translations (raw text, tokenized
        and BPE-encoded as the model's inputs are); a known name needs ``replace=True``."""
        if not isinstance(replace, bool):  # "no" would replace
            raise OnboardingError(f"replace must be True or False, got {replace!r}")
        heldout = self._heldout(name, heldout_sources, heldout_targets)
        return self.adapter.adapt({name: self.encode_pairs(sources, targets)}, heldout, replace=replace)[name]

    def _heldout(self, name: str, sources: Sentences, targets: Sentences):
        """The held-out pairs of ``name`` as a fit takes them, or None where none are given (sources without targets,
        or targets without sources, are refused by :meth:`encode_pairs`)."""
        return ({name: self.encode_pairs(sources, targets, ("heldout_sources", "heldout_targets"))}
                if _as_list(sources, "heldout_sources") or _as_list(targets, "heldout_targets") else None)

    def fit_speaker(self, name: str, sources: Sentences, targets: Sentences, heldout_sources: Sentences = (),
                    heldout_targets: Sentences = ()) -> Tuple["SpeakerVectors", FitReport]:
        """A speaker fitted on their sentences as :meth:`add_speaker` fits them, without putting them in the
        model: their rows, for :meth:`import_speakers` (one short locked call), and the fit's report.

        The fit runs on a copy of the model that shares its weights and has its own speaker table and speaker
        dictionary; the translator is held only while the copy is taken, so translations go on during the fit.
        A name the model knows is fitted again from its sentences alone (``replace``)."""
        from fairseq_speaker.onboarding.vectors import speaker_vectors

        with self._lock:  # copies of a table no call is changing
            self.adapter  # noqa: B018  (the model's own, made once: it encodes the sentences below)
            task = self.task.copy_with_own_speakers()
            model = _fitting_copy(self.model, keep=(task.source_dictionary, task.target_dictionary))
            adapter = self._new_adapter(model, task)
            adapter.share_starts(self.adapter)  # the known speakers where a fit starts, made once for all copies
        pairs = self.encode_pairs(sources, targets)
        heldout = self._heldout(name, heldout_sources, heldout_targets)
        report = adapter.adapt({name: pairs}, heldout, replace=name in task.speaker_dictionary)[name]
        self.adapter.share_starts(adapter)
        return speaker_vectors(adapter.bias, [name], task.target_dictionary, model_label=self.checkpoint,
                               words=speaker_words_of(model)), report

    @_serialized
    def update_speaker(self, name: str, sources: Sentences, targets: Sentences) -> FitReport:
        """One or a few more sentences of a speaker the model knows (a post-edit, a correction): a warm-started refit.
        A name the model does not know is refused (a misspelt name would become a new speaker): :meth:`add_speaker`
        adds one."""
        if not isinstance(name, str) or name not in self.task.speaker_dictionary:
            raise OnboardingError(f"update_speaker: no speaker {name!r} in the model ({len(self.speakers)} speakers: "
                                  f"translator.speakers lists them); add_speaker(name, sources, targets) adds a new "
                                  f"one")
        return self.adapter.update(name, self.encode_pairs(sources, targets))

    @_serialized
    def export_speakers(self, path: str, names: Optional[Sequence[str]] = None):
        """Write the parameters of ``names`` (default: all speakers) to a portable ``.npz`` file."""
        from fairseq_speaker.onboarding.vectors import save_speaker_vectors

        names = _name_list(names, "export_speakers", empty=False) if names is not None else self.speakers
        bias = adaptable_bias(self.model, self.task, self.checkpoint)
        return save_speaker_vectors(path, bias, names, self.task.target_dictionary, words=speaker_words_of(self.model))

    @_serialized
    def speaker_vectors(self, names: Optional[Sequence[str]] = None) -> "SpeakerVectors":
        """The parameters of ``names`` (default: all speakers) in memory, as :meth:`export_speakers` writes them."""
        from fairseq_speaker.onboarding.vectors import speaker_vectors

        names = _name_list(names, "speaker_vectors", empty=False) if names is not None else self.speakers
        bias = adaptable_bias(self.model, self.task, self.checkpoint)
        return speaker_vectors(bias, names, self.task.target_dictionary, model_label=self.checkpoint,
                               words=speaker_words_of(self.model))

    @_serialized
    def import_speakers(self, path: Union[str, "SpeakerVectors"], replace: bool = False) -> List[str]:
        """Add (or with ``replace``, overwrite) the speakers of a file written by :meth:`export_speakers` (or of
        :meth:`speaker_vectors` in memory); returns their names. Rows of an incompatible model are refused."""
        from fairseq_speaker.onboarding.vectors import SpeakerVectors, import_vectors, load_speaker_vectors

        if not isinstance(replace, bool):
            raise OnboardingError(f"import_speakers: replace must be True or False, got {replace!r}")
        if isinstance(path, os.PathLike):
            path = os.fspath(path)
        if not isinstance(path, (str, SpeakerVectors)):
            raise OnboardingError(f"import_speakers: give the path of a speaker vectors file (or the SpeakerVectors of "
                                  f"speaker_vectors()), got {type(path).__name__} {path!r:.80}")
        vectors = load_speaker_vectors(path) if isinstance(path, str) else path
        import_vectors(vectors, self.model, self.task, replace, where=self.checkpoint)
        return list(vectors.names)

    @_serialized
    def speaker_traits(self, names: Optional[Sequence[str]] = None) -> Optional[Dict[str, List[SpeakerTrait]]]:
        """What each speaker's words suggest of them (``names``, default every speaker; names the model does not know
        are left out): for each trait of the model's kinds of speaker with more than one kind, of which the speaker
        said at least one alternative, a :class:`SpeakerTrait`. None for a model that keeps no kinds of speaker (no
        memory of its speakers' words, or one built with ``--no-kinds`` or where no trait has two kinds)."""
        if names is not None:
            names = _name_list(names, "speaker_traits")
        memory = speaker_words_of(self.model)
        traits = [(i, trait) for i, trait in enumerate(memory.kinds if memory is not None else [], 1)
                  if len(trait.prior) > 1]
        if memory is None or not traits:
            return None
        dictionary = self.task.speaker_dictionary
        names = [name for name in (names if names is not None else dictionary.names) if name in dictionary]
        said_words = [memory.words_of(dictionary.index(name)) for name in names]
        ids = np.concatenate(said_words).astype(np.int64) if said_words else np.zeros(0, np.int64)
        said = scipy.sparse.csr_matrix((np.ones(len(ids)), ids, np.cumsum([0] + [len(w) for w in said_words])),
                                       shape=(len(names), memory.vocab))  # [N, V]: who said what
        out: Dict[str, List[SpeakerTrait]] = {name: [] for name in names}
        target = self.task.target_dictionary
        for number, trait in traits:
            posterior = kind_posteriors(trait, said)  # [N, K]
            evidence = np.asarray(said[:, np.concatenate(trait.choices)].sum(axis=1)).ravel()
            described = {}
            for name, row, count in zip(names, posterior, evidence):
                if count == 0:  # said none of its alternatives: the prior, nothing the speaker showed
                    continue
                kind = int(np.argmax(row))
                if kind not in described:
                    described[kind] = tuple(target[i] for i in kind_words(trait, kind))
                out[name].append(SpeakerTrait(number, kind + 1, len(trait.prior), float(row[kind]), int(count),
                                              described[kind]))
        return out

    def sentence_words(self, pairs: Sequence[Tuple[str, str]]):
        """The word ids of the translations of raw sentence ``pairs`` as the model's memory of its speakers' words
        keeps a speaker's (``fairseq-speaker-words``); None for a model without one."""
        words = speaker_words_of(self.model)
        if words is None or not pairs:
            return None
        encoded = self.encode_pairs([source for source, _ in pairs], [target for _, target in pairs])
        return words.ids([target for _, target in encoded])

    @_serialized
    def forget_words(self, names: Sequence[str]) -> None:
        """The model's memory of its speakers' words (``fairseq-speaker-words``; nothing without one) forgets those
        of ``names`` (a list of speakers the model knows): a speaker deleted from a service must not shape the others'
        neighbours. A string instead of a list, an empty list, or a name the model does not know, is refused: nothing
        would be forgotten."""
        names = _name_list(names, "forget_words", empty=False, every=False)
        unknown = [name for name in names if name not in self.task.speaker_dictionary]
        if unknown:
            raise OnboardingError(f"forget_words: no speaker(s) {', '.join(map(repr, unknown[:5]))} in the model "
                                  f"(translator.speakers lists them): nothing was forgotten")
        words = speaker_words_of(self.model)
        if words is not None:
            words.forget([self.task.speaker_dictionary.index(name) for name in names])

    @_serialized
    def save(self, path: str) -> None:
        """Write a checkpoint with every speaker added here, for fairseq-generate / fairseq-interactive."""
        SpeakerCheckpoint(self.checkpoint, dict(self._state), self.task, self.model).save(path)
