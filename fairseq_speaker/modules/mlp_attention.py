from typing import Optional, Tuple

import torch
from torch import Tensor, nn


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
        return self.key_proj(keys)

    def forward(
        self, query: Tensor, projected_keys: Tensor, values: Tensor, padding_mask: Optional[Tensor],
        projected_query: Optional[Tensor] = None,
    ) -> Tuple[Tensor, Tensor]:
        """
        Args:
            query: h_t ``[batch, query_dim]``.
            projected_keys: from :meth:`project_keys`, ``[src_len, batch, attention_dim]``.
            values: the encoder outputs ``[src_len, batch, key_dim]``.
            padding_mask: ``[src_len, batch]``, True at padding, or None.
            projected_query: W_ah h_t ``[batch, attention_dim]`` if the caller has computed it.

        Returns:
            the context c_t ``[batch, key_dim]`` and the weights ``[batch, src_len]``.
        """
        if projected_query is None:
            projected_query = self.query_proj(query)
        hidden = torch.tanh(projected_keys + projected_query.unsqueeze(0))
        scores = self.score(hidden).squeeze(2).float()  # S x B
        if padding_mask is not None:
            scores = scores.masked_fill(padding_mask, float("-inf"))
        weights = torch.softmax(scores, dim=0).to(values)  # S x B
        context = torch.bmm(weights.t().unsqueeze(1), values.transpose(0, 1)).squeeze(1)  # B x C
        return context, weights.t()


def _without_bias(linear: nn.Linear) -> nn.Linear:
    """``linear`` with no ``bias`` entry among its parameters (a plain ``None`` attribute instead):
    fairseq's trainer takes the ``None`` entries of two such layers for one parameter shared by both
    and logs "detected shared parameter" on every run."""
    del linear._parameters["bias"]
    linear.bias = None
    return linear
