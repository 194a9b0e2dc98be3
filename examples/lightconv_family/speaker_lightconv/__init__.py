"""A third model family from a package of its own: fairseq's LightConv, speaker-aware.

LightConv (Wu et al., "Pay Less Attention with Lightweight and Dynamic Convolutions", ICLR 2019;
``fairseq.models.lightconv``) replaces self-attention by convolutions whose weights are shared
across channels (``--encoder-conv-type lightweight``) or predicted at each position (``dynamic``,
the default). Pass this folder to fairseq as ``--user-dir``: importing it imports fairseq-speaker
and registers the model ``speaker_lightconv`` and the family ``lightconv``, with its presets
``lightconv_base``, ``lightconv_full_bias`` and ``lightconv_fact_bias`` (``--speaker-bias NAME``
puts any variant on them). Nothing in fairseq-speaker is edited: the family's declaration at the
end of this file is what the demo, the benchmark, the parameter accounting and the test helpers
read. See ../README.md.

Where the speaker plugs in: the encoder keeps the speakers in its output (``SpeakerEncoderMixin``
before fairseq's ``LightConvEncoder``), the decoder adds the variant's bias to its logits
(``SpeakerDecoderMixin`` before fairseq's ``LightConvDecoder``) and says where a speaker state acts
(``speaker_state_sites``: the target embeddings and each decoder layer's output, through hooks).
"""

from typing import List

from fairseq.models.lightconv import LightConvDecoder, LightConvEncoder, LightConvModel
from fairseq.models.lightconv import base_architecture as lightconv_base_architecture

import fairseq_speaker  # noqa: F401  (the task, the criterion, the variants and the family registry)
from fairseq_speaker.errors import UserError
from fairseq_speaker.models import ModelSizes, StockModel, register_family
from fairseq_speaker.modules.speaker_bias import StateSites
from fairseq_speaker.modules.speaker_decoder import SpeakerDecoderMixin
from fairseq_speaker.modules.speaker_encoder import SpeakerEncoderMixin
from fairseq_speaker.modules.speaker_model_options import fill_defaults
from fairseq_speaker.modules.speaker_plumbing import SpeakerModelMixin, register_speaker_model
from fairseq_speaker.modules.speaker_state_hooks import hook_speaker_state


class SpeakerLightConvEncoder(SpeakerEncoderMixin, LightConvEncoder):
    pass


class LogitsAsFeatures(LightConvDecoder):
    """fairseq's ``LightConvDecoder``, whose ``forward`` projects to the vocabulary itself and takes no
    ``features_only``, where the speaker mixin asks for features and then calls ``output_layer``: its output
    serves as both, the logits being the features and ``output_layer`` leaving them as they are. (A decoder
    that can stop before its output layer, as fairseq's transformer, also lets a generation step make its
    logits with the bias in one product: see ``output_weight_and_bias`` in the speaker plumbing.)"""

    def forward(self, prev_output_tokens, encoder_out=None, incremental_state=None, features_only=False,
                src_lengths=None, **unused):
        return super().forward(prev_output_tokens, encoder_out=encoder_out, incremental_state=incremental_state,
                               src_lengths=src_lengths)

    def output_layer(self, features):
        return features


class SpeakerLightConvDecoder(SpeakerDecoderMixin, LogitsAsFeatures):
    """Where a speaker state acts (``--speaker-bias lhuc``, ``hyper_lhuc``, ``input``): an offset on the target
    embeddings and a scale on the output of each decoder layer, through forward hooks, as the Transformer's."""

    def speaker_state_sites(self) -> StateSites:
        return StateSites(input_dim=self.embed_tokens.embedding_dim,
                          layer_dims=tuple(layer.embed_dim for layer in self.layers))

    def prepare_speaker_state(self) -> None:
        hook_speaker_state(self, self.embed_tokens, list(self.layers))


@register_speaker_model("speaker_lightconv")
class SpeakerLightConvModel(SpeakerModelMixin, LightConvModel):
    """fairseq's lightconv (argparse options, as ``--arch lightconv``) with the speaker bias of
    ``--speaker-bias``; ``forward`` takes ``speakers`` beside fairseq's arguments."""

    @classmethod
    def build_model(cls, args, task):
        architecture(args)
        if getattr(args, "adaptive_softmax_cutoff", None):
            raise UserError("a speaker bias is added to the full softmax: --adaptive-softmax-cutoff is not supported")
        built = super().build_model(args, task)  # fairseq's own: embeddings, --share-all-embeddings, ...
        # fairseq's LightConvModel.build_model names its encoder and decoder classes (it has no build_encoder
        # hook, as the transformer has); the speaker classes add methods and no state, so the modules it built
        # become them
        built.encoder.__class__ = SpeakerLightConvEncoder
        built.decoder.__class__ = SpeakerLightConvDecoder
        return cls.with_speaker_bias(cls(built.encoder, built.decoder), args, task)


def architecture(args) -> None:
    """The speaker options' defaults, then fairseq's base lightconv for every option not given."""
    fill_defaults(args, SpeakerLightConvModel.speaker_options())
    lightconv_base_architecture(args)


#: fairseq's default kernel widths, layer by layer (its 7 encoder and 6 decoder layers)
ENCODER_KERNELS = [3, 7, 15, 31, 31, 31, 31]
DECODER_KERNELS = [3, 7, 15, 31, 31, 31]


def size_args(sizes: ModelSizes) -> List[str]:
    """The model width, the feed-forward layers, the layers and heads of each side; a kernel width per layer
    (fairseq's first ones: its base architecture requires one per layer)."""
    ffn, layers = str(sizes.ffn or sizes.hidden), sizes.layers

    def kernels(default: List[int]) -> str:
        return str((default + default[-1:] * layers)[:layers]).replace(" ", "")

    return ["--encoder-embed-dim", str(sizes.embed), "--decoder-embed-dim", str(sizes.embed),
            "--encoder-ffn-embed-dim", ffn, "--decoder-ffn-embed-dim", ffn,
            "--encoder-layers", str(layers), "--decoder-layers", str(layers),
            "--encoder-attention-heads", str(sizes.heads), "--decoder-attention-heads", str(sizes.heads),
            "--encoder-kernel-size-list", kernels(ENCODER_KERNELS),
            "--decoder-kernel-size-list", kernels(DECODER_KERNELS)]


#: fairseq leaves the output layer untied; the paper ties it to the target embeddings
TIE_OUTPUT = ("--share-decoder-input-output-embed",)

register_family(
    "lightconv", model="speaker_lightconv", architecture=architecture,
    encoder=SpeakerLightConvEncoder, decoder=SpeakerLightConvDecoder,
    size_args=size_args,
    scales={"tiny": ModelSizes(16, 32), "toy": ModelSizes(16, 32), "demo": ModelSizes(64, 128, layers=2, heads=4)},
    stock=StockModel("translation", "lightconv", "label_smoothed_cross_entropy",
                     lambda sizes: size_args(sizes) + list(TIE_OUTPUT)),
    tie_output=TIE_OUTPUT,
    demo_options=("--dropout", "0.1", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "1.0",
                  "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "200"),
    demo_lr=0.002,
)
