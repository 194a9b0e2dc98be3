"""``fairseq-speaker-vectors``: a speaker's vector (its rows of the speaker bias, with its name; what it is:
:mod:`~fairseq_speaker.onboarding.vectors_file`) exported from a checkpoint and imported into another of the same
model, where the speaker is added (or, with ``--replace``, overwritten)::

    fairseq-speaker-vectors export DATA_DIR --path checkpoint_best.pt --out speakers.npz [--speakers A B]
    fairseq-speaker-vectors import DATA_DIR --path other.pt --vectors speakers.npz --save merged.pt [--replace]

The file's format: :mod:`~fairseq_speaker.onboarding.vectors_file`; the checks against a model and the import:
:mod:`~fairseq_speaker.onboarding.vectors_compat`.
"""

import argparse
import logging
import os
from typing import Optional, Sequence

from fairseq_speaker.atomic_write import check_not_an_input
from fairseq_speaker.command_registry import program_name
from fairseq_speaker.data.speaker_labels import live_names
from fairseq_speaker.errors import UserError, command, fail
from fairseq_speaker.modules.speaker_words import speaker_words_of
from fairseq_speaker.onboarding.checkpoint import (
    OnboardingError,
    SpeakerCheckpoint,
)
from fairseq_speaker.onboarding.vectors_compat import import_vectors
from fairseq_speaker.onboarding.vectors_file import (
    listing,
    load_speaker_vectors,
    save_speaker_vectors,
    variant_spelling,
)
from fairseq_speaker.runtime import add_runtime_arguments, configure_output
from fairseq_speaker.user_dir import add_user_dir_argument, import_user_dir

PROG = program_name(__name__)
logger = logging.getLogger(__name__)



# -- describing a bias ------------------------------------------------------------------------------


# -- writing and reading ----------------------------------------------------------------------------


def _size(n: float) -> str:
    if n < 1024:
        return f"{int(n)} bytes"
    for unit in ("kB", "MB", "GB"):
        n /= 1024
        if n < 1024 or unit == "GB":
            break
    return f"{n:.1f} {unit}"


# -- the command ------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG, formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Export speakers' vectors (their rows of the speaker bias) with their names to a .npz file,\n"
        "or import them into another checkpoint of the same model.\n\n" + __doc__.split("\n\n")[2])
    commands = parser.add_subparsers(dest="command", metavar="{export,import}")
    commands.required = True
    export = commands.add_parser("export", help="write speakers' vectors (with their names) to a .npz file")
    imp = commands.add_parser("import", help="add (or replace) speakers of a .npz file in a checkpoint")
    for sub in (export, imp):
        sub.add_argument("data", metavar="DATA_DIR", help="the data directory the model was trained on "
                         "(its dict.*.txt)")
        sub.add_argument("--path", required=True, metavar="CHECKPOINT", help="the model's checkpoint")
        sub.add_argument("--source-lang", help="if fairseq cannot infer the language pair from DATA_DIR")
        sub.add_argument("--target-lang")
        add_user_dir_argument(sub)
        add_runtime_arguments(sub, threads=False)
    export.add_argument("--out", required=True, metavar="FILE", help="the speaker vectors file to write (.npz)")
    export.add_argument("--speakers", nargs="+", metavar="NAME", help="the speakers to export (default: all)")
    imp.add_argument("--vectors", required=True, metavar="FILE", help="a file written by the export command")
    imp.add_argument("--save", required=True, metavar="CHECKPOINT", help="where to write the new checkpoint")
    imp.add_argument("--replace", action="store_true", help="overwrite the speakers the model already has")
    return parser


def export_command(args) -> str:
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        raise OnboardingError(f"--out {args.out}: the folder {out_dir} does not exist")
    checkpoint = _load(args)
    bias = checkpoint.check_adaptable()
    names = args.speakers if args.speakers is not None else live_names(checkpoint.speaker_names)
    summary = save_speaker_vectors(args.out, bias, names, checkpoint.task.target_dictionary, model_label=args.path,
                                   words=speaker_words_of(checkpoint.model))
    return (f"exported {summary.speakers} speaker(s) of {args.path} ({variant_spelling(bias)} bias) to {args.out}\n"
            f"  per speaker: {summary.parameters_per_speaker:,} parameters, {_size(summary.bytes_per_speaker)} "
            f"(float32)\n  file: {_size(summary.file_bytes)}")


def import_command(args) -> str:
    vectors = load_speaker_vectors(args.vectors)
    checkpoint = _load(args)
    new, known = import_vectors(vectors, checkpoint.model, checkpoint.task, args.replace, where=args.path)
    checkpoint.save(args.save)
    lines = [f"imported {len(vectors.names)} speaker(s) of {args.vectors} into {args.path}, saved to {args.save} "
             f"({len(checkpoint.speaker_names)} speakers)"]
    if new:
        lines.append(f"  added {len(new)}: {listing(new)}")
    if known:
        lines.append(f"  replaced {len(known)}: {listing(known)}")
    return "\n".join(lines)


def _load(args) -> SpeakerCheckpoint:
    """The checkpoint of ``--path`` with the dictionaries of DATA_DIR."""
    overrides = {k: getattr(args, k) for k in ("source_lang", "target_lang") if getattr(args, k)}
    return SpeakerCheckpoint.load(args.path, data=args.data, overrides=overrides)


@command(named_errors=False)
def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_output(args.verbose)  # fairseq's text_to_speech task configures logging at INFO on import
    if args.command == "import" and os.path.abspath(args.save) == os.path.abspath(args.path):
        parser.error("--save must not be the checkpoint given by --path: write the new model to another file")
    # the same file under another name too (a link, a hard link), a file of the data folder, or the vectors read
    output, option = (args.out, "--out") if args.command == "export" else (args.save, "--save")
    inputs = [("the checkpoint given by --path", args.path)]
    if args.command == "import":
        inputs.append(("the vectors file given by --vectors", args.vectors))
    try:
        check_not_an_input(output, option, inputs, [("the data folder", args.data.split(os.pathsep)[0])])
    except UserError as e:
        fail(str(e), f"{PROG} {args.command}")
    try:
        import_user_dir(args.user_dir)
        report = export_command(args) if args.command == "export" else import_command(args)
    except UserError as e:  # OnboardingError and CheckpointError included
        fail(str(e), f"{PROG} {args.command}")
    print(report)


if __name__ == "__main__":
    main()
