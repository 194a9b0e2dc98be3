"""The portable speaker vectors' ``.npz`` file: what ``fairseq-speaker-vectors``
(:mod:`~fairseq_speaker.onboarding.vectors`) exports and imports, the service stores, and ``SpeakerTranslator``
exports.

A speaker's vector is what the speaker bias holds of that speaker alone (its rows of the
variant's speaker parameters: the V-vector of ``full``, the r weights of ``fact``, ...). It
is exported with the speaker's name, and imported into another checkpoint of the same model,
where the speaker is added (or, with ``--replace``, overwritten)::

    fairseq-speaker-vectors export DATA_DIR --path checkpoint_best.pt --out speakers.npz [--speakers A B]
    fairseq-speaker-vectors import DATA_DIR --path other.pt --vectors speakers.npz --save merged.pt [--replace]

The file is a plain ``.npz`` (it loads with ``allow_pickle=False``): ``names`` (the speakers),
``param/<name>`` (``[n, ...]`` float32, one array per speaker parameter) and ``meta``, a JSON
string: the format and its version, the variant, each parameter's row shape, the target
dictionary's hash and size, and a SHA-1 of the bias's shared parameters and buffers; from a model that remembers
its speakers' words (``fairseq-speaker-words``), also ``words/lengths`` (``[n]``) and ``words/ids`` (int32, each
speaker's target word ids one after the other), which an import into a model that remembers words keeps. A
speaker's rows only mean something with the same variant, target vocabulary and shared
parameters (fact's weights mix the model's own shared bias vectors), so an import checks all
of them (:func:`~fairseq_speaker.onboarding.vectors_compat.check_compatible`) and refuses a file written for another
model. This module reads and writes the file (:class:`SpeakerVectors`, :func:`describe`: what ties rows to a model);
:mod:`~fairseq_speaker.onboarding.vectors_compat` checks a file against a model and imports it.
"""


import hashlib
import io
import json
import os
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch
from torch import Tensor

from fairseq_speaker.atomic_write import atomic_path
from fairseq_speaker.data import dictionary_hash
from fairseq_speaker.data.speaker_labels import is_retired_name, retired_among
from fairseq_speaker.modules.speaker_bias import SpeakerBias, variant_spelling
from fairseq_speaker.modules.speaker_words import SpeakerWords
from fairseq_speaker.onboarding.checkpoint import (
    OnboardingError,
)

WORD_LENGTHS, WORD_IDS = "words/lengths", "words/ids"
FORMAT = "fairseq-speaker-vectors"


FORMAT_VERSION = 1


PARAM_PREFIX = "param/"
#: the magnitude from which a value of a speaker's rows is refused: its square is beyond float32's range
LARGEST_VALUE = float(np.sqrt(np.finfo(np.float32).max))


@dataclass
class SpeakerVectors:
    """The contents of a speaker vectors file.

    Attributes:
        names: the speakers, in the order of the rows.
        rows: speaker parameter name -> ``[len(names), ...]`` float32 array.
        meta: the file's metadata (see the module documentation).
        path: the file it was read from (for messages).
        words: each speaker's target word ids, when the model they came from remembers its speakers' words.
    """

    names: List[str]
    rows: Dict[str, np.ndarray]
    meta: Dict
    path: str = "<memory>"
    words: Optional[List[np.ndarray]] = None

    def tensors(self, names: Optional[Sequence[str]] = None) -> Dict[str, Tensor]:
        """The rows of ``names`` (default: every speaker, in file order) as tensors, as
        :meth:`SpeakerBias.import_speakers` takes them."""
        position = {name: i for i, name in enumerate(self.names)}
        index = [position[n] for n in names] if names is not None else list(range(len(self.names)))
        return {key: torch.from_numpy(value[index].copy()) for key, value in self.rows.items()}


@dataclass
class ExportSummary:
    """What :func:`save_speaker_vectors` wrote."""

    path: str
    speakers: int
    parameters_per_speaker: int
    bytes_per_speaker: int  # as float32
    file_bytes: int


def shared_state_hash(bias: SpeakerBias) -> str:
    """SHA-1 of everything of ``bias`` that is not a speaker's own (shared parameters and buffers, as
    float32, with their names and shapes): equal hashes mean the speakers' rows mean the same thing."""
    digest = hashlib.sha1()
    shared: Dict[str, Tensor] = dict(bias.shared_parameters())
    shared.update({f"buffer:{name}": b for name, b in bias.named_buffers()})
    for name in sorted(shared):
        value = shared[name].detach().to("cpu", torch.float32).contiguous()
        digest.update(f"{name}{tuple(value.shape)}\n".encode("utf-8"))
        digest.update(value.numpy().tobytes())
    return digest.hexdigest()


def describe(bias: SpeakerBias, target_dictionary) -> Dict:
    """The metadata that makes a bias's speaker rows portable (compared by :func:`check_compatible`)."""
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "variant": bias.name,
        "variant_spelling": variant_spelling(bias),
        "row_shapes": {name: list(shape) for name, shape in bias.speaker_row_shapes().items()},
        "target_dictionary_hash": dictionary_hash(target_dictionary),
        "target_dictionary_size": len(target_dictionary),
        "shared_sha1": shared_state_hash(bias),
    }


def _arrays(names: Sequence[str], rows: Dict[str, np.ndarray], meta: Dict,
            words: Optional[List[np.ndarray]] = None) -> Dict[str, np.ndarray]:
    """The arrays of a speaker vectors file (see the module documentation)."""
    arrays = {f"{PARAM_PREFIX}{key}": np.ascontiguousarray(value, dtype=np.float32) for key, value in rows.items()}
    arrays["names"] = np.array(list(names), dtype=str)
    arrays["meta"] = np.array(json.dumps(meta, sort_keys=True))
    if words is not None:
        arrays[WORD_LENGTHS] = np.array([len(w) for w in words], dtype=np.int64)
        arrays[WORD_IDS] = (np.concatenate(words) if words else np.zeros(0)).astype(np.int32)
    return arrays


def write_npz(path: str, names: Sequence[str], rows: Dict[str, np.ndarray], meta: Dict,
              words: Optional[List[np.ndarray]] = None) -> None:
    """Write the file atomically (temp file, then ``os.replace``): a reader never sees half a file."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise OnboardingError(f"cannot write {path}: the folder {folder} does not exist")
    arrays = _arrays(names, rows, meta, words)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        # numpy's stubs take a name among **arrays for its allow_pickle flag
        np.savez(f, **arrays)  # type: ignore[arg-type]


def vectors_bytes(vectors: SpeakerVectors) -> bytes:
    """The bytes of the ``.npz`` file that :func:`write_npz` would write for ``vectors`` (to keep in a database)."""
    buffer = io.BytesIO()
    np.savez(buffer, **_arrays(vectors.names, vectors.rows, vectors.meta, vectors.words))  # type: ignore[arg-type]
    return buffer.getvalue()


def speaker_vectors(bias: SpeakerBias, names: Sequence[str], target_dictionary,
                    model_label: str = "", words: Optional[SpeakerWords] = None) -> SpeakerVectors:
    """The rows of the speakers ``names`` of ``bias`` (looked up in ``bias.speaker_names``), in memory, with
    the metadata a file of them carries (see :func:`save_speaker_vectors`), and their words in ``words`` (the
    model's memory of its speakers' words, if it has one)."""
    where = model_label or "the model"
    if bias.speaker_names is None:
        raise OnboardingError(f"{where}: its speaker rows are not named, so its speakers cannot be exported by name")
    if not bias.speaker_parameters():
        raise OnboardingError(f"{where}: the {variant_spelling(bias)!r} speaker bias has no parameters per "
                              f"speaker: there is nothing to export")
    names = list(names)
    ids = {name: i for i, name in enumerate(bias.speaker_names) if not is_retired_name(name)}
    unknown = [n for n in names if n not in ids]  # a retired speaker's rows are no speaker's
    if unknown:
        raise OnboardingError(f"{where}: no speaker(s) {listing(unknown)} (it has {len(ids)} speakers: "
                              f"{listing(list(ids))}){retired_among(unknown, bias.speaker_names)}")
    duplicates = _duplicates(names)
    if duplicates:
        raise OnboardingError(f"speaker(s) {listing(duplicates)} named twice")
    rows = bias.export_speakers([ids[n] for n in names])
    meta = dict(describe(bias, target_dictionary), model=model_label, speakers=len(names))
    return SpeakerVectors(names, {key: value.float().cpu().numpy() for key, value in rows.items()}, meta,
                          model_label or "<memory>",
                          [words.words_of(ids[n]) for n in names] if words is not None else None)


def save_speaker_vectors(path: str, bias: SpeakerBias, names: Sequence[str], target_dictionary,
                         model_label: str = "", words: Optional[SpeakerWords] = None) -> ExportSummary:
    """Write the rows of the speakers ``names`` of ``bias`` (looked up in ``bias.speaker_names``) to ``path``.

    ``target_dictionary`` is the model's (its hash goes in the file); ``model_label`` says where the
    speakers came from (a checkpoint path), for whoever reads the file.
    """
    vectors = speaker_vectors(bias, names, target_dictionary, model_label, words)
    write_npz(path, vectors.names, vectors.rows, vectors.meta, vectors.words)
    per_speaker = bias.parameters_per_speaker()
    return ExportSummary(path, len(vectors.names), per_speaker, 4 * per_speaker, os.path.getsize(path))


def load_speaker_vectors(path: str) -> SpeakerVectors:
    """Read a file written by :func:`save_speaker_vectors`, checked to be whole and consistent."""
    if os.path.isdir(path):  # it was "not found"
        raise OnboardingError(f"{path} is a directory: give a speaker vectors file (.npz, written by "
                              f"fairseq-speaker-vectors export)")
    if os.path.exists(path) and not os.path.isfile(path):  # a named pipe was "not found"
        raise OnboardingError(f"{path} is not a regular file (a device, a pipe or a socket), which no speaker vectors "
                              f"file is: give the .npz that fairseq-speaker-vectors export wrote")
    if not os.path.isfile(path):
        raise OnboardingError(f"speaker vectors not found: {path} (fairseq-speaker-vectors export writes them)")
    return _read_vectors(path, path)


def read_speaker_vectors(data: bytes, where: str) -> SpeakerVectors:
    """The speaker vectors of the bytes of a file (:func:`vectors_bytes`), checked as :func:`load_speaker_vectors`
    checks a file; ``where`` names them in messages."""
    return _read_vectors(io.BytesIO(data), where)


def _read_vectors(source, path: str) -> SpeakerVectors:
    """The checked contents of ``source`` (a path or a binary file object), named ``path`` in messages."""
    not_ours = f"{path}: not a speaker vectors file (fairseq-speaker-vectors export writes them)"
    try:
        loaded = np.load(source, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):  # a single .npy array
            raise OnboardingError(not_ours)
        with loaded:
            arrays = {key: loaded[key] for key in loaded.files}
    except OnboardingError:
        raise
    except Exception:  # a zip, pickle or npy error: whatever the bytes are, they are not ours
        raise OnboardingError(f"{path}: not a .npz archive, so not a speaker vectors file (damaged or "
                              f"truncated? fairseq-speaker-vectors export writes them)") from None
    if "meta" not in arrays or "names" not in arrays:
        raise OnboardingError(not_ours)
    try:
        meta = json.loads(str(arrays["meta"]))
    except ValueError:
        meta = None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise OnboardingError(not_ours)
    version = meta.get("format_version")
    if not isinstance(version, int) or version < 1:
        raise OnboardingError(f"{path}: invalid format version {version!r}")
    if version > FORMAT_VERSION:
        raise OnboardingError(f"{path}: speaker vectors format {version}, newer than this fairseq-speaker reads "
                              f"({FORMAT_VERSION}); upgrade fairseq-speaker")
    if arrays["names"].dtype.kind != "U":  # bytes were read as their repr ("b'lee'"), another kind is no name
        raise OnboardingError(f"{path}: its names are stored as {arrays['names'].dtype} (bytes or other values), not "
                              f"as text: write them as a string array (np.array(names, dtype=str)), as "
                              f"fairseq-speaker-vectors export does")
    names = [str(n) for n in arrays["names"].reshape(-1).tolist()]
    duplicates = _duplicates(names)
    if duplicates:
        raise OnboardingError(f"{path}: speaker(s) {listing(duplicates)} appear twice")
    rows = {key[len(PARAM_PREFIX):]: value for key, value in arrays.items() if key.startswith(PARAM_PREFIX)}
    shapes = meta.get("row_shapes")
    if not isinstance(shapes, dict) or set(shapes) != set(rows):
        raise OnboardingError(f"{path}: holds parameters {sorted(rows)} but its metadata describes "
                              f"{sorted(shapes) if isinstance(shapes, dict) else shapes!r}: the file is damaged")
    for key, shape in shapes.items():
        if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
            raise OnboardingError(f"{path}: the metadata gives parameter {key!r} the row shape {shape!r}: "
                                  f"the file is damaged")
    if not names:  # written by an export of no speakers (refused since)
        raise OnboardingError(f"{path}: holds no speakers: export the speakers to import again, naming them")
    for key, value in rows.items():
        expected = (len(names), *shapes[key])
        if tuple(value.shape) != expected or not np.issubdtype(value.dtype, np.floating):
            raise OnboardingError(f"{path}: parameter {key!r} has shape {tuple(value.shape)} ({value.dtype}), "
                                  f"expected {expected} for {len(names)} speakers: the file is damaged")
        # a value whose square is beyond float32's range becomes infinite in the model's sums (a float64 file's 1e300,
        # and float32's own largest value too: every translation as such a speaker ended in an AssertionError)
        flat = value.reshape(len(names), -1)
        finite = (np.isfinite(flat) & (np.abs(flat) < LARGEST_VALUE)).all(axis=1)
        if not finite.all():  # one such row would poison the mean speaker, and every unseen speaker with it
            bad = [name for name, ok in zip(names, np.asarray(finite).tolist()) if not ok]
            raise OnboardingError(f"{path}: parameter {key!r} of speaker(s) {listing(bad)} holds NaN or infinite "
                                  f"values, or values beyond float32's range (at least {LARGEST_VALUE:.3g}, whose "
                                  f"square float32 cannot hold): export them again from a sound model, or leave them "
                                  f"out")
    return SpeakerVectors(names, rows, meta, path, _read_words(arrays, names, meta, path))


def _read_words(arrays: Dict[str, np.ndarray], names: List[str], meta: Dict, path: str) -> Optional[List[np.ndarray]]:
    """The speakers' word ids of a file that has them (None for one that does not), checked."""
    if WORD_LENGTHS not in arrays and WORD_IDS not in arrays:
        return None
    lengths, ids = arrays.get(WORD_LENGTHS), arrays.get(WORD_IDS)
    vocab = meta.get("target_dictionary_size")
    if lengths is None or ids is None or lengths.shape != (len(names),) or ids.ndim != 1 \
            or not np.issubdtype(lengths.dtype, np.integer) or not np.issubdtype(ids.dtype, np.integer) \
            or (lengths < 0).any() or int(lengths.sum()) != ids.size \
            or (ids.size and (int(ids.min()) < 0 or not isinstance(vocab, int) or int(ids.max()) >= vocab)):
        raise OnboardingError(f"{path}: its speakers' words ({WORD_LENGTHS}, {WORD_IDS}) do not add up to "
                              f"{len(names)} speakers of word ids of the model's vocabulary: the file is damaged")
    bounds = np.concatenate([[0], np.cumsum(lengths.astype(np.int64))])
    return [ids[bounds[i]:bounds[i + 1]].astype(np.int64) for i in range(len(names))]


def _duplicates(names: Sequence[str]) -> List[str]:
    return sorted(name for name, count in Counter(names).items() if count > 1)


def listing(names: Sequence[str], at_most: int = 5) -> str:
    shown = ", ".join(map(repr, names[:at_most]))
    return shown + (f" ... ({len(names)} in all)" if len(names) > at_most else "")
