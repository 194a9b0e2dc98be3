"""Copying the speakers of one store into another (:func:`copy_speakers`, what ``fairseq-speaker-store copy`` does):
an SQLite store into PostgreSQL, or any store into any other, in one transaction, idempotent. The source is read
whole first (:func:`read_source`), then written (:func:`write_copy`).
"""

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from fairseq_speaker.data.speaker_labels import visible_form
from fairseq_speaker.errors import UserError
from fairseq_speaker.onboarding.vectors_file import read_speaker_vectors
from fairseq_speaker.service.store import SpeakerStore
from fairseq_speaker.service.store_errors import StoreConflict, StoreDamaged, StoreError
from fairseq_speaker.service.store_schema import StoredSpeaker, fingerprint_of, model_id_problem, speaker_text


@dataclass
class CopyReport:
    """What :func:`copy_speakers` did: the names copied, found alike, and overwritten; how many speakers the target
    holds that the source does not (left as they are)."""

    added: List[str] = field(default_factory=list)
    same: List[str] = field(default_factory=list)
    replaced: List[str] = field(default_factory=list)
    others: int = 0


@dataclass
class SourceSpeakers:
    """One snapshot of a store's speakers as a copy reads them (:func:`read_source`), and how messages name it."""

    #: each model id's fingerprint, and the checkpoint it was tied to
    fingerprints: Dict[str, Optional[Dict]]
    made_for: Dict[str, Optional[str]]
    #: every speaker, with its rows and sentence pairs
    records: List[StoredSpeaker]
    #: the option and the store, as messages name them
    where: str


def read_source(source: SpeakerStore) -> SourceSpeakers:
    """Every speaker of ``source`` and its model ids, read before anything is written (a copy whose source cannot be
    read makes no target). Raises :class:`StoreError` saying what to do."""
    models = source.models()
    for model in models:  # copied, its speakers were served by no service: --model takes no such id
        problem = model_id_problem(model)
        if problem:
            raise StoreError(f"{source.option} {source.path}: holds the speakers of a model id no service can serve "
                             f"({problem}): nothing was copied. The store was written by another program, or "
                             f"damaged: restore it from a backup")
    fingerprints = {model: source.fingerprint(model) for model in models}
    made_for = {model: source.made_for(model) for model in models}
    try:
        records = source.records()
        damaged = next(filter(None, (_damaged_rows(r, fingerprints.get(r.model)) for r in records)), None)
    except StoreDamaged as e:
        damaged = e.what
    if damaged is not None:  # rows a service cannot read stopped the target's next start
        raise StoreError(f"{source.option} {source.path}: {damaged}: nothing was copied. Restore the store from a "
                         f"backup, or serve it with --skip-broken-speakers and onboard that speaker again (PUT with "
                         f"\"replace\": true), then copy")
    where = f"{source.option} {source.path}"
    _refuse_lookalikes(records, where)
    return SourceSpeakers(fingerprints, made_for, records, where)


def _refuse_lookalikes(records: List[StoredSpeaker], where: str) -> None:
    """Refuse a source holding two speakers of one model whose names look alike (a store written before schema 3 could:
    a service serves the earlier and skips the other): the target, which refuses such names, was blamed for them."""
    seen: Dict[tuple, StoredSpeaker] = {}
    for record in sorted(records, key=lambda r: (r.created, r.name)):
        first = seen.setdefault((record.model, visible_form(record.name)), record)
        if first is not record:
            raise StoreError(f"{where} holds the speakers {first.name!r} and {speaker_text(record.model, record.name)}, "
                             f"whose names look alike (a service of it serves {first.name!r}, onboarded first, and "
                             f"skips the other): delete the one that is wrong (DELETE /speakers/NAME on a service of "
                             f"that store, either of the two), then copy; nothing was copied")


def _damaged_rows(record: StoredSpeaker, fingerprint: Optional[Dict]) -> Optional[str]:
    """What is wrong with the rows of ``record`` where a service would refuse them (not the speaker vectors of that
    speaker alone, or not of the model ``fingerprint`` the store ties its model id to), else None."""
    damaged = f"the record of speaker {record.name!r} is damaged"
    try:
        vectors = read_speaker_vectors(record.rows, where="its rows")
    except UserError as e:
        return f"{damaged}: {e}"
    if vectors.names != [record.name]:
        return f"{damaged}: its rows are named {vectors.names}"
    if fingerprint is not None and fingerprint_of(vectors.meta) != fingerprint:
        return f"{damaged}: its rows are not those of the model the store holds for model id {record.model!r}"
    return None


def copy_speakers(source: SpeakerStore, target: SpeakerStore, replace: bool = False) -> CopyReport:
    """Copy every speaker of ``source`` into ``target`` (an SQLite store into PostgreSQL, or any store into any
    other), as it is, under its model id: its rows, its sentence pairs, when it was created and updated. One snapshot
    of the source is read and written in one transaction: all or nothing. Idempotent: a speaker the target holds alike
    is left; one it holds otherwise (changed since an earlier copy) refuses the copy, naming it, unless ``replace``.
    Each model id of the target must be new or tied to the source's model of that id; speakers only the target holds
    are left. Raises :class:`StoreError` saying what to do."""
    return write_copy(read_source(source), target, replace)


def write_copy(source: SourceSpeakers, target: SpeakerStore, replace: bool = False) -> CopyReport:
    """Write the speakers read by :func:`read_source` into ``target``, as :func:`copy_speakers` says."""
    records = source.records
    report = CopyReport()
    if not records:  # nothing to copy: a target is left as it is, even unbound
        return report
    for model, fingerprint in source.fingerprints.items():
        if fingerprint is not None and any(record.model == model for record in records):
            target.bind(fingerprint, f"the model of {source.where} ({source.made_for[model]})", model=model)
    try:
        outcome = target.put_records(records, replace=replace)
    except StoreConflict as e:
        if e.reason == "lookalike":
            raise StoreError(f"{target.option} {target.path}: {e}; nothing was copied. Delete one of the two (DELETE "
                             f"/speakers/NAME) from --from or --to, then copy again") from None
        raise StoreError(f"{target.option} {target.path} holds speaker(s) {e} otherwise than {source.where} (other "
                         f"rows or sentences: changed after an earlier copy?): nothing was copied. Give --replace to "
                         f"overwrite them with the source's, or delete them from the target (DELETE /speakers/NAME) "
                         f"and copy again") from None
    report.added, report.same, report.replaced = outcome["added"], outcome["same"], outcome["replaced"]
    keys = {(record.model, record.name) for record in records}
    report.others = sum(1 for model in target.models() for speaker in target.speakers(model)
                        if (model, speaker.name) not in keys)
    return report
