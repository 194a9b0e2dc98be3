"""What a speaker does to a decoder's state, and where: :class:`StateSites` and :class:`SpeakerState`.

A variant may act on the decoder's state (instead of, or besides, the logits) through a per-sentence
:class:`SpeakerState`: an offset ``[B, d_in]`` added to the decoder's input (the embedding of the previous word) at
every step, and per decoder layer a scale ``[B, d_l]`` on its hidden units (LHUC: ``h' = h * scale``). Where that is,
and its sizes, the family's decoder says (:class:`StateSites`, from its ``speaker_state_sites()``).
"""

from dataclasses import dataclass
from typing import List, Optional, Tuple

import torch
from torch import Tensor


@dataclass(frozen=True)
class StateSites:
    """Where a speaker state acts in a decoder, and its sizes (what a family's decoder offers through
    ``speaker_state_sites()``).

    Args:
        input_dim: d_in, the size of the decoder's input the offset is added to (the target word embedding).
        layer_dims: d_l for each decoder layer whose hidden units are scaled (the LSTM's h_t: one layer;
            the Transformer's residual stream after each layer).
    """

    input_dim: int
    layer_dims: Tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "layer_dims", tuple(int(d) for d in self.layer_dims))

    @property
    def hidden_dim(self) -> int:
        """The sum of the layers' sizes: one speaker's LHUC amplitudes for every layer."""
        return sum(self.layer_dims)


@dataclass
class SpeakerState:
    """What a speaker does to the decoder's state, per sentence (``B`` rows; None: nothing there).

    Args:
        input_offset: ``[B, d_in]``, added to the decoder's input (the previous word's embedding) at every step.
        layer_scales: per decoder layer, ``[B, d_l]`` or None: its hidden units are multiplied by it at every step.
    """

    input_offset: Optional[Tensor] = None
    layer_scales: Optional[Tuple[Optional[Tensor], ...]] = None

    def layer_scale(self, layer: int) -> Optional[Tensor]:
        """The scale ``[B, d_l]`` of one layer, or None (a scale of 1)."""
        if self.layer_scales is None or layer >= len(self.layer_scales):
            return None
        return self.layer_scales[layer]

    def tensors(self) -> List[Tensor]:
        return [t for t in [self.input_offset, *(self.layer_scales or ())] if t is not None]

    def _map(self, fn) -> "SpeakerState":
        return SpeakerState(
            None if self.input_offset is None else fn(self.input_offset),
            None if self.layer_scales is None else tuple(None if s is None else fn(s) for s in self.layer_scales))

    def index_select(self, index: Tensor) -> "SpeakerState":
        """The rows ``index`` (the hypotheses of a beam: each keeps its sentence's state)."""
        return self._map(lambda t: t.index_select(0, index))

    def to(self, *args, **kwargs) -> "SpeakerState":
        return self._map(lambda t: t.to(*args, **kwargs))

    def detach(self) -> "SpeakerState":
        """The same state, cut from the graph of the parameters it was made from (to be kept between batches)."""
        return self._map(Tensor.detach)

    def where(self, mask: Tensor, other: Optional["SpeakerState"]) -> "SpeakerState":
        """Rows where ``mask`` ``[B]`` is True take ``other``'s state (one row, for all of them), or none
        (offset 0, scale 1) when ``other`` is None."""
        def pick(mine: Optional[Tensor], theirs: Optional[Tensor], neutral: float) -> Optional[Tensor]:
            if mine is None:
                return None  # the same sites for every row: a variant gives a site to all speakers or to none
            fill = theirs.to(mine).expand_as(mine) if theirs is not None else mine.new_full((), neutral)
            return torch.where(mask.unsqueeze(1), fill, mine)

        scales = None
        if self.layer_scales is not None:
            scales = tuple(pick(s, other.layer_scale(i) if other is not None else None, 1.0)
                           for i, s in enumerate(self.layer_scales))
        return SpeakerState(pick(self.input_offset, other.input_offset if other is not None else None, 0.0), scales)

    def deviation(self) -> Tensor:
        """``[B]``: how far each row is from no state, ``||offset||^2 + sum_l ||scale_l - 1||^2`` (the L2 pull)."""
        total = None
        for t, neutral in [(self.input_offset, 0.0), *((s, 1.0) for s in (self.layer_scales or ()))]:
            if t is not None:
                part = (t.float() - neutral).pow(2).sum(dim=1)
                total = part if total is None else total + part
        assert total is not None, "a speaker state holds an input offset or layer scales"
        return total

    @staticmethod
    def compose(a: Optional["SpeakerState"], b: Optional["SpeakerState"]) -> Optional["SpeakerState"]:
        """Two states acting together (None-safe): offsets add, scales multiply."""
        if a is None or b is None:
            return a if b is None else b

        def join(x: Optional[Tensor], y: Optional[Tensor], op) -> Optional[Tensor]:
            return x if y is None else y if x is None else op(x, y.to(x))

        scales = None
        if a.layer_scales is not None or b.layer_scales is not None:
            n = max(len(a.layer_scales or ()), len(b.layer_scales or ()))
            scales = tuple(join(a.layer_scale(i), b.layer_scale(i), torch.mul) for i in range(n))
        return SpeakerState(join(a.input_offset, b.input_offset, torch.add), scales)

