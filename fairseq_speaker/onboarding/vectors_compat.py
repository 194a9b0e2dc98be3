"""Speaker vectors against a model (:func:`check_compatible`: the variant, the target vocabulary, the shared
parameters a file was written for; :func:`warn_far_outside`: rows far outside the model's own), and their import
into a checkpoint (:func:`import_vectors`). The file itself: :mod:`~fairseq_speaker.onboarding.vectors_file`; the
command: :mod:`~fairseq_speaker.onboarding.vectors`.
"""



import logging
from typing import Dict, List, Set, Tuple

import numpy as np

from fairseq_speaker.modules.speaker_bias import SpeakerBias
from fairseq_speaker.modules.speaker_words import speaker_words_of
from fairseq_speaker.onboarding.checkpoint import (
    OnboardingError,
    adaptable_bias,
    add_speakers,
    replace_speakers,
)
from fairseq_speaker.onboarding.vectors_file import SpeakerVectors, describe, listing

#: a row whose largest value is this many times the model's own largest is reported
FAR_OUTSIDE = 100.0

#: the command's logger: its warnings keep the name a user filters them by
logger = logging.getLogger("fairseq_speaker.onboarding.vectors")


def warn_far_outside(vectors: SpeakerVectors, bias: SpeakerBias) -> List[str]:
    """The speakers of ``vectors`` whose rows are far outside the range of the model's own rows (logged)."""
    outside: Set[str] = set()
    for key, param in bias.speaker_parameters().items():
        if key not in vectors.rows or param.numel() == 0:
            continue
        own = max(float(param.detach().abs().max()), 1.0)
        largest = np.abs(vectors.rows[key].reshape(len(vectors.names), -1)).max(axis=1)
        outside.update(name for name, value in zip(vectors.names, largest) if value > FAR_OUTSIDE * own)
    far = sorted(outside)
    if far:
        logger.warning(f"{vectors.path}: speaker(s) {listing(far)} have values over {FAR_OUTSIDE:g} times the largest "
                       f"of this model's own speakers: check that the file is the one intended")
    return far


def check_compatible(vectors: SpeakerVectors, bias: SpeakerBias, target_dictionary, where: str = "the model") -> None:
    """Refuse rows that would mean something else in ``bias``: another variant, another target
    dictionary, other parameters or row shapes, other shared parameters. ``where`` names the model."""
    mine, theirs, path = describe(bias, target_dictionary), vectors.meta, vectors.path
    file_variant = theirs.get("variant_spelling") or theirs.get("variant")
    if file_variant != mine["variant_spelling"]:
        raise OnboardingError(
            f"{path}: speaker vectors of a {file_variant!r} speaker bias, but {where} has a "
            f"{mine['variant_spelling']!r} one: rows of one variant mean nothing in another; import them into a "
            f"{file_variant!r} model, or fit these speakers on this model with fairseq-speaker-adapt")
    if theirs.get("target_dictionary_hash") != mine["target_dictionary_hash"]:
        raise OnboardingError(
            f"{path}: written for another target dictionary ({theirs.get('target_dictionary_size')} words, hash "
            f"{str(theirs.get('target_dictionary_hash'))[:12]}) than {where}'s ({mine['target_dictionary_size']} "
            f"words, hash {mine['target_dictionary_hash'][:12]}): a speaker's bias is indexed by target word; use "
            f"a model trained with the same target dictionary")
    shapes = {k: list(v) for k, v in theirs.get("row_shapes", {}).items()}
    if shapes != mine["row_shapes"]:
        raise OnboardingError(
            f"{path}: speaker parameters {_shapes(shapes)}, but {where} has {_shapes(mine['row_shapes'])} "
            f"(another --speaker-rank or --speaker-embed-dim?): import them into a model of the same size")
    if theirs.get("shared_sha1") != mine["shared_sha1"]:
        raise OnboardingError(
            f"{path}: the speakers were exported from a model whose shared speaker-bias parameters differ from "
            f"{where}'s (shared hash {str(theirs.get('shared_sha1'))[:12]}, this model's "
            f"{mine['shared_sha1'][:12]}): their rows only mean something with the shared parameters they were "
            f"trained with; import them into the model they came from (or a copy of it), or fit these speakers "
            f"on this model with fairseq-speaker-adapt")


def _shapes(shapes: Dict[str, List[int]]) -> str:
    return ", ".join(f"{k} {tuple(v)}" for k, v in sorted(shapes.items())) or "none"


def import_vectors(vectors: SpeakerVectors, model, task, replace: bool = False,
                   where: str = "the model") -> Tuple[List[str], List[str]]:
    """Put the speakers of ``vectors`` in ``model`` (and ``task``'s speaker dictionary): the ones it does not
    know are added, known ones overwritten if ``replace``; an incompatible file is refused. Returns the
    names added and the names replaced."""
    bias = adaptable_bias(model, task, where)
    check_compatible(vectors, bias, task.target_dictionary, where=where)
    warn_far_outside(vectors, bias)
    known = [n for n in vectors.names if n in task.speaker_dictionary]
    new = [n for n in vectors.names if n not in task.speaker_dictionary]
    if known and not replace:
        raise OnboardingError(f"{vectors.path}: speaker(s) {listing(known)} already in {where}: "
                              f"pass --replace (replace=True) to overwrite them")
    if new:
        add_speakers(model, task, new, vectors.tensors(new))
    if known:
        replace_speakers(model, task, known, vectors.tensors(known))
    words = speaker_words_of(model)
    if words is not None and vectors.words is not None:  # the speakers' words came with their rows
        for name, said in zip(vectors.names, vectors.words):
            words.set_words(task.speaker_dictionary.index(name), [said])
    return new, known
