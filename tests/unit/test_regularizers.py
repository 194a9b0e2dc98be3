"""The paper's regularizers act in training only: variational LSTM dropout, target word dropout."""

import torch
from torch import nn

from fairseq_speaker.modules.variational_lstm import lstm_scan, reverse_padded, variational_bilstm
from tests.helpers import make_model, make_task, random_batch


def test_reverse_padded_reverses_within_each_length():
    x = torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0]]).t().unsqueeze(2)  # T x B x 1
    out = reverse_padded(x, torch.tensor([3, 2])).squeeze(2).t()
    assert out.tolist() == [[3, 2, 1, 0], [5, 4, 0, 0]]


def test_without_dropout_the_variational_path_is_the_fused_lstm():
    lstm = nn.LSTM(6, 5, bidirectional=True)
    lengths = torch.tensor([7, 4, 1])
    x = torch.randn(7, 3, 6)
    packed = nn.utils.rnn.pack_padded_sequence(x, lengths, enforce_sorted=False)
    fused, _ = nn.utils.rnn.pad_packed_sequence(lstm(packed)[0], total_length=7)
    assert torch.allclose(variational_bilstm(lstm, x, lengths, p=0.0), fused, atol=1e-5)


def test_one_input_mask_for_every_time_step():
    lstm = nn.LSTM(16, 4, bidirectional=True)
    lengths = torch.tensor([6, 6])
    x = torch.randn(6, 2, 16, requires_grad=True)
    variational_bilstm(lstm, x, lengths, p=0.5).sum().backward()
    dropped = x.grad.abs().eq(0)  # T x B x E: an input unit both directions dropped gets no gradient
    assert dropped.any()
    for b in range(2):
        assert (dropped[:, b] == dropped[0, b]).all(), "the mask changed between time steps"


def test_the_recurrent_mask_scales_the_state_fed_back_at_every_step():
    cell = nn.LSTMCell(3, 4)
    x = torch.randn(5, 2, 3)
    gates_x = torch.nn.functional.linear(x, cell.weight_ih, cell.bias_ih + cell.bias_hh)
    # without a mask it is PyTorch's own LSTM cell
    unmasked = lstm_scan(gates_x, cell.weight_hh, torch.ones(2, 4))
    h = c = torch.zeros(2, 4)
    for t in range(5):
        h, c = cell(x[t], (h, c))
        assert torch.allclose(unmasked[t], h, atol=1e-6)
    # a mask is the same as scaling the recurrent weights' columns per sentence, at every step
    mask = torch.tensor([[2.0, 0.0, 2.0, 0.0], [0.0, 0.0, 2.0, 2.0]])
    masked = lstm_scan(gates_x, cell.weight_hh, mask)
    for b in range(2):
        scaled = lstm_scan(gates_x[:, b : b + 1], cell.weight_hh * mask[b], torch.ones(1, 4))
        assert torch.allclose(masked[:, b], scaled[:, 0], atol=1e-6)
    assert not torch.allclose(masked, unmasked)


def _logits(model, src, prev, speakers):
    return model(src, src.ne(1).sum(1), prev, speakers=speakers)[0]


def test_lstm_dropout_changes_training_only():
    task = make_task()
    model = make_model("full", task=task, lstm_dropout=0.5, target_word_dropout=0.0)
    plain = make_model("full", task=task, lstm_dropout=0.0, target_word_dropout=0.0)
    plain.load_state_dict(model.state_dict())
    src = random_batch(task.source_dictionary, [5, 3])
    prev = random_batch(task.target_dictionary, [4, 4], left_pad=False)
    speakers = torch.tensor([0, 1])
    with torch.no_grad():
        evaluated = _logits(model.eval(), src, prev, speakers)
        assert torch.equal(evaluated, _logits(plain.eval(), src, prev, speakers))
        trained_a = _logits(model.train(), src, prev, speakers)
        trained_b = _logits(model, src, prev, speakers)
    assert not torch.allclose(trained_a, evaluated)
    assert not torch.allclose(trained_a, trained_b)


def test_target_word_dropout_replaces_inputs_by_unk_in_training_only():
    task = make_task()
    model = make_model("fact", task=task, lstm_dropout=0.0, target_word_dropout=0.5)
    model.decoder.target_word_dropout = 1.0  # every word (an option of 1 is refused: nothing would be learned)
    src = random_batch(task.source_dictionary, [5, 3])
    prev = random_batch(task.target_dictionary, [4, 4], left_pad=False)
    speakers = torch.tensor([0, 1])
    unk = prev.clone()
    unk[:, 1:] = task.target_dictionary.unk()
    with torch.no_grad():
        evaluated = _logits(model.eval(), src, prev, speakers)
        reference_unk = _logits(model, src, unk, speakers)
        trained = _logits(model.train(), src, prev, speakers)  # dropout on o_t is 0 in the helper
    assert torch.equal(trained, reference_unk)
    assert not torch.allclose(evaluated, reference_unk)


def test_word_dropout_keeps_bos_and_padding():
    task = make_task()
    model = make_model("none", task=task, target_word_dropout=0.5)
    model.decoder.target_word_dropout = 1.0  # every word (an option of 1 is refused: nothing would be learned)
    prev = torch.tensor([[2, 7, 8, 1], [2, 9, 1, 1]])
    assert model.decoder.drop_words(prev).tolist() == [[2, 3, 3, 1], [2, 3, 1, 1]]
