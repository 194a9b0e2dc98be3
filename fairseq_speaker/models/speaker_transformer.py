"""``speaker_transformer``: fairseq's transformer with a speaker bias on the softmax.

Every option of fairseq's ``transformer`` applies (sizes, layers, heads,
``--share-all-embeddings``, ...); the speaker plumbing adds the bias of the
variant chosen by ``--speaker-bias`` to the logits, and a variant acting on the
decoder's state offsets the decoder's target embeddings and scales the residual
stream after each decoder layer (forward hooks, active only while the decoder runs:
with ``--share-all-embeddings`` the encoder's embeddings are left alone). Presets ``transformer_base``
(no speaker bias), ``transformer_full_bias`` and ``transformer_fact_bias`` take
fairseq's defaults for ``--arch transformer`` (512, 6 + 6 layers, untied output
layer: ``--share-decoder-input-output-embed`` ties it to the target embeddings as
the paper does, which the recipes, configs and demo of this package do);
smaller settings are flags away, e.g. fairseq's iwslt_de_en sizes with
``--encoder-ffn-embed-dim 1024 --decoder-ffn-embed-dim 1024 --encoder-attention-heads 4
--decoder-attention-heads 4``. The family's declaration (sizes, the stock ``transformer`` it is
measured against, the demo's schedule) ends the module.
"""

from typing import List, Optional, Tuple

from fairseq.models.transformer import (
    TransformerConfig,
    TransformerDecoderBase,
    TransformerEncoderBase,
    TransformerModel,
)
from fairseq.models.transformer import base_architecture as transformer_base_architecture
from torch import Tensor, nn

from fairseq_speaker.errors import UserError
from fairseq_speaker.models.families import ModelSizes, StockModel, register_family
from fairseq_speaker.modules.speaker_bias import StateSites
from fairseq_speaker.modules.speaker_decoder import SpeakerDecoderMixin
from fairseq_speaker.modules.speaker_encoder import SpeakerEncoderMixin
from fairseq_speaker.modules.speaker_model_options import check_network_options, fill_defaults
from fairseq_speaker.modules.speaker_plumbing import SpeakerModelMixin, register_speaker_model
from fairseq_speaker.modules.speaker_state_hooks import hook_speaker_state


class SpeakerTransformerEncoder(SpeakerEncoderMixin, TransformerEncoderBase):
    pass


class SpeakerTransformerDecoder(SpeakerDecoderMixin, TransformerDecoderBase):
    """fairseq's decoder with the speaker's bias on its logits; a speaker state acts through forward hooks
    (fairseq's code is not copied): its offset on the target embeddings ``embed_tokens`` (before fairseq's
    embedding scale and positions), its scales on the residual stream after each decoder layer."""

    def output_weight_and_bias(self) -> Optional[Tuple[Tensor, Optional[Tensor]]]:
        if self.adaptive_softmax is None and isinstance(self.output_projection, nn.Linear):
            return self.output_projection.weight, self.output_projection.bias
        return None

    def speaker_state_sites(self) -> StateSites:
        return StateSites(input_dim=self.embed_tokens.embedding_dim,
                          layer_dims=tuple(layer.embed_dim for layer in self.layers))

    def prepare_speaker_state(self) -> None:
        hook_speaker_state(self, self.embed_tokens, list(self.layers))


@register_speaker_model("speaker_transformer")
class SpeakerTransformerModel(SpeakerModelMixin, TransformerModel):
    """fairseq's transformer (argparse options, as ``--arch transformer``) with the speaker bias of
    ``--speaker-bias``; ``forward`` takes ``speakers`` beside fairseq's transformer arguments."""

    @classmethod
    def build_model(cls, args, task):
        architecture(args)
        check_network_options(args)
        for side in ("encoder", "decoder"):
            dim, heads = getattr(args, f"{side}_embed_dim", None), getattr(args, f"{side}_attention_heads", None)
            if isinstance(dim, int) and isinstance(heads, int) and dim % heads:  # fairseq's assertion otherwise
                raise UserError(f"--{side}-embed-dim {dim} is not a multiple of --{side}-attention-heads {heads}: each "
                                f"head takes an equal share of the embedding")
        if getattr(args, "adaptive_softmax_cutoff", None):
            raise UserError("a speaker bias is added to the full softmax: --adaptive-softmax-cutoff is not supported")
        return cls.with_speaker_bias(super().build_model(args, task), args, task)

    @classmethod
    def build_encoder(cls, cfg, src_dict, embed_tokens):
        return SpeakerTransformerEncoder(TransformerConfig.from_namespace(cfg), src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, cfg, tgt_dict, embed_tokens):
        cfg = TransformerConfig.from_namespace(cfg)
        return SpeakerTransformerDecoder(cfg, tgt_dict, embed_tokens, no_encoder_attn=cfg.no_cross_attention)

    def forward(
        self,
        src_tokens: Tensor,
        src_lengths: Tensor,
        prev_output_tokens: Tensor,
        speakers: Optional[Tensor] = None,
        return_all_hiddens: bool = True,
        features_only: bool = False,
        alignment_layer: Optional[int] = None,
        alignment_heads: Optional[int] = None,
    ):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, speakers=speakers,
                                   return_all_hiddens=return_all_hiddens)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, features_only=features_only,
                            alignment_layer=alignment_layer, alignment_heads=alignment_heads,
                            src_lengths=src_lengths, return_all_hiddens=return_all_hiddens)


def architecture(args) -> None:
    """The speaker options' defaults, then fairseq's base transformer for every option not given."""
    fill_defaults(args, SpeakerTransformerModel.speaker_options())
    transformer_base_architecture(args)


def size_args(sizes: ModelSizes) -> List[str]:
    """The model width, the feed-forward layers, the layers and heads of each side."""
    ffn = str(sizes.ffn or sizes.hidden)
    return ["--encoder-embed-dim", str(sizes.embed), "--decoder-embed-dim", str(sizes.embed),
            "--encoder-ffn-embed-dim", ffn, "--decoder-ffn-embed-dim", ffn,
            "--encoder-layers", str(sizes.layers), "--decoder-layers", str(sizes.layers),
            "--encoder-attention-heads", str(sizes.heads), "--decoder-attention-heads", str(sizes.heads)]


#: fairseq's defaults leave the output layer untied; the paper ties it to the target embeddings
TIE_OUTPUT = ("--share-decoder-input-output-embed",)

register_family(
    "transformer", model="speaker_transformer", architecture=architecture,
    # the speaker plugs into fairseq's own encoder and decoder (the model's build_encoder / build_decoder)
    encoder=SpeakerTransformerEncoder, decoder=SpeakerTransformerDecoder,
    size_args=size_args,
    scales={"tiny": ModelSizes(16, 32), "toy": ModelSizes(16, 32), "demo": ModelSizes(64, 128, layers=2, heads=4)},
    stock=StockModel("translation", "transformer", "label_smoothed_cross_entropy",
                     lambda sizes: size_args(sizes) + list(TIE_OUTPUT)),
    tie_output=TIE_OUTPUT,
    demo_options=("--dropout", "0.1", "--optimizer", "adam", "--adam-betas", "(0.9, 0.98)", "--clip-norm", "1.0",
                  "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "200"),
    demo_lr=0.002,
)
