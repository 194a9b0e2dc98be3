"""``speaker_lstm``: the attentional LSTM of Michel & Neubig (2018) with a speaker bias on the softmax.

Encoder: a one-layer bidirectional LSTM over source embeddings.
Decoder: a one-layer LSTM with input feeding and MLP attention; the output
layer is the paper's eq. 6,

    o_t = W_oh h_t + W_oc c_t + W_ow E_T w_(t-1) + b_o
    p_t = softmax(E_T o_t + b_T + b_s)

with the softmax weight tied to the target embeddings E_T and b_s the bias of
the speaker, produced by the variant named by ``--speaker-bias`` (see
:mod:`fairseq_speaker.modules.speaker_bias`). Named presets: ``lstm_base`` (no
speaker bias), ``lstm_full_bias`` and ``lstm_fact_bias``.
"""

from dataclasses import dataclass, field, fields
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq import utils
from fairseq.dataclass import FairseqDataclass
from fairseq.models import (
    FairseqEncoder,
    FairseqEncoderDecoderModel,
    FairseqIncrementalDecoder,
    register_model,
    register_model_architecture,
)
from fairseq.modules import FairseqDropout
from torch import Tensor, nn

from fairseq_speaker.modules.mlp_attention import MLPAttention
from fairseq_speaker.modules.variational_lstm import sentence_mask, variational_bilstm
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY, SpeakerBias, build_speaker_bias

EncoderOut = Dict[str, Optional[Tensor]]


@dataclass
class SpeakerLSTMConfig(FairseqDataclass):
    """Options of ``speaker_lstm``; the defaults are the paper's (its Appendix A)."""

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
    speaker_bias: str = field(
        default="none",
        metadata={"help": "speaker bias variant: a name registered in fairseq_speaker.modules.speaker_bias "
                  "(none, full, fact, ...)"},
    )
    speaker_rank: int = field(
        default=10, metadata={"help": "fact bias: r, the number of shared bias vectors"}
    )
    max_source_positions: int = field(default=100000, metadata={"help": "longest source sentence"})
    max_target_positions: int = field(default=100000, metadata={"help": "longest target sentence"})


def Embedding(num_embeddings: int, embedding_dim: int, padding_idx: int) -> nn.Embedding:
    """Embeddings initialized N(0, 1/sqrt(d)), the padding row at zero."""
    m = nn.Embedding(num_embeddings, embedding_dim, padding_idx=padding_idx)
    nn.init.normal_(m.weight, mean=0.0, std=embedding_dim ** -0.5)
    nn.init.constant_(m.weight[padding_idx], 0.0)
    return m


@register_model("speaker_lstm", dataclass=SpeakerLSTMConfig)
class SpeakerLSTMModel(FairseqEncoderDecoderModel):
    """Encoder-decoder whose decoder adds a speaker bias to its logits.

    ``forward`` takes ``speakers`` (LongTensor ``[batch]``) beside the usual
    ``src_tokens``, ``src_lengths`` and ``prev_output_tokens``; it returns the
    logits ``[batch, tgt_len, vocab]`` and a dict with ``attn`` and
    ``speaker_bias`` (``[batch, vocab]`` or None).
    """

    @classmethod
    def build_model(cls, cfg, task):
        base_architecture(cfg)
        if cfg.speaker_bias not in SPEAKER_BIAS_REGISTRY:
            raise ValueError(
                f"unknown --speaker-bias {cfg.speaker_bias!r}; registered variants: "
                f"{', '.join(sorted(SPEAKER_BIAS_REGISTRY))}"
            )
        speaker_dictionary = getattr(task, "speaker_dictionary", None)
        if cfg.speaker_bias != "none" and speaker_dictionary is None:
            raise ValueError(
                f"--speaker-bias {cfg.speaker_bias} needs speakers: use --task speaker_translation"
            )
        num_speakers = len(speaker_dictionary) if speaker_dictionary is not None else 0
        bias = build_speaker_bias(cfg.speaker_bias, cfg, num_speakers, len(task.target_dictionary))
        encoder = SpeakerLSTMEncoder(cfg, task.source_dictionary)
        decoder = SpeakerLSTMDecoder(cfg, task.target_dictionary, encoder.output_dim, bias)
        return cls(encoder, decoder)

    def forward(self, src_tokens, src_lengths, prev_output_tokens, speakers=None, **kwargs):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, speakers=speakers)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out)

    @property
    def speaker_bias(self) -> SpeakerBias:
        return self.decoder.speaker_bias


class SpeakerLSTMEncoder(FairseqEncoder):
    """One-layer bidirectional LSTM; carries the batch's speakers to the decoder.

    Returns a dict:
        encoder_out: ``[src_len, batch, 2 * hidden]``, zero at padding
        encoder_padding_mask: ``[src_len, batch]``, True at padding
        encoder_last: ``[batch, 2 * hidden]``, the output at the last real token
        speakers: ``[batch]`` or None; reordered with the beam like the rest
    """

    def __init__(self, cfg: SpeakerLSTMConfig, dictionary):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.max_source_positions = cfg.max_source_positions
        self.embed_tokens = Embedding(len(dictionary), cfg.encoder_embed_dim, self.padding_idx)
        self.lstm = nn.LSTM(cfg.encoder_embed_dim, cfg.encoder_hidden_size, bidirectional=True)
        self.lstm_dropout = cfg.lstm_dropout
        self.output_dim = 2 * cfg.encoder_hidden_size

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, speakers: Optional[Tensor] = None) -> EncoderOut:
        # packing wants right padding; fairseq pads sources on the left by default
        src_tokens = utils.convert_padding_direction(src_tokens, self.padding_idx, left_to_right=True)
        bsz, src_len = src_tokens.shape
        x = self.embed_tokens(src_tokens).transpose(0, 1)  # T x B x E
        if self.training and self.lstm_dropout > 0:
            out = variational_bilstm(self.lstm, x, src_lengths, self.lstm_dropout)  # T x B x 2H
        else:  # the fused kernel, same weights
            packed = nn.utils.rnn.pack_padded_sequence(x, src_lengths.cpu(), enforce_sorted=False)
            out, _ = self.lstm(packed)
            out, _ = nn.utils.rnn.pad_packed_sequence(out, total_length=src_len)  # T x B x 2H
        last = out[src_lengths - 1, torch.arange(bsz, device=out.device)]  # B x 2H
        return {
            "encoder_out": out,
            "encoder_padding_mask": src_tokens.eq(self.padding_idx).t(),  # T x B
            "encoder_last": last,
            "speakers": speakers,
        }

    def reorder_encoder_out(self, encoder_out: EncoderOut, new_order: Tensor) -> EncoderOut:
        batch_dim = {"encoder_out": 1, "encoder_padding_mask": 1, "encoder_last": 0, "speakers": 0}
        return {
            key: (None if value is None else value.index_select(batch_dim[key], new_order))
            for key, value in encoder_out.items()
        }

    def max_positions(self) -> int:
        return self.max_source_positions


class SpeakerLSTMDecoder(FairseqIncrementalDecoder):
    """LSTM decoder with input feeding, MLP attention, eq. 6 and a speaker bias.

    At step t the LSTM reads [E_T w_(t-1); c_(t-1)]; its state h_t attends over
    the encoder outputs to give c_t. The initial state is h_0 = W_p x_last + b_p
    (x_last the encoder output at the last source token), c_0 = 0, as in the
    authors' code. During incremental decoding the speaker bias and the
    attention keys are computed at the first step and kept in the cache.
    """

    def __init__(self, cfg: SpeakerLSTMConfig, dictionary, encoder_output_dim: int, speaker_bias: SpeakerBias):
        super().__init__(dictionary)
        self.max_target_positions = cfg.max_target_positions
        embed_dim, hidden = cfg.decoder_embed_dim, cfg.decoder_hidden_size
        self.embed_tokens = Embedding(len(dictionary), embed_dim, dictionary.pad())
        self.init_hidden = nn.Linear(encoder_output_dim, hidden)  # W_p, b_p
        self.cell = nn.LSTMCell(embed_dim + encoder_output_dim, hidden)
        self.attention = MLPAttention(encoder_output_dim, hidden, cfg.attention_dim)
        # W_oh, W_oc, W_ow and b_o of eq. 6 as one matrix over [h_t; c_t; E_T w_(t-1)]
        self.output_projection = nn.Linear(hidden + encoder_output_dim + embed_dim, embed_dim)
        self.output_bias = nn.Parameter(torch.zeros(len(dictionary)))  # b_T
        self.dropout_out = FairseqDropout(cfg.dropout, module_name=self.__class__.__name__)
        self.lstm_dropout = cfg.lstm_dropout
        self.target_word_dropout = cfg.target_word_dropout
        self.unk_idx = dictionary.unk()
        self.padding_idx = dictionary.pad()
        self.speaker_bias = speaker_bias

    def forward(
        self,
        prev_output_tokens: Tensor,
        encoder_out: EncoderOut,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        features_only: bool = False,
        **kwargs,
    ) -> Tuple[Tensor, Dict]:
        features, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if features_only:
            return features, extra
        return self.output_layer(features, extra["speaker_bias"]), extra

    def extract_features(
        self,
        prev_output_tokens: Tensor,
        encoder_out: EncoderOut,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
    ) -> Tuple[Tensor, Dict]:
        """Returns o_t ``[batch, tgt_len, embed_dim]`` (after dropout) and ``attn``/``speaker_bias``."""
        encoder_outs = encoder_out["encoder_out"]  # S x B x C
        padding_mask = encoder_out["encoder_padding_mask"]  # S x B
        cached = None
        if incremental_state is not None:
            cached = self.get_incremental_state(incremental_state, "cached_state")
        if cached is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            hidden, cell, feed = cached["hidden"], cached["cell"], cached["feed"]
            keys, bias = cached["keys"], cached["speaker_bias"]
        else:
            hidden = self.init_hidden(encoder_out["encoder_last"])  # B x H
            cell = torch.zeros_like(hidden)
            feed = encoder_outs.new_zeros(encoder_outs.size(1), encoder_outs.size(2))  # B x C
            keys = self.attention.project_keys(encoder_outs)  # S x B x A, once per sentence
            speakers = encoder_out.get("speakers")
            bias = self.speaker_bias(speakers) if speakers is not None else None  # B x V, once per sentence

        if self.training and self.target_word_dropout > 0:
            prev_output_tokens = self.drop_words(prev_output_tokens)
        embedded = self.embed_tokens(prev_output_tokens).transpose(0, 1)  # T x B x E
        in_mask = hidden_mask = None
        if self.training and self.lstm_dropout > 0:  # one mask per sentence, for every step
            bsz = embedded.size(1)
            in_mask = sentence_mask(bsz, embedded.size(2) + feed.size(1), self.lstm_dropout, embedded)
            hidden_mask = sentence_mask(bsz, hidden.size(1), self.lstm_dropout, embedded)
        hiddens: List[Tensor] = []
        contexts: List[Tensor] = []
        attns: List[Tensor] = []
        for step in range(embedded.size(0)):
            lstm_input = torch.cat([embedded[step], feed], dim=1)
            if in_mask is not None:
                hidden, cell = self.cell(lstm_input * in_mask, (hidden * hidden_mask, cell))
            else:
                hidden, cell = self.cell(lstm_input, (hidden, cell))
            feed, attn = self.attention(hidden, keys, encoder_outs, padding_mask)  # B x C, B x S
            hiddens.append(hidden)
            contexts.append(feed)
            attns.append(attn)

        if incremental_state is not None:
            self.set_incremental_state(
                incremental_state,
                "cached_state",
                {"hidden": hidden, "cell": cell, "feed": feed, "keys": keys, "speaker_bias": bias},
            )

        features = torch.cat([torch.stack(hiddens), torch.stack(contexts), embedded], dim=2)  # T x B x (H+C+E)
        out = self.dropout_out(self.output_projection(features)).transpose(0, 1)  # B x T x E
        return out, {"attn": [torch.stack(attns, dim=1)], "speaker_bias": bias}

    def drop_words(self, tokens: Tensor) -> Tensor:
        """Replace decoder input words by <unk> with probability ``target_word_dropout`` (not the first, BOS)."""
        drop = torch.rand(tokens.shape, device=tokens.device) < self.target_word_dropout
        drop[:, 0] = False
        drop &= tokens.ne(self.padding_idx)
        return tokens.masked_fill(drop, self.unk_idx)

    def output_layer(self, features: Tensor, speaker_bias: Optional[Tensor] = None) -> Tensor:
        """E_T o_t + b_T (+ b_s): ``[batch, tgt_len, vocab]``."""
        logits = F.linear(features, self.embed_tokens.weight, self.output_bias)
        if speaker_bias is not None:
            logits = logits + speaker_bias.unsqueeze(1).to(logits)
        return logits

    def reorder_incremental_state(
        self, incremental_state: Dict[str, Dict[str, Optional[Tensor]]], new_order: Tensor
    ) -> None:
        cached = self.get_incremental_state(incremental_state, "cached_state")
        if cached is None:
            return
        batch_dim = {"keys": 1}
        reordered = {
            key: (None if value is None else value.index_select(batch_dim.get(key, 0), new_order))
            for key, value in cached.items()
        }
        self.set_incremental_state(incremental_state, "cached_state", reordered)

    def max_positions(self) -> int:
        return self.max_target_positions


def base_architecture(args) -> None:
    """Fill every option not given with the default of :class:`SpeakerLSTMConfig` (the paper's)."""
    for f in fields(SpeakerLSTMConfig):
        if f.name != "_name" and not utils.safe_hasattr(args, f.name):
            setattr(args, f.name, f.default)


@register_model_architecture("speaker_lstm", "lstm_base")
def lstm_base(args):
    """The speaker-agnostic baseline: the same network without speaker bias."""
    args.speaker_bias = utils.safe_getattr(args, "speaker_bias", "none")
    base_architecture(args)


@register_model_architecture("speaker_lstm", "lstm_full_bias")
def lstm_full_bias(args):
    """full_bias (eq. 2): one vocabulary-sized bias per speaker."""
    args.speaker_bias = utils.safe_getattr(args, "speaker_bias", "full")
    base_architecture(args)


@register_model_architecture("speaker_lstm", "lstm_fact_bias")
def lstm_fact_bias(args):
    """fact_bias (eq. 4): r shared bias vectors mixed by r weights per speaker."""
    args.speaker_bias = utils.safe_getattr(args, "speaker_bias", "fact")
    base_architecture(args)
