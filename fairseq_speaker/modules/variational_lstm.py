"""Variational (Gal & Ghahramani, 2016) dropout for LSTMs: one dropout mask per sentence, for all time steps.

Standard dropout draws a new mask at every time step, which in a recurrent
connection destroys the memory the LSTM is meant to keep. Variational dropout
draws one mask on the inputs and one on the recurrent state per sentence and
applies them at every step; DyNet's ``VanillaLSTMBuilder.set_dropout``, used by
the paper's authors, does the same.
"""

from typing import Tuple

import torch
from torch import Tensor, nn

from fairseq_speaker.modules.gemm import linear
from fairseq_speaker.modules.step_weights import StepWeight


def sentence_mask(batch: int, size: int, p: float, like: Tensor) -> Tensor:
    """A dropout mask ``[batch, size]`` (kept units scaled by 1/(1-p)), to apply at every time step."""
    return like.new_empty(batch, size).bernoulli_(1.0 - p).div_(1.0 - p)


def reverse_padded(x: Tensor, lengths: Tensor) -> Tensor:
    """Reverse each right-padded sequence of ``x`` ``[time, batch, ...]`` within its own length."""
    steps = torch.arange(x.size(0), device=x.device).unsqueeze(1)  # T x 1
    lengths = lengths.to(x.device).unsqueeze(0)  # 1 x B
    index = torch.where(steps < lengths, lengths - 1 - steps, steps)  # T x B
    index = index.view(*index.shape, *([1] * (x.dim() - 2))).expand_as(x)
    return x.gather(0, index)


def lstm_cell_update(gates: Tensor, cell: Tensor) -> Tuple[Tensor, Tensor]:
    """The element-wise part of an LSTM step: the new ``(hidden, cell)`` from the gates ``[batch, 4H]`` (in
    PyTorch's order: input, forget, cell, output) and the previous cell ``[batch, H]``, as ``nn.LSTMCell``."""
    i, f, g, o = gates.chunk(4, dim=1)
    cell = torch.sigmoid(f) * cell + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(cell), cell


def lstm_scan(gates_x: Tensor, w_hh: Tensor, hidden_mask: Tensor) -> Tensor:
    """Run an LSTM over precomputed input gates ``[time, batch, 4H]`` with a fixed recurrent mask ``[batch, H]``.

    Gates in PyTorch's order (input, forget, cell, output). Returns the hidden states ``[time, batch, H]``.
    """
    batch, hidden_size = hidden_mask.shape
    h = gates_x.new_zeros(batch, hidden_size)
    c = gates_x.new_zeros(batch, hidden_size)
    recurrent = StepWeight(w_hh)  # its gradient: one product over all steps
    outputs = []
    for gates_t in gates_x:
        h, c = lstm_cell_update(gates_t + recurrent.linear(h * hidden_mask), c)
        outputs.append(h)
    return torch.stack(outputs)


def variational_bilstm(lstm: nn.LSTM, x: Tensor, lengths: Tensor, p: float) -> Tensor:
    """The one-layer bidirectional ``lstm`` over right-padded ``x`` ``[time, batch, E]`` with variational dropout.

    Uses the weights of ``lstm`` itself, so training with this and evaluating with
    the fused ``nn.LSTM`` run the same model. Returns ``[time, batch, 2H]``, zero at padding.
    """
    if lstm.num_layers != 1 or not lstm.bidirectional or lstm.batch_first:
        raise ValueError("variational_bilstm supports one-layer, bidirectional, time-first LSTMs")
    time, batch, _ = x.shape
    directions = []
    for suffix, reverse in (("", False), ("_reverse", True)):
        inputs = reverse_padded(x, lengths) if reverse else x
        in_mask = sentence_mask(batch, x.size(2), p, x)
        hidden_mask = sentence_mask(batch, lstm.hidden_size, p, x)
        bias = getattr(lstm, f"bias_ih_l0{suffix}") + getattr(lstm, f"bias_hh_l0{suffix}")
        gates_x = linear(inputs * in_mask, getattr(lstm, f"weight_ih_l0{suffix}"), bias)  # T x B x 4H
        out = lstm_scan(gates_x, getattr(lstm, f"weight_hh_l0{suffix}"), hidden_mask)
        directions.append(reverse_padded(out, lengths) if reverse else out)
    out = torch.cat(directions, dim=2)
    padding = torch.arange(time, device=x.device).unsqueeze(1) >= lengths.to(x.device).unsqueeze(0)
    return out.masked_fill(padding.unsqueeze(2), 0.0)
