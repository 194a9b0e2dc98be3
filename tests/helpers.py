"""Tiny dictionaries, models and batches for the unit tests (8-16 dims, a dozen words)."""

import argparse
import contextlib
import dataclasses
import os
import re
import tempfile
from types import SimpleNamespace
from typing import Dict, List, Optional

import torch
from fairseq import options, utils
from fairseq.data import Dictionary
from fairseq.data.data_utils import collate_tokens
from fairseq.models import MODEL_REGISTRY

from fairseq_speaker.data import SpeakerDictionary
from fairseq_speaker.models import FAMILY_REGISTRY, ModelFamily, get_family
from fairseq_speaker.modules.speaker_bias import (
    SPEAKER_BIAS_REGISTRY,
    SpeakerBias,
    StateSites,
    build_speaker_bias,
    parse_variant_name,
)

#: the model families of the package (a family registered by a test is not among them)
FAMILIES = tuple(FAMILY_REGISTRY)
#: what the unit tests change of a family's declared "tiny" sizes (its ``scales["tiny"]``, a ``ModelSizes``): the
#: Transformer has two layers a side, so that what acts on each layer is seen on more than one
UNIT_TEST_SIZES: Dict[str, Dict[str, int]] = {"transformer": dict(layers=2)}


def _parsed(family: ModelFamily, size_flags: List[str]) -> argparse.Namespace:
    """What fairseq-train parses for ``family``'s base preset with ``size_flags``."""
    return options.parse_args_and_arch(options.get_training_parser(), [
        "data", "--task", "speaker_translation", "--arch", family.presets[0], *size_flags])


def tiny_options(family: str) -> Dict[str, object]:
    """The model options of ``family`` at its declared "tiny" sizes (with :data:`UNIT_TEST_SIZES`'s changes), by
    option name (``encoder_embed_dim``, ...), and every dropout of its base preset at 0: the options its size flags
    set, read from what fairseq-train parses."""
    declared = get_family(family)
    flags = declared.size_args(dataclasses.replace(declared.scales["tiny"], **UNIT_TEST_SIZES.get(family, {})))
    args = _parsed(declared, flags)
    named: Dict[str, object] = {}
    for flag in flags:
        dest = flag[2:].replace("-", "_") if flag.startswith("--") else None
        if dest is not None and hasattr(args, dest):
            named[dest] = getattr(args, dest)
    named.update({name: 0.0 for name, value in vars(args).items()
                  if name.endswith("dropout") and isinstance(value, float) and value})
    return named


#: model options of the unit tests per family of the package (a family registered by a test gets its "tiny" sizes,
#: without dropout, from :func:`tiny_model_args`)
TINY_MODELS = {name: tiny_options(name) for name in FAMILIES}
#: the third family, from a package of its own (fairseq's --user-dir)
LIGHTCONV_FAMILY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples",
                                "lightconv_family", "speaker_lightconv")
#: small options of every variant for the unit tests
TINY_VARIANT_OPTIONS = dict(speaker_rank=3, speaker_embed_dim=3)
#: a decoder's sites for the variants built alone (a variant acting on the state sizes its matrices by them):
#: an input of 5 and two layers, as a Transformer's
TINY_STATE_SITES = StateSites(input_dim=5, layer_dims=(4, 3))


def make_dictionary(num_words: int = 12) -> Dictionary:
    d = Dictionary()
    for i in range(num_words):
        d.add_symbol(f"w{i}")
    return d


def make_task(num_speakers: int = 4, num_words: int = 12):
    return SimpleNamespace(
        source_dictionary=make_dictionary(num_words),
        target_dictionary=make_dictionary(num_words + 3),
        speaker_dictionary=SpeakerDictionary([f"spk{i}" for i in range(num_speakers)]),
    )


_SCRATCH: List[tempfile.TemporaryDirectory] = []


def _scratch_folder() -> str:
    """A new folder for the files a variant needs to be built (e.g. a topic model of this call's
    dictionary), inside one folder per test process that is removed at exit (a folder per call, never
    removed, left thousands behind)."""
    if not _SCRATCH:
        _SCRATCH.append(tempfile.TemporaryDirectory(prefix="speaker-bias-"))
    return tempfile.mkdtemp(dir=_SCRATCH[0].name)


def variant_options(name: str, task, workdir: Optional[str] = None) -> Dict:
    """Options to build variant ``name`` (or ``a+b``) small: the tiny defaults, plus what each variant
    says it needs to be built (``SpeakerBias.example_options``, e.g. a topic model file)."""
    options = dict(TINY_VARIANT_OPTIONS)
    workdir = workdir or _scratch_folder()
    for part in parse_variant_name(name):
        options.update(SPEAKER_BIAS_REGISTRY[part].example_options(workdir, task.source_dictionary))
    return options


def randomize(module: torch.nn.Module, std: float = 2.0) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, std)


def build_bias(name: str, task, randomize_parameters: bool = True, sites: StateSites = TINY_STATE_SITES,
               **overrides):
    """The variant ``name`` on its own, for ``task``'s dictionaries, attached to ``sites`` (a decoder's)."""
    cfg = argparse.Namespace(**{**variant_options(name, task), **overrides})
    bias = build_speaker_bias(name, cfg, task.speaker_dictionary, task.target_dictionary, task.source_dictionary,
                              sites=sites)
    if randomize_parameters:
        randomize(bias)
    return bias


def formula(cls) -> str:
    """The parameter count a variant class states in its docstring (``Parameters: <formula>``)."""
    match = re.search(r"^\s*Parameters:\s*(.+?)\s*$", cls.__doc__ or "", re.MULTILINE)
    assert match, f"{cls.__name__}'s docstring must state its parameter count as 'Parameters: <formula>'"
    return match.group(1)


def expected_parameters(bias: SpeakerBias) -> int:
    """The number of parameters ``bias`` should have by its docstring's formula, evaluated with S (speakers),
    V (vocabulary), the symbols its options declare (``metadata["symbol"]``) and its ``formula_symbols()``."""
    text = formula(type(bias))
    if text.startswith("the sum of its parts"):
        return sum(expected_parameters(part) for part in bias.parts.values())
    symbols = {"S": bias.num_speakers, "V": bias.vocab_size, **bias.formula_symbols()}
    for f in dataclasses.fields(bias.config_class):
        if "symbol" in f.metadata:
            symbols[f.metadata["symbol"]] = getattr(bias.cfg, f.name)
    return eval(text, {"__builtins__": {}}, symbols)


def lightconv_family() -> ModelFamily:
    """The ``lightconv`` family of examples/lightconv_family, imported as fairseq's ``--user-dir`` imports it.
    Its registration stays for the rest of the test process (a module registers once): no test compares the
    registry with a fixed list of families; :data:`FAMILIES`, fixed when this module is imported, does not list it."""
    utils.import_user_module(argparse.Namespace(user_dir=LIGHTCONV_FAMILY))
    return get_family("lightconv")


def tiny_model_args(family: str) -> argparse.Namespace:
    """The options of a tiny model of ``family`` (its preset's defaults): :data:`TINY_MODELS`, or, for another
    family, what fairseq-train parses for its base preset at its declared "tiny" sizes, without dropout."""
    if family in TINY_MODELS:
        return argparse.Namespace(**TINY_MODELS[family])
    args = _parsed(get_family(family), get_family(family).scale_args("tiny"))
    args.dropout = 0.0
    return args


def make_model(speaker_bias: str = "full", num_speakers: int = 4, task=None, randomize_bias: bool = True,
               family: str = "lstm", **overrides):
    """A model of ``family`` with tiny dims, built as its family's presets build it (the family's defaults,
    then its model's ``build_model``); speaker-bias parameters random unless ``randomize_bias`` is False."""
    task = task or make_task(num_speakers)
    args = tiny_model_args(family)
    for key, value in {**variant_options(speaker_bias, task), **overrides, "speaker_bias": speaker_bias}.items():
        setattr(args, key, value)
    declared = get_family(family)
    declared.architecture(args)
    model = MODEL_REGISTRY[declared.model].build_model(args, task)
    if randomize_bias:
        randomize(model.speaker_bias)
    return model.eval()


def random_batch(dictionary: Dictionary, lengths: List[int], left_pad: bool = True,
                 generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Sentences of random words ending in EOS, padded to a tensor ``[batch, max_len]``."""
    rows = []
    for n in lengths:
        words = torch.randint(dictionary.nspecial, len(dictionary), (n - 1,), generator=generator)
        rows.append(torch.cat([words, torch.tensor([dictionary.eos()])]))
    return collate_tokens(rows, dictionary.pad(), left_pad=left_pad)


#: the frozen 0.2.0 checkpoints of every variant, with their dictionaries and test sentences
FROZEN_0_2_0 = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "checkpoints", "0.2.0")


def open_frozen(system: str):
    """A frozen 0.2.0 checkpoint opened for onboarding (:class:`SpeakerCheckpoint`)."""
    from fairseq_speaker.onboarding.checkpoint import SpeakerCheckpoint

    return SpeakerCheckpoint.load(os.path.join(FROZEN_0_2_0, f"{system}.pt"), data=FROZEN_0_2_0,
                                  overrides={"source_lang": "en", "target_lang": "fr"})


def frozen_pairs(checkpoint, speaker: str):
    """The token ids of ``speaker``'s test sentences of the 0.2.0 fixtures, in ``checkpoint``'s dictionaries."""
    from fairseq_speaker.data import read_lines

    task = checkpoint.task
    rows = zip(*(read_lines(os.path.join(FROZEN_0_2_0, f"test.{x}")) for x in ("en", "fr", "spk")))
    return [(task.src_dict.encode_line(s, add_if_not_exist=False).long(),
             task.tgt_dict.encode_line(t, add_if_not_exist=False).long()) for s, t, k in rows if k == speaker]


def refused(main, argv, capsys) -> str:
    """Run a command's ``main(argv)`` that must refuse it as a user error: exit status 2 and one message on
    standard error, returned."""
    import pytest

    with pytest.raises(SystemExit) as exit:
        main(argv)
    assert exit.value.code == 2, exit.value.code
    return capsys.readouterr().err.strip().splitlines()[-1]


def held_translations(translator, monkeypatch):
    """Make ``translator``'s beam searches wait for the returned event ``release`` (``entered`` is set once one has
    begun; ``calls`` lists the sentences of each): a service's requests then queue up behind the one held."""
    import threading

    release, entered, calls = threading.Event(), threading.Event(), []
    real = translator.translate_nbest

    def held(sentences, *args, **kwargs):
        calls.append(list(sentences))
        entered.set()
        assert release.wait(timeout=60), "the test never released the translator"
        return real(sentences, *args, **kwargs)

    monkeypatch.setattr(translator, "translate_nbest", held)
    return release, entered, calls


def wait_until(condition, seconds: float = 30) -> None:
    """Wait for ``condition()`` to hold (polled), failing after ``seconds``."""
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the condition did not hold in time"
        time.sleep(0.01)


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing listens on (for a real server a test starts)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def real_server(args, log_path, env: Optional[Dict[str, str]] = None, seconds: float = 120):
    """``fairseq-speaker-serve ARGS --port PORT`` as a process (one thread), its output written to ``log_path``, from
    the moment it answers ``GET /health`` with 200: yields the process and its base URL. Killed on leaving if it still
    runs (a test that stops it checks how it stopped)."""
    import subprocess
    import sys
    import time
    import urllib.error

    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", **(env or {}))
    command = os.path.join(os.path.dirname(sys.executable), "fairseq-speaker-serve")
    with open(log_path, "w+") as log:
        server = subprocess.Popen([command, *map(str, args), "--port", str(port)], env=env, stdout=log,
                                  stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + seconds
            while True:
                assert server.poll() is None, open(log_path).read()[-3000:]
                try:
                    if http_call(base + "/health")[0] == 200:
                        break
                except (urllib.error.URLError, ConnectionError):
                    pass
                assert time.monotonic() < deadline, f"the server did not answer /health within {seconds} s"
                time.sleep(0.2)
            yield server, base
        finally:
            if server.poll() is None:
                server.kill()
                server.wait(timeout=30)


def http_call(url: str, body=None, method: Optional[str] = None, headers: Optional[Dict[str, str]] = None,
              timeout: float = 30):
    """(status, the JSON answer) of one HTTP request to a real server; ``body`` is sent as JSON."""
    import json
    import urllib.error
    import urllib.request

    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())
