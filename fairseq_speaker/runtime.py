"""How every command of the package runs: the CPU threads it computes with, and how much it says.

Threads. A process that computes (training, decoding, fitting speakers) uses one thread per core it may
use, divided among the processes that run at once; ``--threads N`` (our commands) or ``OMP_NUM_THREADS=N``
(any command, fairseq's included) chooses instead. Two processes of two threads each on two cores make
every one of them wait for the others at each matrix product: far slower than one thread each. The choice
is printed as one line on standard error when the command starts::

    threads: 2 (2 cores; --threads N to change)
    threads: 1 (OMP_NUM_THREADS=1)

The cores counted are those the process may run on (its CPU affinity and, in a container, its CPU quota),
at most torch's own default (the physical cores). ``fairseq-train``, ``fairseq-generate`` and
``fairseq-interactive`` with the ``speaker_translation`` task choose the same way when the task is set
up (:func:`threads_for_fairseq_command`; a distributed run divides the cores among its processes).

Output. Our commands say what they do, their results, and warnings a user can act on (a speaker that is
not in the model, a fit that diverged, ...). What the libraries log for their developers (fairseq's
INFO lines and configuration dumps, hydra's and torch's deprecation notices, ``pin_memory`` without a
GPU) is shown with ``--verbose`` only (:func:`configure_output`). In fairseq's own commands with the package
as ``--user-dir``, hydra's notices and an unrelated model's configuration dump are held back, fairseq's
other lines kept (:func:`quiet_fairseq_command`; ``LOGLEVEL=DEBUG`` shows everything).
"""

import argparse
import logging
import math
import os
import sys
import warnings
from dataclasses import dataclass
from typing import Iterable, List, Mapping, Optional, Sequence

#: the environment variable that chooses the threads of torch (and of every OpenMP library)
THREADS_VARIABLE = "OMP_NUM_THREADS"
#: fairseq's command lines that set up a task, by the module that runs them
FAIRSEQ_COMMANDS = ("train", "generate", "interactive", "validate", "hydra_train")


@dataclass(frozen=True)
class ThreadChoice:
    """A number of threads and why it was chosen."""

    threads: int
    reason: str

    def line(self) -> str:
        """What a command prints when it starts: ``threads: N (why)``."""
        return f"threads: {self.threads} ({self.reason})"


#: the choice this process made (None: none yet); a command run inside another keeps its caller's
_chosen: Optional[ThreadChoice] = None
#: torch's own default number of threads, read before this module changes it
_torch_default: Optional[int] = None


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity, lowered to its cgroup's CPU quota if it has one
    (a container given 2 CPUs of a 64-core machine)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        cores = os.cpu_count() or 1
    quota = _cgroup_quota()
    if quota is not None:
        cores = min(cores, max(1, math.ceil(quota)))
    return max(1, cores)


def _cgroup_quota() -> Optional[float]:
    """CPUs allowed by the cgroup (v2 ``cpu.max``, v1 ``cpu.cfs_quota_us``), or None without a quota."""
    for path, split in (("/sys/fs/cgroup/cpu.max", None),
                        ("/sys/fs/cgroup/cpu/cpu.cfs_quota_us", "/sys/fs/cgroup/cpu/cpu.cfs_period_us")):
        try:
            with open(path, encoding="ascii") as f:
                fields = f.read().split()
            if split is not None:
                with open(split, encoding="ascii") as f:
                    fields += f.read().split()
        except (OSError, ValueError):
            continue
        if len(fields) >= 2 and fields[0] not in ("max", "-1"):
            try:
                return int(fields[0]) / int(fields[1])
            except (ValueError, ZeroDivisionError):
                return None
        return None
    return None


def _torch_threads() -> int:
    global _torch_default
    import torch

    if _torch_default is None:
        _torch_default = torch.get_num_threads()
    return _torch_default


def _variable_threads(environ: Mapping[str, str]) -> Optional[int]:
    value = environ.get(THREADS_VARIABLE, "").strip()
    return int(value) if value.isdigit() and int(value) > 0 else None


def choose_threads(requested: Optional[int] = None, processes: int = 1, hint: str = "--threads N to change",
                   environ: Optional[Mapping[str, str]] = None, cores: Optional[int] = None,
                   torch_default: Optional[int] = None) -> ThreadChoice:
    """The threads of one of ``processes`` processes that compute at once.

    ``requested`` (``--threads``) if given; else ``OMP_NUM_THREADS`` if set (torch follows it); else the
    usable cores (:func:`usable_cores`, at most ``torch_default``, torch's own default) divided among the
    processes, at least 1. ``hint`` ends the reason of a default choice (how to choose another)."""
    if requested is not None:
        if requested < 1:
            raise ValueError(f"--threads must be at least 1, got {requested}")
        return ThreadChoice(requested, f"--threads {requested}")
    environ = os.environ if environ is None else environ
    variable = _variable_threads(environ)
    if variable is not None:
        return ThreadChoice(variable, f"{THREADS_VARIABLE}={variable}")
    cores = usable_cores() if cores is None else cores
    limit = _torch_threads() if torch_default is None else torch_default
    available = max(1, min(cores, limit))
    processes = max(1, processes)
    threads = max(1, available // processes)
    where = f"{available} cores" + (f" shared by {processes} processes" if processes > 1 else "")
    return ThreadChoice(threads, f"{where}; {hint}" if hint else where)


def apply_threads(choice: ThreadChoice) -> None:
    """Make ``choice`` this process's: torch's threads, and those of the BLAS and OpenMP libraries numpy and
    scikit-learn use (the speaker prior's and the topic model's fits)."""
    global _chosen
    import torch

    _torch_threads()  # read torch's default before changing it
    torch.set_num_threads(choice.threads)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # scikit-learn brings it; without it numpy keeps its own threads
        pass
    else:
        threadpool_limits(choice.threads)
    _chosen = choice


def chosen_threads() -> Optional[ThreadChoice]:
    """The choice this process made, or None."""
    return _chosen


def start_threads(requested: Optional[int] = None, processes: int = 1, hint: str = "--threads N to change",
                  stream=None) -> ThreadChoice:
    """Choose (:func:`choose_threads`), apply and print the threads of a command, once per process: a command
    run inside another (the demo's report) keeps its caller's choice unless given ``--threads``."""
    if requested is None and _chosen is not None:
        return _chosen
    choice = choose_threads(requested, processes, hint)
    apply_threads(choice)
    print(choice.line(), file=sys.stderr if stream is None else stream, flush=True)
    return choice


def fairseq_command() -> Optional[str]:
    """The fairseq command line this process runs (``generate`` for ``fairseq-generate`` or ``python -m
    fairseq_cli.generate``), or None (our commands, a Python session, a test)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    name = getattr(spec, "name", "") or ""
    if name.startswith("fairseq_cli."):
        name = name[len("fairseq_cli."):]
    else:
        program = os.path.basename(sys.argv[0]) if sys.argv and sys.argv[0] else ""
        name = program[len("fairseq-"):].replace("-", "_") if program.startswith("fairseq-") else ""
    return name if name in FAIRSEQ_COMMANDS else None


def threads_for_fairseq_command() -> Optional[ThreadChoice]:
    """In a fairseq command line (:func:`fairseq_command`) that has not chosen yet: choose the threads as our
    commands do (``OMP_NUM_THREADS=N`` to choose), the cores divided among a distributed run's processes,
    and print the choice (the first process of a distributed run). Elsewhere nothing: a library does not
    change the threads of the program that imports it."""
    if _chosen is not None or fairseq_command() is None:
        return None
    processes, rank = 1, 0
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            processes, rank = dist.get_world_size(), dist.get_rank()
    except (ImportError, RuntimeError):
        pass
    choice = choose_threads(None, processes, hint=f"{THREADS_VARIABLE}=N to change")
    apply_threads(choice)
    if rank == 0:
        print(choice.line(), file=sys.stderr, flush=True)
    return choice


#: what fairseq 0.12's own use of hydra and torch raises as Python warnings in every fairseq command, nothing a
#: user of the command can act on (hydra's deprecation notices; torch's about fairseq's ``pin_memory`` on a
#: machine without a GPU), as ``warnings`` message patterns
LIBRARY_NOTICES = (
    r"hydra\.experimental\.\w+\(\) is no longer experimental",
    r"\s*The version_base parameter is not specified",
    r"In '\w+': Usage of deprecated keyword in package header",
    r"\s*'\w+' is validated against ConfigStore schema",
    r"\s*The strict flag in the compose API is deprecated",
    r"'pin_memory' argument is set as true but no accelerator is found",
)
#: the fairseq commands whose configuration dump holds the options of a model that is not the one they run
#: (their ``--arch`` defaults to ``wav2vec2``; the model comes from the checkpoint)
DUMPS_ANOTHER_MODEL = ("generate", "interactive", "validate")


def _not_a_configuration_dump(record: logging.LogRecord) -> bool:
    """A logging filter: False for fairseq's INFO record of its whole configuration (a dict-like message)."""
    return not (record.levelno == logging.INFO and not isinstance(record.msg, str) and hasattr(record.msg, "keys"))


def quiet_fairseq_command(environ: Optional[Mapping[str, str]] = None) -> bool:
    """In a fairseq command line (:func:`fairseq_command`) that imports the package (``--user-dir``): hold back
    what fairseq's use of hydra and torch prints for no one (:data:`LIBRARY_NOTICES`, hydra's DEBUG lines) and, in
    ``fairseq-generate``, ``-interactive`` and ``-validate``, the configuration dump of an unrelated model
    (``wav2vec2``'s options). fairseq's progress and results lines stay. ``LOGLEVEL=DEBUG`` (fairseq's own
    switch) keeps everything. Returns whether anything was held back."""
    command = fairseq_command()
    environ = os.environ if environ is None else environ
    if command is None or environ.get("LOGLEVEL", "").strip().upper() == "DEBUG":
        return False
    for pattern in LIBRARY_NOTICES:
        warnings.filterwarnings("ignore", message=pattern, category=UserWarning)
    logging.getLogger("hydra").setLevel(logging.INFO)
    if command in DUMPS_ANOTHER_MODEL:
        logger = logging.getLogger(f"fairseq_cli.{command}")
        if _not_a_configuration_dump not in logger.filters:
            logger.addFilter(_not_a_configuration_dump)
    return True


# -- the command-line options ----------------------------------------------------------------------------


def add_runtime_arguments(parser, threads: bool = True, threads_help: Optional[str] = None) -> None:
    """Add ``--verbose`` (and ``--threads N`` to a command that computes) to ``parser`` (or an argument group)."""
    if threads:
        parser.add_argument("--threads", type=int, metavar="N",
                            help=threads_help or "CPU threads (default: the cores this process may use, or "
                            f"{THREADS_VARIABLE} if set; printed when the command starts)")
    parser.add_argument("--verbose", action="store_true",
                        help="also print what the libraries log (fairseq's INFO lines, configurations) and their "
                        "Python warnings")


#: numpy's and torch's seeds: whole numbers from 0 to 2**32 - 1 (numpy refuses others, after the work is done)
MAX_SEED = 2 ** 32 - 1


def parse_seed(value: str) -> int:
    """``--seed``'s argparse type: a whole number from 0 to :data:`MAX_SEED`, else the parser's message."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {value!r}") from None
    if not 0 <= number <= MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_SEED} (numpy's seeds), got {number}")
    return number


def options_given(parser: argparse.ArgumentParser, args, names: Iterable[str], values: bool = False) -> List[str]:
    """The options of ``names`` (destinations: ``gen_batch``) whose value in ``args`` is not the parser's default,
    as written on a command line (``--gen-batch``, or ``--gen-batch 4`` with ``values``), in the order of ``names``:
    those given, for a command that refuses an option another one makes idle."""
    return [f"--{name.replace('_', '-')}" + (f" {getattr(args, name)}" if values else "") for name in names
            if getattr(args, name) != parser.get_default(name)]


def check_threads(parser: argparse.ArgumentParser, args) -> None:
    """Refuse ``--threads`` below 1 with the parser's message (exit status 2)."""
    check_at_least(parser, args, ["threads"])


def check_at_least(parser: argparse.ArgumentParser, args, names: Sequence[str], least: int = 1) -> None:
    """Refuse each option of ``names`` (their ``args`` attributes; None: not given) below ``least`` with the parser's
    message, naming it alone with its value (one message had named three options for one)."""
    for name in names:
        value = getattr(args, name, None)
        if value is not None and value < least:
            parser.error(f"--{name.replace('_', '-')} must be at least {least}, got {value}")


# -- what a command says -----------------------------------------------------------------------------------


class _Formatter(logging.Formatter):
    """``warning: MESSAGE`` (``error: ...``) for warnings and errors, the message alone below."""

    def format(self, record: logging.LogRecord) -> str:
        message = super().format(record)
        if record.levelno >= logging.WARNING:
            return f"{record.levelname.lower()}: {message}"
        return message


VERBOSE_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"


def configure_output(verbose: bool = False) -> None:
    """Set what a command prints on standard error: warnings of every logger, as ``warning: ...`` (the
    package's own are written for the user); with ``verbose``, everything at INFO in fairseq's format, and
    the Python warnings the libraries raise (ignored otherwise)."""
    handler = logging.StreamHandler(sys.stderr)
    if verbose:
        handler.setFormatter(logging.Formatter(VERBOSE_FORMAT))
    else:
        handler.setFormatter(_Formatter("%(message)s"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler], force=True)
    logging.captureWarnings(False)
    if verbose:
        warnings.simplefilter("default")
    else:
        warnings.simplefilter("ignore")
