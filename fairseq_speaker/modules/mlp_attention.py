from typing import Optional, Tuple

import torch
from torch import Tensor, nn

from fairseq_speaker.modules.gemm import linear
from fairseq_speaker.modules.pointwise import tanh


class MLPAttention(nn.Module):
    """Additive attention: a_it = v_a^T tanh(W_a x_i + W_ah h_t + b_a), softmax over source positions.

    Args:
        key_dim: size of the encoder outputs x_i.
        query_dim: size of the decoder state h_t.
        attention_dim: d_a, the hidden size of the MLP.
    """

    def __init__(self, key_dim: int, query_dim: int, attention_dim: int):
        super().__init__()
        self.key_proj = nn.Linear(key_dim, attention_dim)  # W_a, b_a
        self.query_proj = _without_bias(nn.Linear(query_dim, attention_dim, bias=False))  # W_ah
        self.score = _without_bias(nn.Linear(attention_dim, 1, bias=False))  # v_a

    def project_keys(self, keys: Tensor) -> Tensor:
        """W_a x_i + b_a, ``[src_len, batch, attention_dim]``: computed once per sentence."""
        return linear(keys, self.key_proj.weight, self.key_proj.bias)

    def forward(
        self, query: Tensor, projected_keys: Tensor, values: Tensor, padding_mask: Optional[Tensor],
        projected_query: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Tensor]:
        """
        The queries may come in groups that attend over the same source sentence (the hypotheses of one
        sentence in beam search): G sentences, B = G x n queries, the n queries of sentence g in rows
        g n ... g n + n - 1. The sentences' keys and values are then read once for the group, not copied
        per query. G = B is one sentence per query.

        Args:
            query: h_t ``[B, query_dim]``.
            projected_keys: from :meth:`project_keys`, ``[src_len, G, attention_dim]``.
            values: the encoder outputs ``[src_len, G, key_dim]``.
            padding_mask: ``[src_len, G]``, True at padding, or None.
            projected_query: W_ah h_t ``[B, attention_dim]`` if the caller has computed it.

        Returns:
            the context c_t ``[B, key_dim]`` and the weights ``[B, src_len]``.
        """
        if projected_query is None:
            projected_query = self.query_proj(query)
        src_len, groups = projected_keys.shape[:2]
        per_group = query.size(0) // groups
        queries = projected_query.view(groups, per_group, -1)  # G x n x A
        hidden = tanh(projected_keys.unsqueeze(2) + queries.unsqueeze(0))  # S x G x n x A
        scores = self.score(hidden).squeeze(3).float()  # S x G x n
        if padding_mask is not None:
            scores = scores.masked_fill(padding_mask.unsqueeze(2), float("-inf"))
        weights = torch.softmax(scores, dim=0).to(values)  # S x G x n
        context = torch.bmm(weights.permute(1, 2, 0), values.transpose(0, 1))  # G x n x C
        return context.reshape(-1, values.size(2)), weights.reshape(src_len, -1).t()


def _without_bias(linear: nn.Linear) -> nn.Linear:
    """``linear`` with no ``bias`` entry among its parameters (a plain ``None`` attribute instead):
    fairseq's trainer takes the ``None`` entries of two such layers for one parameter shared by both
    and logs "detected shared parameter" on every run."""
    del linear.bias  # nn.Module removes it from its parameters
    setattr(linear, "bias", None)  # a plain attribute (torch's stubs type Linear.bias as a Parameter)
    return linear
