"""The attentional LSTM of Michel & Neubig (2018), without speakers: a BiLSTM encoder and an
input-feeding LSTM decoder with MLP attention and the output layer of their eq. 6.

``models/speaker_lstm.py`` makes it speaker-aware with the speaker plumbing.
"""

from typing import Dict, List, Optional, Tuple

import torch
from fairseq import utils
from fairseq.models import FairseqEncoder, FairseqIncrementalDecoder
from fairseq.modules import FairseqDropout
from torch import Tensor, nn

from fairseq_speaker import fast_paths
from fairseq_speaker.modules import gemm
from fairseq_speaker.modules.gemm import linear
from fairseq_speaker.modules.mlp_attention import MLPAttention
from fairseq_speaker.modules.step_weights import StepWeight
from fairseq_speaker.modules.variational_lstm import lstm_cell_update, sentence_mask, variational_bilstm

EncoderOut = Dict[str, Tensor]
IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]


def Embedding(num_embeddings: int, embedding_dim: int, padding_idx: int) -> nn.Embedding:
    """Embeddings initialized N(0, 1/sqrt(d)), the padding row at zero."""
    m = nn.Embedding(num_embeddings, embedding_dim, padding_idx=padding_idx)
    nn.init.normal_(m.weight, mean=0.0, std=embedding_dim ** -0.5)
    nn.init.constant_(m.weight[padding_idx], 0.0)
    return m


class BiLSTMEncoder(FairseqEncoder):
    """One-layer bidirectional LSTM over source embeddings.

    Options read from ``cfg``: ``encoder_embed_dim``, ``encoder_hidden_size`` (per direction),
    ``lstm_dropout`` (variational, training only), ``max_source_positions``.

    Returns a dict:
        encoder_out: ``[src_len, batch, 2 * hidden]``, zero at padding
        encoder_padding_mask: ``[src_len, batch]``, True at padding
        encoder_last: ``[batch, 2 * hidden]``, the output at the last real token
        sentence_index: after :meth:`reorder_encoder_out` only, ``[hypotheses]``: the sentence (a
            column of the tensors above) of each hypothesis
    """

    def __init__(self, cfg, dictionary):
        super().__init__(dictionary)
        self.padding_idx = dictionary.pad()
        self.max_source_positions = cfg.max_source_positions
        self.embed_tokens = Embedding(len(dictionary), cfg.encoder_embed_dim, self.padding_idx)
        self.lstm = nn.LSTM(cfg.encoder_embed_dim, cfg.encoder_hidden_size, bidirectional=True)
        self.lstm_dropout = cfg.lstm_dropout
        self.output_dim = 2 * cfg.encoder_hidden_size

    def forward(self, src_tokens: Tensor, src_lengths: Tensor) -> EncoderOut:
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
        }

    def reorder_encoder_out(self, encoder_out: EncoderOut, new_order: Tensor) -> EncoderOut:
        """Reorders the hypotheses through ``sentence_index``; the sentences' outputs, the same for every
        hypothesis of a sentence, are not copied (beam search reorders at every step, and a copy of
        ``[src_len, beam x batch, 2 x hidden]`` each step cost a fifth of decoding)."""
        index = encoder_out.get("sentence_index")
        index = new_order if index is None else index.index_select(0, new_order)
        return {**encoder_out, "sentence_index": index}

    def max_positions(self) -> int:
        return self.max_source_positions


class AttentionalLSTMDecoder(FairseqIncrementalDecoder):
    """LSTM decoder with input feeding, MLP attention and the output layer of eq. 6.

    At step t the LSTM reads [E_T w_(t-1); c_(t-1)]; its state h_t attends over
    the encoder outputs to give c_t. The initial state is h_0 = W_p x_last + b_p
    (x_last the encoder output at the last source token), c_0 = 0, as in the
    authors' code. Then o_t = W_oh h_t + W_oc c_t + W_ow E_T w_(t-1) + b_o, and the
    logits are E_T o_t + b_T (the softmax tied to the target embeddings). During
    incremental decoding the attention keys are computed at the first step and cached.

    A sentence may modulate the recurrence (what a speaker state does, see
    :meth:`input_offset_and_hidden_scale`): an offset added to the previous word's embedding
    E_T w_(t-1) wherever the decoder reads it (the LSTM's input and eq. 6's W_ow term), and a scale
    on the LSTM's output h_t at every step, inside the recurrence (the scaled h_t attends, enters
    o_t and is the next step's state).

    Options read from ``cfg``: ``decoder_embed_dim`` (also the size of o_t),
    ``decoder_hidden_size``, ``attention_dim``, ``dropout`` (on o_t), ``lstm_dropout``,
    ``target_word_dropout``, ``max_target_positions``.
    """

    def __init__(self, cfg, dictionary, encoder_output_dim: int):
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

    def forward(
        self,
        prev_output_tokens: Tensor,
        encoder_out: EncoderOut,
        incremental_state: Optional[IncrementalState] = None,
        features_only: bool = False,
        **kwargs,
    ) -> Tuple[Tensor, Dict]:
        features, extra = self.extract_features(prev_output_tokens, encoder_out, incremental_state)
        if features_only:
            return features, extra
        return self.output_layer(features), extra

    def extract_features(
        self,
        prev_output_tokens: Tensor,
        encoder_out: EncoderOut,
        incremental_state: Optional[IncrementalState] = None,
    ) -> Tuple[Tensor, Dict]:
        """Returns o_t ``[batch, tgt_len, embed_dim]`` (after dropout) and ``{"attn": [batch, tgt_len, src_len]}``."""
        index = encoder_out.get("sentence_index")  # B, or None: sentence b is hypothesis b
        cached = None
        if incremental_state is not None:
            cached = self.get_incremental_state(incremental_state, "cached_state")
        if cached is not None:
            prev_output_tokens = prev_output_tokens[:, -1:]
            hidden, cell, feed = cached["hidden"], cached["cell"], cached["feed"]
        else:
            last = encoder_out["encoder_last"]  # B0 x C
            hidden = self.init_hidden(last if index is None else last.index_select(0, index))  # B x H
            cell = torch.zeros_like(hidden)
            feed = hidden.new_zeros(hidden.size(0), last.size(1))  # B x C
        keys, values, padding_mask = self._attention_memory(encoder_out, index, incremental_state)

        if self.training and self.target_word_dropout > 0:
            prev_output_tokens = self.drop_words(prev_output_tokens)
        embedded = self.embed_tokens(prev_output_tokens).transpose(0, 1)  # T x B x E
        offset, hidden_scale = self.input_offset_and_hidden_scale()  # B x E, B x H, or None
        if offset is not None:
            embedded = embedded + offset.to(embedded).unsqueeze(0)
        if hidden_scale is not None:
            hidden_scale = hidden_scale.to(embedded)
        in_mask = hidden_mask = None
        if self.training and self.lstm_dropout > 0:  # one mask per sentence, for every step
            bsz = embedded.size(1)
            in_mask = sentence_mask(bsz, embedded.size(2) + feed.size(1), self.lstm_dropout, embedded)
            hidden_mask = sentence_mask(bsz, hidden.size(1), self.lstm_dropout, embedded)
        if cached is not None or embedded.size(0) == 1 or not fast_paths.enabled():  # a generation step, or plain
            hiddens, contexts, attns, hidden, cell, feed = self._steps(
                embedded, hidden, cell, feed, keys, values, padding_mask, in_mask, hidden_mask, hidden_scale)
        else:
            hiddens, contexts, attns, hidden, cell, feed = self._teacher_forced_steps(
                embedded, hidden, cell, feed, keys, values, padding_mask, in_mask, hidden_mask, hidden_scale)

        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "cached_state",
                                       {"hidden": hidden, "cell": cell, "feed": feed})

        features = torch.cat([torch.stack(hiddens), torch.stack(contexts), embedded], dim=2)  # T x B x (H+C+E)
        projection = self.output_projection
        out = self.dropout_out(linear(features, projection.weight, projection.bias)).transpose(0, 1)  # B x T x E
        return out, {"attn": [torch.stack(attns, dim=1)]}

    def input_offset_and_hidden_scale(self) -> Tuple[Optional[Tensor], Optional[Tensor]]:
        """What modulates the recurrence of the sentences being decoded, each None or one row per sentence
        (hypothesis): an offset ``[B, E]`` added to the previous word's embedding and a scale ``[B, H]`` on
        h_t. None and None here; the speaker model's decoder gives its speaker state."""
        return None, None

    def _attention_memory(self, encoder_out: EncoderOut, index: Optional[Tensor],
                          incremental_state: Optional[IncrementalState]) -> Tuple[Tensor, Tensor, Tensor]:
        """The attention's keys ``[S, G, A]``, values ``[S, G, C]`` and padding mask ``[S, G]`` for G groups
        of hypotheses (see :class:`MLPAttention`). Without ``index``, a group per sentence. With it, the
        hypotheses of one sentence side by side, as beam search keeps them, make one group; otherwise a
        group per hypothesis. The keys are projected once per sentence; in generation, the groups' memory
        is kept in the incremental state and gathered again only when the set of sentences changes."""
        values, padding_mask = encoder_out["encoder_out"], encoder_out["encoder_padding_mask"]  # S x B0 x C, S x B0
        memory = self.get_incremental_state(incremental_state, "memory") if incremental_state is not None else None
        if memory is None:
            memory = {"keys": self.attention.project_keys(values)}  # S x B0 x A, once per sentence
        if index is None:
            groups = None
        else:
            groups = _groups(index)
            if "groups" not in memory or not torch.equal(memory["groups"], groups):
                memory = {"keys": memory["keys"], "groups": groups,
                          "grouped": (memory["keys"].index_select(1, groups), values.index_select(1, groups),
                                      padding_mask.index_select(1, groups))}
        if incremental_state is not None:
            self.set_incremental_state(incremental_state, "memory", memory)
        if groups is None:
            return memory["keys"], values, padding_mask
        return memory["grouped"]

    def _steps(self, embedded, hidden, cell, feed, keys, values, padding_mask, in_mask, hidden_mask,
               hidden_scale=None):
        """The recurrence step by step with ``nn.LSTMCell`` (its products through oneDNN where
        :func:`gemm.serves`: a generation step's two largest products); h_t multiplied by ``hidden_scale``
        ``[B, H]``, if any."""
        hiddens: List[Tensor] = []
        contexts: List[Tensor] = []
        attns: List[Tensor] = []
        fast = gemm.serves(embedded, self.cell.weight_ih)
        for step in range(embedded.size(0)):
            lstm_input = torch.cat([embedded[step], feed], dim=1)
            if in_mask is not None:
                lstm_input, hidden = lstm_input * in_mask, hidden * hidden_mask
            if fast:
                hidden, cell = self._cell(lstm_input, hidden, cell)
            else:
                hidden, cell = self.cell(lstm_input, (hidden, cell))
            if hidden_scale is not None:
                hidden = hidden * hidden_scale
            query = linear(hidden, self.attention.query_proj.weight) if fast else None
            feed, attn = self.attention(hidden, keys, values, padding_mask, projected_query=query)  # B x C, B x S
            hiddens.append(hidden)
            contexts.append(feed)
            attns.append(attn)
        return hiddens, contexts, attns, hidden, cell, feed

    def _cell(self, lstm_input: Tensor, hidden: Tensor, cell: Tensor) -> Tuple[Tensor, Tensor]:
        """``self.cell(lstm_input, (hidden, cell))`` with the products through :func:`linear`."""
        gates = linear(lstm_input, self.cell.weight_ih, self.cell.bias_ih + self.cell.bias_hh)
        gates += linear(hidden, self.cell.weight_hh)
        return lstm_cell_update(gates, cell)

    def _teacher_forced_steps(self, embedded, hidden, cell, feed, keys, values, padding_mask, in_mask, hidden_mask,
                              hidden_scale=None):
        """The same recurrence as :meth:`_steps` (the cell's own weights and gate order), arranged for a
        whole known target: the word embeddings' part of the gates is one matrix product over all steps,
        each step multiplies only [c_(t-1); h_(t-1)], and the weights used at every step get their
        gradients as one product over all steps (:class:`StepWeight`)."""
        embed_dim = embedded.size(2)
        w_ih, w_hh = self.cell.weight_ih, self.cell.weight_hh
        words = embedded if in_mask is None else embedded * in_mask[:, :embed_dim]
        gates_words = linear(words, w_ih[:, :embed_dim], self.cell.bias_ih + self.cell.bias_hh)  # T x B x 4H
        recurrent = StepWeight(torch.cat([w_ih[:, embed_dim:], w_hh], dim=1))  # 4H x (C + H)
        query = StepWeight(self.attention.query_proj.weight)
        feed_mask = None if in_mask is None else in_mask[:, embed_dim:]
        hiddens: List[Tensor] = []
        contexts: List[Tensor] = []
        attns: List[Tensor] = []
        for gates_word in gates_words.unbind(0):  # one backward node for all steps (indexing makes T)
            state = torch.cat([feed if feed_mask is None else feed * feed_mask,
                               hidden if hidden_mask is None else hidden * hidden_mask], dim=1)
            hidden, cell = lstm_cell_update(gates_word + recurrent.linear(state), cell)
            if hidden_scale is not None:
                hidden = hidden * hidden_scale
            feed, attn = self.attention(hidden, keys, values, padding_mask, projected_query=query.linear(hidden))
            hiddens.append(hidden)
            contexts.append(feed)
            attns.append(attn)
        return hiddens, contexts, attns, hidden, cell, feed

    def drop_words(self, tokens: Tensor) -> Tensor:
        """Replace decoder input words by <unk> with probability ``target_word_dropout`` (not the first, BOS)."""
        drop = torch.rand(tokens.shape, device=tokens.device) < self.target_word_dropout
        drop[:, 0] = False
        drop &= tokens.ne(self.padding_idx)
        return tokens.masked_fill(drop, self.unk_idx)

    def output_layer(self, features: Tensor) -> Tensor:
        """E_T o_t + b_T: ``[batch, tgt_len, vocab]``."""
        return linear(features, self.embed_tokens.weight, self.output_bias)

    def output_weight_and_bias(self) -> Tuple[Tensor, Tensor]:
        """The output layer's weight and bias: ``(E_T, b_T)``."""
        return self.embed_tokens.weight, self.output_bias

    def reorder_incremental_state(self, incremental_state: IncrementalState, new_order: Tensor) -> None:
        cached = self.get_incremental_state(incremental_state, "cached_state")
        if cached is None:
            return
        # the attention's memory is the sentences' (see _attention_memory): only the hypotheses' states move
        reordered = {key: (None if value is None else value.index_select(0, new_order))
                     for key, value in cached.items()}
        self.set_incremental_state(incremental_state, "cached_state", reordered)

    def max_positions(self) -> int:
        return self.max_target_positions


def _groups(index: Tensor) -> Tensor:
    """The sentence of each group of hypotheses: the runs of ``index`` (the sentence of each hypothesis)
    when they all have one length and name distinct sentences, as beam search keeps its hypotheses
    (``[s0, s0, s0, s1, s1, s1, ...]``); else ``index`` itself, a group per hypothesis."""
    sentences, counts = torch.unique_consecutive(index, return_counts=True)
    if index.numel() % sentences.numel() == 0 and bool((counts == index.numel() // sentences.numel()).all()) \
            and torch.unique(sentences).numel() == sentences.numel():
        return sentences
    return index
