"""A speaker state applied in a decoder we do not own (fairseq's Transformer) through forward hooks.

:func:`hook_speaker_state` puts the active speaker state's input offset on the output of the decoder's token
embedding (:class:`_InputOffset`) and each layer's scale on the output of that layer (:class:`_LayerScale`); the
hooks read the state of the decoder's own forward
(:meth:`~fairseq_speaker.modules.speaker_decoder.SpeakerDecoderMixin.active_speaker_state`) and do nothing outside
it or without a state.
"""

from typing import TYPE_CHECKING, Optional, Sequence

from torch import Tensor, nn

if TYPE_CHECKING:
    from fairseq_speaker.modules.speaker_decoder import SpeakerDecoderMixin


class _InputOffset:
    """A forward hook on a decoder's token embedding: adds the input offset of the active speaker state
    (``[B, d_in]``) to every position of the embedded batch (``[B, T, d_in]``), only while the decoder's
    own forward runs (the module may be the encoder's too: ``--share-all-embeddings``)."""

    def __init__(self, decoder):
        self.decoder = decoder  # a strong reference: a copy of the model (EMA) copies the hook with its decoder

    def __call__(self, module: nn.Module, inputs, output: Tensor) -> Optional[Tensor]:
        state = self.decoder.active_speaker_state()
        if state is None or state.input_offset is None:
            return None
        offset = state.input_offset.to(output)
        return output + offset.reshape(offset.size(0), *([1] * (output.dim() - 2)), offset.size(1))


class _LayerScale:
    """A forward hook on a decoder layer whose output is ``x`` ``[T, B, d_l]`` (time first, as fairseq's
    layers), or a tuple starting with it: multiplies ``x`` by the active speaker state's scale of the layer."""

    def __init__(self, decoder, layer: int):
        self.decoder, self.layer = decoder, layer

    def __call__(self, module: nn.Module, inputs, output):
        state = self.decoder.active_speaker_state()
        scale = state.layer_scale(self.layer) if state is not None else None
        if scale is None:
            return None
        x = output[0] if isinstance(output, tuple) else output
        x = x * scale.to(x).unsqueeze(0)
        return (x, *output[1:]) if isinstance(output, tuple) else x


def hook_speaker_state(decoder: "SpeakerDecoderMixin", embedding: nn.Module, layers: Sequence[nn.Module]) -> None:
    """Apply the speaker state in a decoder we do not own (fairseq's) through forward hooks: the input offset
    on ``embedding``'s output, layer ``l``'s scale on the output of ``layers[l]`` (time first). Once per decoder;
    the hooks do nothing outside the decoder's forward or without a state."""
    if decoder.__dict__.get("_speaker_state_hooked"):
        return
    embedding.register_forward_hook(_InputOffset(decoder))
    for i, layer in enumerate(layers):
        layer.register_forward_hook(_LayerScale(decoder, i))
    decoder.__dict__["_speaker_state_hooked"] = True
