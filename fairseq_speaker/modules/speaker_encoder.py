"""The encoder's part of a speaker model: :class:`SpeakerEncoderMixin`, put before a fairseq encoder class.

fairseq hands every ``net_input`` key but ``prev_output_tokens`` to the encoder: the mixin keeps the speakers
``[B]`` (and the source tokens, for variants that read the source) in the encoder output, as
``encoder_out["speakers"]`` and ``encoder_out["source_tokens"]``, so that ``reorder_encoder_out`` gives each
hypothesis of the beam its own speaker; :func:`encoder_speakers` reads them back (the decoder's mixin, generation).
"""

from typing import Dict, List, Optional

from torch import Tensor

EncoderOut = Dict[str, List[Tensor]]


def encoder_speakers(encoder_out: Optional[EncoderOut]) -> Optional[Tensor]:
    """The speaker ids ``[B]`` kept in an encoder output, or None."""
    if not encoder_out or not encoder_out.get("speakers"):
        return None
    return encoder_out["speakers"][0]


class SpeakerEncoderMixin:
    """Put before a fairseq encoder class: its forward accepts ``speakers`` and keeps them (and the
    source tokens, for variants that read the source) in its output; reordering keeps them aligned."""

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None,
                speakers: Optional[Tensor] = None, **kwargs) -> EncoderOut:
        encoder_out = super().forward(src_tokens, src_lengths=src_lengths, **kwargs)
        encoder_out["speakers"] = [] if speakers is None else [speakers]
        encoder_out["source_tokens"] = [src_tokens]
        return encoder_out

    def reorder_encoder_out(self, encoder_out: EncoderOut, new_order: Tensor) -> EncoderOut:
        reordered = super().reorder_encoder_out(encoder_out, new_order)
        for key in ("speakers", "source_tokens"):
            reordered[key] = [t.index_select(0, new_order) for t in encoder_out.get(key, [])]
        return reordered
