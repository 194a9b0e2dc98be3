"""``speaker_lstm``: the attentional LSTM of Michel & Neubig (2018) with a speaker bias on the softmax.

The network is :mod:`fairseq_speaker.modules.attentional_lstm` (BiLSTM encoder,
input-feeding decoder with MLP attention, eq. 6 output tied to E_T); the speaker
plumbing (:mod:`fairseq_speaker.modules.speaker_plumbing`) adds the bias of the
variant chosen by ``--speaker-bias``: p_t = softmax(E_T o_t + b_T + b_s); a variant acting on the
decoder's state (``lhuc``, ``hyper_lhuc``, ``input``) offsets the previous word's embedding and scales
the decoder LSTM's h_t at every step.
Presets: ``lstm_base``, ``lstm_full_bias``, ``lstm_fact_bias`` (the paper's sizes), declared
with the rest of the family (sizes, the stock fairseq ``lstm`` it is measured against) at the end.
"""

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from fairseq.models import FairseqEncoderDecoderModel
from torch import Tensor

from fairseq_speaker.models.families import ModelSizes, StockModel, register_family
from fairseq_speaker.modules.attentional_lstm import AttentionalLSTMDecoder, BiLSTMEncoder
from fairseq_speaker.modules.speaker_bias import StateSites
from fairseq_speaker.modules.speaker_decoder import SpeakerDecoderMixin
from fairseq_speaker.modules.speaker_encoder import SpeakerEncoderMixin
from fairseq_speaker.modules.speaker_model_options import SpeakerModelConfig, check_network_options, fill_defaults
from fairseq_speaker.modules.speaker_plumbing import SpeakerModelMixin, register_speaker_model


@dataclass
class SpeakerLSTMConfig(SpeakerModelConfig):
    """Options of ``speaker_lstm``; the defaults are the paper's (its Appendix A). The speaker
    bias variants' options (``--speaker-rank``, ...) are added to these when the model registers."""

    encoder_embed_dim: int = field(default=512, metadata={"help": "source embedding dimension"})
    encoder_hidden_size: int = field(
        default=512, metadata={"help": "encoder LSTM size per direction (outputs are twice this)"}
    )
    decoder_embed_dim: int = field(
        default=512,
        metadata={"help": "target embedding dimension, also the size of o_t (the softmax is tied to E_T)"},
    )
    decoder_hidden_size: int = field(default=512, metadata={"help": "decoder LSTM size"})
    attention_dim: int = field(default=256, metadata={"help": "hidden size of the MLP attention"})
    dropout: float = field(
        default=0.4, metadata={"help": "dropout on o_t before the softmax (the authors' rate is 0.4)"}
    )
    lstm_dropout: float = field(
        default=0.4,
        metadata={"help": "variational dropout inside the encoder and decoder LSTMs: one mask per sentence "
                  "on the inputs and on the recurrent state, the same at every time step (Gal & Ghahramani)"},
    )
    target_word_dropout: float = field(
        default=0.1,
        metadata={"help": "probability of replacing a decoder input word by <unk> during training (Iyyer et al.)"},
    )
    max_source_positions: int = field(default=100000, metadata={"help": "longest source sentence"})
    max_target_positions: int = field(default=100000, metadata={"help": "longest target sentence"})


class SpeakerLSTMEncoder(SpeakerEncoderMixin, BiLSTMEncoder):
    pass


class SpeakerLSTMDecoder(SpeakerDecoderMixin, AttentionalLSTMDecoder):
    """The attentional LSTM decoder with the speaker's bias on its logits and its speaker state in its
    recurrence: the offset on the previous word's embedding, the scale on h_t (one layer)."""

    def speaker_state_sites(self) -> StateSites:
        return StateSites(input_dim=self.embed_tokens.embedding_dim, layer_dims=(self.cell.hidden_size,))

    def input_offset_and_hidden_scale(self) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        state = self.active_speaker_state()
        if state is None:
            return None, None
        return state.input_offset, state.layer_scale(0)


@register_speaker_model("speaker_lstm", dataclass=SpeakerLSTMConfig)
class SpeakerLSTMModel(SpeakerModelMixin, FairseqEncoderDecoderModel):
    """The paper's LSTM with the speaker bias of ``--speaker-bias``.

    ``forward(src_tokens, src_lengths, prev_output_tokens, speakers)`` returns the
    logits ``[batch, tgt_len, vocab]`` and a dict with ``attn`` and ``speaker_bias``.
    """

    @classmethod
    def build_model(cls, cfg, task):
        base_architecture(cfg)
        check_network_options(cfg)
        encoder = SpeakerLSTMEncoder(cfg, task.source_dictionary)
        decoder = SpeakerLSTMDecoder(cfg, task.target_dictionary, encoder.output_dim)
        return cls.with_speaker_bias(cls(encoder, decoder), cfg, task)


def base_architecture(args) -> None:
    """Fill every option not given with its default (the paper's), the variants' options included."""
    fill_defaults(args, SpeakerLSTMModel.speaker_options())


def size_args(sizes: ModelSizes) -> List[str]:
    """Embeddings, the encoder (per direction), the decoder's state and the attention."""
    return ["--encoder-embed-dim", str(sizes.embed), "--decoder-embed-dim", str(sizes.embed),
            "--encoder-hidden-size", str(sizes.encoder_hidden or sizes.embed),
            "--decoder-hidden-size", str(sizes.hidden), "--attention-dim", str(sizes.attention or sizes.embed)]


def stock_size_args(sizes: ModelSizes) -> List[str]:
    """fairseq's ``lstm`` at the same sizes: bidirectional encoder, output tied to the target embeddings
    (o_t has the embedding size, as ours); its attention is a dot product, without a size."""
    return ["--encoder-embed-dim", str(sizes.embed), "--encoder-hidden-size", str(sizes.encoder_hidden or sizes.embed),
            "--decoder-embed-dim", str(sizes.embed), "--decoder-hidden-size", str(sizes.hidden),
            "--encoder-bidirectional", "--decoder-out-embed-dim", str(sizes.embed),
            "--share-decoder-input-output-embed"]


register_family(
    "lstm", model="speaker_lstm", architecture=base_architecture,
    # the speaker plugs into the paper's network: the BiLSTM encoder carries the speakers, the bias is added
    # to the logits of the input-feeding decoder, a speaker state acts in its recurrence (speaker_state_sites)
    encoder=SpeakerLSTMEncoder, decoder=SpeakerLSTMDecoder,
    size_args=size_args,
    scales={"tiny": ModelSizes(8, 16), "toy": ModelSizes(16, 16), "demo": ModelSizes(64, 128)},
    stock=StockModel("translation", "lstm", "label_smoothed_cross_entropy", stock_size_args),
    demo_options=("--dropout", "0.1", "--optimizer", "adam", "--clip-norm", "1.0"), demo_lr=0.003,
    # in the order of the paper's description
    component_labels={
        "encoder.embed_tokens": "source embeddings E_S",
        "encoder.lstm": "encoder BiLSTM",
        "decoder.init_hidden": "decoder initial state W_p",
        "decoder.cell": "decoder LSTM (input feeding)",
        "decoder.attention": "MLP attention",
        "decoder.output_projection": "output layer W_o, b_o (eq. 6)",
        "decoder.embed_tokens": "target embeddings E_T (= softmax)",
        "decoder.output_bias": "softmax bias b_T",
        "decoder.speaker_bias": "speaker bias",
    },
)
