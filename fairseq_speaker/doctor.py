"""``fairseq-speaker-doctor``: what this installation is made of, and whether it works.

One line per part: the package, Python, torch (a CPU-only or a CUDA build, whether CUDA is available,
the GPUs), fairseq (its version, and whether its C/Cython extensions were built), sacrebleu and
sacremoses, the threads (torch's, ``OMP_NUM_THREADS``, the cores, and what the package's commands
choose: :mod:`fairseq_speaker.runtime`), and whether the task, the model families, their presets and
the speaker bias variants register with fairseq (every preset with every variant is given to
fairseq-train's own parser). Then ``ok``, or each problem found with what to do; exit status 0 when
there is none, 1 otherwise. ``make doctor`` runs it.

Usage::

    fairseq-speaker-doctor
    fairseq-speaker-doctor --user-dir examples/custom_variant/sparse_bias   # a package of your own too
"""

import argparse
import importlib
import os
import platform
import sys
from importlib import metadata
from typing import List, Optional, Sequence, Tuple

from fairseq_speaker.command_registry import program_name
from fairseq_speaker.errors import command
from fairseq_speaker.runtime import (
    THREADS_VARIABLE,
    add_runtime_arguments,
    choose_threads,
    configure_output,
    usable_cores,
)
from fairseq_speaker.user_dir import UserDirImportFailed, add_user_dir_argument, import_user_dir, where_raised

PROG = program_name(__name__)
#: fairseq's compiled extensions the package needs: module -> what needs it
NEEDED_EXTENSIONS = {
    "fairseq.data.data_utils_fast": "batching by size (every fairseq command)",
    "fairseq.libbleu": "fairseq-generate's BLEU",
}
#: the others fairseq builds, which the package does not use
OTHER_EXTENSIONS = ("fairseq.data.token_block_utils_fast", "fairseq.libbase", "fairseq.libnat")
#: built only against a CUDA torch
CUDA_EXTENSIONS = ("fairseq.libnat_cuda", "fairseq.ngram_repeat_block_cuda")
WIDTH = 12


def _version(*distributions: str) -> Tuple[Optional[str], Optional[str]]:
    """(distribution, version) of the first of ``distributions`` installed, or (None, None)."""
    for name in distributions:
        try:
            return name, metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None, None


def _imports(module: str) -> Optional[str]:
    """None if ``module`` imports, else why not."""
    try:
        importlib.import_module(module)
    except Exception as e:  # noqa: BLE001  (an extension built against another torch fails in many ways)
        return f"{type(e).__name__}: {e}"
    return None


def torch_lines() -> List[Tuple[str, str]]:
    import torch

    cuda = torch.version.cuda
    build = f"a CUDA {cuda} build" if cuda else "a CPU-only build"
    if getattr(torch.version, "hip", None):
        build = f"a ROCm {torch.version.hip} build"
    lines = [("torch", f"{torch.__version__}: {build}")]
    available = torch.cuda.is_available()
    if cuda or getattr(torch.version, "hip", None):
        lines.append(("CUDA", "available" if available else "not available (no GPU or no driver visible): every "
                      "command runs on the CPU; make install TORCH=cpu installs the smaller CPU build"))
    else:
        lines.append(("CUDA", "not in this build (make install TORCH=cuda installs a CUDA build on Linux)"))
    if available:
        gpus = []
        for i in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(i)
            gpus.append(f"{i}: {props.name} ({props.total_memory / 2 ** 30:.0f} GiB)")
        lines.append(("GPUs", "; ".join(gpus) or "none"))
    else:
        lines.append(("GPUs", "none"))
    return lines


def fairseq_lines(problems: List[str]) -> List[Tuple[str, str]]:
    import fairseq
    import torch

    distribution, _ = _version("fairseq-fixed", "fairseq")
    lines = [("fairseq", f"{fairseq.__version__} ({distribution or 'not installed as a distribution'})")]
    built: List[str] = []
    missing: List[str] = []
    for module in (*NEEDED_EXTENSIONS, *OTHER_EXTENSIONS, *(CUDA_EXTENSIONS if torch.version.cuda else ())):
        why = _imports(module)
        short = module.rsplit(".", 1)[1]
        (built if why is None else missing).append(short)
        if why is not None and module in NEEDED_EXTENSIONS:
            problems.append(f"fairseq's extension {module} does not import ({why}); {NEEDED_EXTENSIONS[module]} "
                            f"needs it: install fairseq again against this torch, with Cython and numpy first and no "
                            f"build isolation (make install, or {sys.executable} -m pip install --no-build-isolation "
                            f"--force-reinstall --no-deps {distribution or 'fairseq'})")
    text = "built: " + ", ".join(built) if built else "none built"
    if missing:
        text += "; not built: " + ", ".join(missing)
        if not any(m.rsplit(".", 1)[1] in missing for m in NEEDED_EXTENSIONS):
            text += " (the package does not use them)"
    lines.append(("extensions", text))
    return lines


def thread_lines() -> List[Tuple[str, str]]:
    import torch

    choice = choose_threads(hint="")
    variables = ", ".join(f"{name}={os.environ[name]}" if name in os.environ else f"{name} unset"
                          for name in (THREADS_VARIABLE, "MKL_NUM_THREADS"))
    return [("threads", f"torch {torch.get_num_threads()} (inter-op {torch.get_num_interop_threads()}); {variables}; "
                        f"{usable_cores()} usable cores of {os.cpu_count()}"),
            ("commands", f"compute with {choice.threads} thread(s) ({choice.reason.split(';')[0]}); --threads N "
                         f"(ours) or {THREADS_VARIABLE}=N (any, fairseq's too) to change")]


def plugin_lines(problems: List[str], user_dir: Optional[str]) -> List[Tuple[str, str]]:
    """The registries, and fairseq-train's own parser given every preset with every variant."""
    from fairseq import options
    from fairseq.criterions import CRITERION_REGISTRY
    from fairseq.tasks import TASK_REGISTRY

    from fairseq_speaker import USER_DIR
    from fairseq_speaker.models import FAMILY_REGISTRY, family_of_arch, speaker_presets
    from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY

    for name, registry in (("task speaker_translation", TASK_REGISTRY),
                           ("criterion speaker_label_smoothed_cross_entropy", CRITERION_REGISTRY)):
        if name.split()[1] not in registry:
            problems.append(f"the {name} is not registered with fairseq")
    presets, variants = speaker_presets(), sorted(SPEAKER_BIAS_REGISTRY)
    refused = []
    for preset in presets:
        for variant in [None, *variants]:
            argv = ["DATA", "--user-dir", os.path.abspath(user_dir) if user_dir else USER_DIR, "--task",
                    "speaker_translation", "--arch", preset, "--criterion", "speaker_label_smoothed_cross_entropy"]
            argv += ["--speaker-bias", variant] if variant else []
            try:
                args = options.parse_args_and_arch(options.get_training_parser(), input_args=argv)
                ok = args.arch == preset and (variant is None or args.speaker_bias == variant)
            except (SystemExit, Exception):  # noqa: BLE001  (argparse refuses with SystemExit)
                ok = False
            if not ok:
                refused.append(f"{preset}" + (f" --speaker-bias {variant}" if variant else ""))
    if refused:
        problems.append(f"fairseq-train's parser refuses {len(refused)} preset/variant pair(s), e.g. {refused[0]}: "
                        f"reinstall the package (pip install -e .) and check --user-dir")
    by_family = {name: [p for p in presets if getattr(family_of_arch(p), "name", None) == name]
                 for name in FAMILY_REGISTRY}
    families = "; ".join(f"{name} ({', '.join(found) or 'no preset'})" for name, found in by_family.items())
    lines = [("plugin", f"task speaker_translation, criterion speaker_label_smoothed_cross_entropy; --user-dir "
                        f"{USER_DIR}"),
             ("families", families),
             ("variants", ", ".join(variants)),
             ("registered", f"fairseq-train's parser takes {len(presets) * (len(variants) + 1) - len(refused)} of "
                            f"{len(presets) * (len(variants) + 1)} preset/variant pairs")]
    return lines


def report(user_dir: Optional[str] = None) -> Tuple[List[Tuple[str, str]], List[str]]:
    """The doctor's lines (name, text) and the problems found."""
    import fairseq_speaker

    problems: List[str] = []
    lines = [("package", f"fairseq-speaker {fairseq_speaker.__version__} ({fairseq_speaker.USER_DIR})"),
             ("python", f"{platform.python_version()} ({sys.executable})")]
    lines += torch_lines()
    lines += fairseq_lines(problems)
    for name in ("sacrebleu", "sacremoses"):
        _, version = _version(name)
        lines.append((name, version or "not installed"))
        if version is None:
            problems.append(f"{name} is not installed: {sys.executable} -m pip install {name}")
    lines += thread_lines()
    lines += plugin_lines(problems, user_dir)
    return lines, problems


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="What this installation is made of, and whether it works.",
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    add_user_dir_argument(parser)
    add_runtime_arguments(parser, threads=False)
    return parser


def user_dir_problem(user_dir: str, error: BaseException) -> str:
    """What to say of a ``--user-dir`` package whose import raised ``error`` (its own code failed)."""
    detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return (f"--user-dir {user_dir} does not import: {type(error).__name__}{': ' + detail if detail else ''} at "
            f"{where_raised(error)}; "
            f"fix the package (python -c 'import NAME' from its parent folder shows the traceback), then run the "
            f"doctor again; the lines above check the package without it")


@command()
def main(argv: Optional[Sequence[str]] = None) -> None:
    args = build_parser().parse_args(argv)
    configure_output(args.verbose)
    user_dir, broken = args.user_dir, None
    try:
        import_user_dir(user_dir)
    except UserDirImportFailed as e:  # the package's own code raised: a problem of the installation to report
        user_dir, broken = None, user_dir_problem(args.user_dir, e.error)
    lines, problems = report(user_dir)
    if broken:
        problems.insert(0, broken)
    for name, text in lines:
        print(f"{name + ':':<{WIDTH}} {text}")
    if problems:
        for problem in problems:
            print(f"problem: {problem}")
        sys.exit(1)
    print("ok: nothing to fix")


if __name__ == "__main__":
    main()
