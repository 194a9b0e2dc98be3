"""``fairseq-speaker-store``: fairseq-speaker-serve's speaker store from the command line.

::

    fairseq-speaker-store copy --from speakers.db --to postgresql://speakers@db.example/speakers

``copy`` copies every speaker of one store into another (:func:`~fairseq_speaker.service.store_copy.copy_speakers`):
an SQLite store into PostgreSQL when a service outgrows one machine, or back into a file. It is one transaction and
idempotent: run again, it copies what is new and leaves what the target holds alike. docs/serving.md, "Replicas on
several machines", has the steps.
"""

import argparse
import contextlib
import os
import sqlite3
from typing import Optional, Sequence

from fairseq_speaker.atomic_write import same_file
from fairseq_speaker.command_registry import program_name
from fairseq_speaker.errors import UserError, command
from fairseq_speaker.service.store_copy import read_source, write_copy
from fairseq_speaker.service.store_location import (STORE_FORMS, StoreLocation, durable_location, hide_password)
from fairseq_speaker.service.stores import open_store

PROG = program_name(__name__)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="The speaker store of fairseq-speaker-serve. Guide: "
                                     "docs/serving.md.")
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    copy = actions.add_parser(
        "copy", help="copy every speaker of one store into another (e.g. an SQLite file into PostgreSQL)",
        description="Copy every speaker of --from into --to, under its model id: its rows, its sentence pairs, when it "
        "was created and updated. One transaction (all or nothing); idempotent (a speaker --to holds alike is left; one it holds "
        "otherwise refuses the copy, unless --replace). --to must be new or of the same model; speakers only --to "
        "holds are left.")
    copy.add_argument("--from", dest="source", required=True, metavar="STORE",
                      help=f"the store to copy: {STORE_FORMS}; it must exist, and is only read (a store of an older "
                      f"schema is upgraded first, as a service would)")
    copy.add_argument("--to", dest="target", required=True, metavar="STORE",
                      help="the store to copy into, in the same forms (made if missing)")
    copy.add_argument("--replace", action="store_true",
                      help="overwrite the speakers --to holds otherwise than --from (changed after an earlier copy) "
                      "with --from's, instead of refusing the copy")
    return parser


def same_store(one: StoreLocation, other: StoreLocation) -> bool:
    """Whether two locations name one store: the same file (by its path, or the file itself where both exist), or
    the same PostgreSQL URL."""
    if one.kind != other.kind:
        return False
    if one.kind == "postgresql":
        return one.target == other.target
    if one.target == ":memory:" or other.target == ":memory:":
        return False
    return same_file(one.target, other.target)


@command(PROG)
def main(argv: Optional[Sequence[str]] = None) -> None:
    args = build_parser().parse_args(argv)
    # both checked before either is opened; a --from in memory was "--from :memory:: no such file"
    source_at = durable_location(args.source, "--from", "as soon as it is opened, so that it holds nothing to copy")
    target_at = durable_location(args.target, "--to", "when the copy ends, with everything copied")
    if same_store(source_at, target_at):
        raise UserError(f"--from {source_at.shown} and --to {target_at.shown} are the same store: give another --to")
    source = open_store(args.source, create=False, option="--from")
    try:
        speakers = _failing_as_the_copy(read_source, args, source)
    finally:
        source.close()
    if not speakers.records:  # no --to is made
        print(f"--from {source.path} holds no speakers: nothing to copy")
        return
    made = target_at.kind == "sqlite" and not os.path.lexists(target_at.target)
    target = None
    try:
        target = _failing_as_the_copy(lambda: open_store(args.target, option="--to"), args)
        report = _failing_as_the_copy(write_copy, args, speakers, target, args.replace)
    except BaseException:
        if target is not None:
            target.close()
            target = None
        if made:  # nothing was copied: a --to the copy made goes, as it was not there
            for suffix in ("", "-wal", "-shm", "-journal"):
                with contextlib.suppress(FileNotFoundError):
                    os.remove(target_at.target + suffix)
        raise
    finally:
        if target is not None:
            target.close()
    parts = [f"copied {len(report.added)} speaker(s) from {source.path} to {target.path}"]
    if report.same:
        parts.append(f"{len(report.same)} already there alike (left)")
    if report.replaced:
        parts.append(f"{len(report.replaced)} replaced ({', '.join(report.replaced)})")
    if report.others:
        parts.append(f"{report.others} speaker(s) only the target holds (left)")
    print("; ".join(parts))


def _failing_as_the_copy(step, args, *arguments):
    """``step(*arguments)``, a database that fails meanwhile (a file locked past the timeout, a server that went away)
    one message of the copy."""
    try:
        return step(*arguments)
    except sqlite3.Error as e:  # StoreUnavailable included
        raise UserError(f"the copy from --from {hide_password(args.source)} to --to {hide_password(args.target)} "
                        f"failed ({e}): it is one transaction, so nothing of it was written unless it had committed; "
                        f"run it again (what was copied is then found alike)") from None


if __name__ == "__main__":
    main()
