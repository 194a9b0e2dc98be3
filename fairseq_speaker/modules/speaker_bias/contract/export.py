"""Speakers' rows out of a variant and into it, and what inspection reads of it.

:meth:`~SpeakerExport.export_speakers` and :meth:`~SpeakerExport.import_speakers` copy the rows of given speakers
(portable rows, ``fairseq-speaker-vectors``; the service's store). :meth:`~SpeakerExport.speaker_vectors` and
:meth:`~SpeakerExport.vocabulary_vectors` gather what the variant and every variant nested in it show
(:meth:`own_speaker_vectors`, :meth:`own_vocabulary_vectors`) for the inspection report.
"""

from typing import Dict, Optional, Sequence

import torch
from torch import Tensor

from .parameters import SpeakerParameters


class SpeakerExport(SpeakerParameters):
    """Speakers' rows out and in; the speaker and vocabulary vectors inspection compares."""

    # -- rows out and in -----------------------------------------------------------------------
    def export_speakers(self, ids: Sequence[int]) -> Dict[str, Tensor]:
        """The rows of the given speakers: name -> ``[len(ids), ...]`` (copies)."""
        index = torch.as_tensor(list(ids), dtype=torch.long)
        self.check_speakers(index)
        if bool((index < 0).any()):
            raise IndexError("only known speakers (ids >= 0) have parameters to export")
        return {name: p.detach().index_select(0, index.to(p.device)).clone()
                for name, p in self.speaker_parameters().items()}

    def import_speakers(self, ids: Sequence[int], rows: Dict[str, Tensor]) -> None:
        """Overwrite the given speakers' rows with ``rows`` (as :meth:`export_speakers` gives them)."""
        index = torch.as_tensor(list(ids), dtype=torch.long)
        self.check_speakers(index)
        params = self.speaker_parameters()
        if set(rows) != set(params):
            raise ValueError(f"speaker parameters {sorted(rows)} do not match this variant's {sorted(params)}")
        for name, param in params.items():
            expected = (len(index), *param.shape[1:])
            if tuple(rows[name].shape) != expected:
                raise ValueError(f"{name}: rows of shape {tuple(rows[name].shape)}, expected {expected}")
        with torch.no_grad():
            for name, param in params.items():
                param.index_copy_(0, index.to(param.device), rows[name].to(param))

    # -- inspection ----------------------------------------------------------------------------
    def speaker_vectors(self) -> Optional[Tensor]:
        """What speakers are compared by ``[S, d]`` (nearest speakers, projections): the
        :meth:`own_speaker_vectors` of this variant and the variants nested in it, side by side;
        None without speaker parameters."""
        parts = [v for _, variant in self.named_variants() for v in [variant.own_speaker_vectors()] if v is not None]
        return torch.cat(parts, dim=1) if parts else None

    def vocabulary_vectors(self) -> Dict[str, Tensor]:
        """Shared vectors over the target vocabulary worth reading word by word: label -> ``[V, k]``
        (fact's shared bias vectors, topic's topic-word weights, ...). Nested variants' are included."""
        vectors = {}
        for prefix, variant in self.named_variants():
            for label, value in variant.own_vocabulary_vectors().items():
                vectors[f"{prefix.split('.')[-1]}: {label}" if prefix else label] = value
        return vectors
