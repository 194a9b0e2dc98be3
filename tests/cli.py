"""Running the real fairseq command lines in tests: tiny toy data, tiny models, one thread. A command runs as a
process (:func:`run`) or, where the check is of what it computes, through its main in the test process
(:func:`run_here`, :func:`call_main`: no interpreter start, no imports)."""

import contextlib
import importlib
import io
import logging
import os
import shutil
import subprocess
import sys
import warnings
from types import SimpleNamespace
from typing import Dict

import torch

from fairseq_speaker import USER_DIR, commands
from fairseq_speaker.command_registry import main_of
from fairseq_speaker.commands import family
from fairseq_speaker.errors import USER_ERROR_STATUS, user_error_in
from fairseq_speaker.models import FAMILY_REGISTRY
from fairseq_speaker.runtime import LIBRARY_NOTICES
from fairseq_speaker.toy.corpus import write_corpus
from tests.process_state import kept

BIN = os.path.dirname(sys.executable)
#: tiny sizes of each model family (its ``tiny`` sizes: 8-16 dims)
TINY = {name: f.scale_args("tiny") for name, f in FAMILY_REGISTRY.items()}
TINY_VARIANTS = ["--speaker-rank", "3", "--speaker-embed-dim", "3"]
# 37 test sentences: not a multiple of 8, so fairseq's dropped-last-batch bug would show
SIZES = {"train": 160, "valid": 40, "test": 37}
GENERATE = ["--beam", "5", "--max-len-b", "6"]


def run(command: str, args, check: bool = True, stdin=None, cwd=None, env=None) -> subprocess.CompletedProcess:
    """Run ``fairseq-<command>`` (or ``fairseq-speaker-<command>``: pass its full name) with one thread."""
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", **(env or {}))
    name = command if command.startswith("fairseq-speaker-") else f"fairseq-{command}"
    proc = subprocess.run([os.path.join(BIN, name), *args], input=stdin, env=env, cwd=cwd,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{name} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return proc


#: the parser of each fairseq command :func:`run_here` runs
HERE_PARSERS = {"train": "get_training_parser", "generate": "get_generation_parser",
                "interactive": "get_interactive_generation_parser"}


def _fairseq_cli(command: str):
    """``fairseq_cli.<command>``, imported without the logging configuration its import makes in a fresh
    process (``logging.basicConfig`` to standard output): this process's logging stays as it was."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    module = importlib.import_module(f"fairseq_cli.{command}")
    for handler in root.handlers:
        if handler not in handlers:
            root.removeHandler(handler)
    root.setLevel(level)
    return module


def _as_a_new_process() -> None:
    """Clear what fairseq and the package keep between runs of one process (the best validation loss so far, early
    stopping's count, the optimizer's messages said once a process), as a new process would have it."""
    from fairseq import checkpoint_utils

    from fairseq_speaker.optim import speaker_rows

    for function, names in ((checkpoint_utils.save_checkpoint, ("best",)),
                            (_fairseq_cli("train").should_stop_early, ("best", "num_runs"))):
        for name in names:
            if hasattr(function, name):
                delattr(function, name)
    speaker_rows._said.clear()


def run_here(command: str, args, stdin: str = "") -> SimpleNamespace:
    """``fairseq-<command> args`` (train, generate or interactive) in this process, through the function its
    command line calls: the same options, code and files as :func:`run`, without a process's start (seconds of
    imports). For the checks of what the command computes; what a process does itself (its exit status and
    one-line errors, its hooks, its quiet logging) is checked through :func:`run`.

    Returns ``stdout`` (what the command printed: fairseq-generate's ``H-`` lines, ...) and ``log`` (fairseq's
    log lines, formatted as its command lines print them). An error is raised as in the command, not turned
    into an exit status. What fairseq keeps between runs of one process is cleared first. The batches are read
    in this process (``--num-workers 0``: the same batches, no worker process forked from the test process,
    whose exit fairseq's data loader waits seconds for).
    """
    from fairseq import distributed_utils, options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    module = _fairseq_cli(command)
    _as_a_new_process()
    log, printed = io.StringIO(), io.StringIO()
    handler = logging.StreamHandler(log)
    handler.setFormatter(logging.Formatter("%(asctime)s | %(levelname)s | %(name)s | %(message)s"))
    stdin_before = sys.stdin
    sys.stdin = io.StringIO(stdin)
    try:
        with kept(), contextlib.redirect_stdout(printed):
            logging.getLogger().addHandler(handler)
            logging.getLogger().setLevel(logging.INFO)
            for notice in LIBRARY_NOTICES:  # held back as in fairseq's command lines with the package
                warnings.filterwarnings("ignore", message=notice, category=UserWarning)
            parser = getattr(options, HERE_PARSERS[command])()
            if command == "generate":  # as fairseq-generate's cli_main
                parser.add_argument("--arch", "-a", metavar="ARCH", default="wav2vec2")
            cfg = convert_namespace_to_omegaconf(options.parse_args_and_arch(parser, [str(a) for a in args]))
            cfg.dataset.num_workers = 0  # the same batches, read here: no process forked from the test process
            distributed_utils.call_main(cfg, module.main)
    finally:
        sys.stdin = stdin_before
    return SimpleNamespace(stdout=printed.getvalue(), log=log.getvalue())


def hydra_train_here(config_dir: str, config: str, overrides) -> None:
    """``fairseq-hydra-train --config-dir CONFIG_DIR --config-name CONFIG OVERRIDES`` in this process: the
    configuration composed by hydra's compose API as the command's ``hydra.main`` composes it (fairseq's schema
    stored under the config's name, hydra 1.1's behaviour), then trained by the function the command calls. A
    process of its own composes the config before it imports the package (--user-dir): test_cli.py runs one so."""
    from fairseq.dataclass.initialize import hydra_init
    from hydra import compose, initialize_config_dir

    with kept():
        for notice in LIBRARY_NOTICES:
            warnings.filterwarnings("ignore", message=notice, category=UserWarning)
        module = _fairseq_cli("hydra_train")  # its hydra.main warns when imported
        _as_a_new_process()
        hydra_init(config)
        with initialize_config_dir(config_dir=config_dir, version_base="1.1"):
            cfg = compose(config_name=config, overrides=list(overrides))
        cfg.dataset.num_workers = 0  # as in run_here
        module._hydra_main(cfg)


def call_main(command, args, check: bool = True) -> SimpleNamespace:
    """``command``'s main with ``args`` in this process: one of ours by name (``fairseq-speaker-adapt``, as
    :func:`run`; its module from the command registry) or any ``main`` function (an example script's). It ends as
    its process would: ``returncode`` (``sys.exit``'s status; 1 for ``sys.exit(MESSAGE)``, the message then on
    standard error; a user error left to the exception hook the command installed ends as the hook ends it), what
    it printed on ``stdout`` and ``stderr``; with ``check``, a failure raises as in :func:`run`. What a command sets
    process-wide (the logging configuration, the warning filters, the exception hook, the thread count) is put
    back. Any other exception is raised (in a process: a traceback)."""
    name, main = (command, main_of(command)) if isinstance(command, str) else (command.__module__, command)
    out, err = io.StringIO(), io.StringIO()
    returncode = 0
    with kept(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main([str(a) for a in args])
        except SystemExit as e:
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
                returncode = 1
            else:
                returncode = e.code or 0
        except Exception as e:  # what the exception hook a command installs does with a user error
            if not (getattr(sys.excepthook, "handles_user_errors", False) and user_error_in(e) is not None):
                raise
            print(f"error: {user_error_in(e)}", file=sys.stderr)
            returncode = USER_ERROR_STATUS
    if check and returncode != 0:
        raise AssertionError(f"{name} failed ({returncode}):\n{err.getvalue()[-3000:]}")
    return SimpleNamespace(returncode=returncode, stdout=out.getvalue(), stderr=err.getvalue())


def train_args(data: str, save_dir: str, system: str, *extra: str):
    """fairseq-train arguments for ``system`` (``ARCH[:VARIANT][+spk_token]``) at tiny sizes, 2 epochs."""
    return commands.train_args(data, save_dir, commands.system_args(system), *TINY[commands.family(system)],
                               *TINY_VARIANTS, "--optimizer", "adam", "--lr", "0.005", "--clip-norm", "1.0",
                               "--max-tokens", "4000", "--max-epoch", "2", "--no-progress-bar", "--seed", "1", *extra)


def generate_args(data: str, checkpoint: str, *extra: str):
    return commands.generate_args(data, checkpoint, *GENERATE, *extra)


def make_toy(root: str) -> Dict[str, str]:
    """``raw/`` text and speaker files, ``bin/`` binarized with the speaker files copied beside."""
    raw, data = os.path.join(root, "raw"), os.path.join(root, "bin")
    write_corpus(raw, SIZES, num_speakers=8, seed=2)
    run("preprocess", ["--source-lang", "en", "--target-lang", "fr", "--trainpref", f"{raw}/train",
                       "--validpref", f"{raw}/valid", "--testpref", f"{raw}/test", "--destdir", data,
                       "--workers", "1"])
    for split in SIZES:
        shutil.copy(os.path.join(raw, f"{split}.spk"), data)
    return {"root": root, "raw": raw, "bin": data}


def doctored_checkpoint(checkpoint: str, path: str, boosts: Dict[str, str], tgt_dict_path: str) -> str:
    """A copy of a full-bias checkpoint (either family) in which each named speaker's bias strongly
    favours one word."""
    state = torch.load(checkpoint, weights_only=True)
    names = state["task_state"]["speaker_dictionary"]["names"]
    words = [line.split()[0] for line in open(tgt_dict_path, encoding="utf-8")]
    weight = state["model"]["decoder.speaker_bias.weight"]
    for speaker, word in boosts.items():
        weight[names.index(speaker), 4 + words.index(word)] += 100.0  # 4 special symbols come first
    torch.save(state, path)
    return path


def assert_user_error(proc: subprocess.CompletedProcess) -> None:
    """A user's mistake ends in one message (``error: ...``), without a Python traceback."""
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: "), proc.stderr[-3000:]


def copy_data(toy: Dict[str, str], tmp_path, name: str = "bin") -> str:
    """A private copy of the binarized data, to break; without a speaker dictionary."""
    dest = str(tmp_path / name)
    shutil.copytree(toy["bin"], dest, ignore=shutil.ignore_patterns("dict.spk.txt"))
    return dest


__all__ = ["SIZES", "TINY", "USER_DIR", "assert_user_error", "call_main", "copy_data", "doctored_checkpoint", "family",
           "generate_args", "hydra_train_here", "make_toy", "run", "run_here", "train_args"]
