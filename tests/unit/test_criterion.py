"""speaker_label_smoothed_cross_entropy: properties, not recorded numbers."""

import pytest
import torch
import torch.nn.functional as F
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion

from fairseq_speaker.criterions import SpeakerLabelSmoothedCrossEntropyCriterion
from tests.helpers import make_model, make_task, random_batch


def make_sample(task, pad_target_to=None):
    src = random_batch(task.source_dictionary, [5, 3, 4])
    target = random_batch(task.target_dictionary, [4, 6, 2], left_pad=False)
    if pad_target_to:
        extra = torch.full((3, pad_target_to - target.size(1)), task.target_dictionary.pad())
        target = torch.cat([target, extra], dim=1)
    eos = task.target_dictionary.eos()
    prev = torch.cat([torch.full((3, 1), eos), target[:, :-1]], dim=1)
    prev = prev.masked_fill(prev.eq(eos) & (torch.arange(prev.size(1)) > 0), task.target_dictionary.pad())
    return {
        "net_input": {"src_tokens": src, "src_lengths": src.ne(1).sum(1), "prev_output_tokens": prev,
                      "speakers": torch.tensor([0, 2, 3])},
        "target": target,
        "ntokens": int(target.ne(task.target_dictionary.pad()).sum()),
    }


def criterion(task, smoothing=0.1, l2=0.0, sentence_avg=False):
    return SpeakerLabelSmoothedCrossEntropyCriterion(task, sentence_avg, smoothing, speaker_l2=l2)


@pytest.fixture
def setup():
    task = make_task(num_speakers=4)
    return task, make_model("full", task=task), make_sample(task)


def test_zero_smoothing_is_plain_nll(setup):
    task, model, sample = setup
    loss, _, log = criterion(task, smoothing=0.0)(model, sample)
    logits, _ = model(**sample["net_input"])
    expected = F.cross_entropy(logits.view(-1, logits.size(-1)), sample["target"].view(-1),
                               ignore_index=task.target_dictionary.pad(), reduction="sum")
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert log["nll_loss"].item() == pytest.approx(expected.item(), rel=1e-5)


def test_smoothing_raises_the_loss_of_a_confident_model(setup):
    task, model, sample = setup
    smoothed, _, log = criterion(task, smoothing=0.3)(model, sample)
    assert smoothed.item() != pytest.approx(log["nll_loss"].item())


def test_padding_does_not_change_the_loss(setup):
    task, model, sample = setup
    torch.manual_seed(0)
    padded = make_sample(task, pad_target_to=sample["target"].size(1) + 3)
    torch.manual_seed(0)
    plain = make_sample(task)
    a, _, _ = criterion(task)(model, plain)
    b, _, _ = criterion(task)(model, padded)
    assert a.item() == pytest.approx(b.item(), rel=1e-5)


def test_reduced_loss_is_the_sum_of_the_unreduced(setup):
    task, model, sample = setup
    crit = criterion(task, l2=0.5)
    reduced, _, _ = crit(model, sample, reduce=True)
    logits = model(**sample["net_input"])
    unreduced, _ = LabelSmoothedCrossEntropyCriterion.compute_loss(crit, model, logits, sample, reduce=False)
    penalty = 0.5 * sample["ntokens"] * logits[1]["speaker_bias"].pow(2).sum(1).mean()
    assert reduced.item() == pytest.approx(unreduced.sum().item() + penalty.item(), rel=1e-5)


def test_without_l2_it_is_fairseqs_criterion(setup):
    task, model, sample = setup
    ours, size, log = criterion(task)(model, sample)
    theirs, their_size, their_log = LabelSmoothedCrossEntropyCriterion(task, False, 0.1)(model, sample)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    assert size == their_size and log["nll_loss"] == pytest.approx(their_log["nll_loss"])


@pytest.mark.parametrize("sentence_avg", [False, True])
def test_l2_penalty_and_logged_bias_norm(setup, sentence_avg):
    task, model, sample = setup
    base, size, _ = criterion(task, sentence_avg=sentence_avg)(model, sample)
    penalized, _, log = criterion(task, l2=0.01, sentence_avg=sentence_avg)(model, sample)
    rows = model.speaker_bias.weight[sample["net_input"]["speakers"]]
    assert size == (3 if sentence_avg else sample["ntokens"])
    expected = 0.01 * size * rows.pow(2).sum(1).mean()
    assert (penalized - base).item() == pytest.approx(expected.item(), rel=1e-5)
    assert log["speaker_bias_norm"].item() == pytest.approx(rows.norm(dim=1).sum().item(), rel=1e-5)


def test_l2_gradient_reaches_only_the_speakers_of_the_batch(setup):
    task, model, sample = setup
    model.train()
    loss, _, _ = criterion(task, l2=1.0)(model, sample)
    loss.backward()
    touched = model.speaker_bias.weight.grad.abs().sum(1).nonzero().flatten().tolist()
    assert touched == [0, 2, 3]


def test_baseline_logs_no_bias_norm():
    task = make_task()
    model = make_model("none", task=task)
    _, _, log = criterion(task, l2=1.0)(model, make_sample(task))
    assert "speaker_bias_norm" not in log
