"""The record of a memory of speakers' words in a checkpoint (the extra state of ``decoder.speaker_words``,
:data:`CHECKPOINT_KEY`; :class:`~fairseq_speaker.modules.speaker_words.SpeakerWords`): what :func:`write_record`
writes and :func:`read_record` reads back, checked against the model it is loaded into.

A record holds the options, the words never remembered (``ignored``), each speaker's distinct word ids (``lengths``
and the flat ``words``), the build the known speakers' rows come from (``built``: the rows whose words changed since,
with their words at the build; absent in records written before builds were kept, 0.8.0, which are their own build)
and the traits' kinds of speaker (``kinds``). A record that is not one, of another format version, over another
vocabulary or speaker table, or damaged, ends in a :class:`UserError` naming where it was read and what to do.
"""

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Set

import numpy as np
import torch
from torch import Tensor

from fairseq_speaker.checkpoints import WORDS_KEY
from fairseq_speaker.errors import UserError
from fairseq_speaker.modules.word_kinds import TraitKinds

#: where a checkpoint keeps the memory (the model's state dict)
CHECKPOINT_KEY = WORDS_KEY
#: the format of the record this version writes and reads
FORMAT_VERSION = 1


@dataclass
class Record:
    """A record read back: the memory its options describe (``memory(options, ignored)``'s), every speaker's distinct
    words, the traits' kinds, and the build's words."""

    memory: Any
    words: List[np.ndarray]
    kinds: List[TraitKinds]
    built: List[np.ndarray]


def record_error(where: str, what: str) -> UserError:
    """The refusal of a record read from ``where`` for ``what``."""
    return UserError(f"{where}: its speakers' words ({CHECKPOINT_KEY}) {what}; write them again with "
                     f"fairseq-speaker-words from the checkpoint they were written from (the one without them), or "
                     f"restore this file from a copy")


def write_record(vocab: int, options: Dict, ignored: Sequence[int], words: List[np.ndarray],
                 built: Optional[List[np.ndarray]], moved: Sequence[int], kinds: Sequence[TraitKinds]) -> Dict:
    """The record of a memory over ``vocab`` words: its ``options`` (as a dict), every speaker's ``words``, the build
    (``built``, None: none kept) of which only the rows ``moved`` since are written, and the traits' ``kinds``."""
    lengths = torch.tensor([len(w) for w in words], dtype=torch.long)
    ids = torch.from_numpy(np.concatenate(words).astype(np.int32)) if words else torch.zeros(0, dtype=torch.int32)
    state = {"version": FORMAT_VERSION, "vocab": vocab, "options": options, "ignored": list(ignored),
             "lengths": lengths, "words": ids}
    if built is not None:  # the build the known speakers' rows come from: the rows whose words changed since
        state["built"] = {"speakers": len(built), "rows": torch.tensor(list(moved), dtype=torch.long),
                          "lengths": torch.tensor([len(built[r]) for r in moved], dtype=torch.long),
                          "words": torch.from_numpy(np.concatenate([built[r] for r in moved]).astype(np.int32))
                          if moved else torch.zeros(0, dtype=torch.int32)}
    if kinds:
        state["kinds"] = [{"choices": [torch.from_numpy(w.astype(np.int64)) for w in t.choices],
                           "prior": torch.from_numpy(t.prior.astype(np.float64)),
                           "tables": [torch.from_numpy(x.astype(np.float64)) for x in t.tables]}
                          for t in kinds]
    return state


def read_record(state, vocab: int, where: str, option_names: Set[str], memory: Callable[[Dict, List[int]], Any],
                speakers: Optional[int] = None) -> Record:
    """The record ``state`` checked against a target vocabulary of ``vocab`` words, options named in
    ``option_names`` and a table of ``speakers`` rows (None: any); ``memory(options, ignored)`` makes the memory
    they describe (its own refusals included) once the words are checked and before the kinds and the build are
    read. A :class:`UserError` naming ``where`` when it cannot be this model's."""
    def bad(what: str) -> UserError:
        return record_error(where, what)

    if not isinstance(state, dict) or not {"version", "vocab", "options", "lengths", "words"} <= set(state):
        raise bad("are not a record of fairseq-speaker-words")
    if state["version"] != FORMAT_VERSION:
        raise bad(f"are in format {state['version']!r}, which this version of fairseq-speaker does not read "
                  f"(it reads {FORMAT_VERSION}): upgrade fairseq-speaker")
    if state["vocab"] != vocab:
        raise bad(f"are over {state['vocab']} target words, and the model has {vocab}")
    options = state["options"]
    if not isinstance(options, dict) or not set(options) <= option_names:
        raise bad(f"have options {sorted(options) if isinstance(options, dict) else options!r}, "
                  f"not {sorted(option_names)}")
    options = {"add_to": "logits", "rank_choices": "rates", "floor": False, **options}  # written before: as it was
    lengths, ids, ignored = state["lengths"], state["words"], state.get("ignored", [])
    if not _ids_tensor(lengths) or not _ids_tensor(ids) or int(lengths.sum()) != ids.numel() \
            or bool((lengths < 0).any()) or (ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab)) \
            or not isinstance(ignored, (list, tuple)) \
            or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < vocab for i in ignored):
        raise bad("are damaged (their word ids do not add up to their speakers' counts, or name no word of the model)")
    if speakers is not None and len(lengths) != speakers:
        raise bad(f"are of {len(lengths)} speakers, and the checkpoint's speaker table has {speakers}")
    made = memory(options, list(ignored))
    bounds = np.concatenate([[0], np.cumsum(lengths.numpy().astype(np.int64))])
    flat = ids.numpy().astype(np.int64)
    words = [np.unique(flat[bounds[i]:bounds[i + 1]]) for i in range(len(lengths))]
    kinds = _kinds_of(state.get("kinds", []), vocab, bad)
    return Record(made, words, kinds, _built_of(state.get("built"), words, vocab, bad))


def _built_of(record, words: List[np.ndarray], vocab: int, bad) -> List[np.ndarray]:
    """The build of a record (see :func:`write_record`): its rows' words where they changed since,
    the rows' own otherwise (the same arrays); a record written before builds were kept (0.8.0) is its own build."""
    if record is None:
        return list(words)
    damaged = bad("are damaged (their build's rows do not add up)")
    try:
        count, rows, lengths, ids = record["speakers"], record["rows"], record["lengths"], record["words"]
    except (TypeError, KeyError):
        raise damaged from None
    if not isinstance(count, int) or isinstance(count, bool) or not 0 <= count <= len(words) \
            or not all(_ids_tensor(x) for x in (rows, lengths, ids)) or len(rows) != len(lengths) \
            or int(lengths.sum()) != ids.numel() or bool((lengths < 0).any()) \
            or (rows.numel() and (int(rows.min()) < 0 or int(rows.max()) >= count)) \
            or (ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= vocab)):
        raise damaged
    built = list(words[:count])
    bounds = np.concatenate([[0], np.cumsum(lengths.numpy().astype(np.int64))])
    flat = ids.numpy().astype(np.int64)
    for i, row in enumerate(rows.tolist()):
        built[row] = np.unique(flat[bounds[i]:bounds[i + 1]])
    return built


def _kinds_of(records, vocab: int, bad) -> List[TraitKinds]:
    """The traits' kinds of a record (see :func:`write_record`), checked: the choices name words of
    the vocabulary, and the prior and every table are distributions of the same number of kinds."""
    out = []
    damaged = bad("are damaged (their kinds of speaker are not distributions over the words of the model)")
    if not isinstance(records, (list, tuple)):
        raise damaged
    for record in records:
        try:
            choices = [np.asarray(w.numpy(), dtype=np.int64) for w in record["choices"]]
            prior = np.asarray(record["prior"].numpy(), dtype=np.float64)
            tables = [np.asarray(x.numpy(), dtype=np.float64) for x in record["tables"]]
        except (TypeError, KeyError, AttributeError):
            raise damaged from None
        if prior.ndim != 1 or not len(prior) or len(tables) != len(choices) or not choices or not all(
                w.ndim == 1 and len(w) >= 2 and w.min() >= 0 and w.max() < vocab and x.shape == (len(prior), len(w))
                for w, x in zip(choices, tables)):
            raise damaged
        for p in [prior] + tables:
            if not np.all(np.isfinite(p)) or np.any(p <= 0) or not np.allclose(p.sum(-1), 1.0, atol=1e-6):
                raise damaged
        out.append(TraitKinds(choices, prior, tables))
    return out


def _ids_tensor(x) -> bool:
    """Whether ``x`` is a 1-d tensor of integers (not booleans), as a record's lengths and ids are."""
    return isinstance(x, Tensor) and x.dim() == 1 and x.dtype in (torch.int8, torch.int16, torch.int32, torch.int64)
