"""speaker_label_smoothed_cross_entropy: properties, not recorded numbers."""

import types

import pytest
import torch
import torch.nn.functional as F
from fairseq.criterions.label_smoothed_cross_entropy import LabelSmoothedCrossEntropyCriterion
from fairseq.logging import metrics

from fairseq_speaker.criterions import SpeakerLabelSmoothedCrossEntropyCriterion
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY, register_speaker_bias, unregister_speaker_bias
from fairseq_speaker.modules.speaker_bias.full import FullSpeakerBias
from tests.helpers import FAMILIES, make_model, make_task, random_batch, randomize


def make_sample(task, pad_target_to=None, target=None):
    src = random_batch(task.source_dictionary, [5, 3, 4])
    if target is None:
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
        "nsentences": 3,
    }


def criterion(task, smoothing=0.1, sentence_avg=False):
    return SpeakerLabelSmoothedCrossEntropyCriterion(task, sentence_avg, smoothing)


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


def test_smoothing_raises_the_loss_of_a_model_sure_of_the_right_word():
    task = make_task(num_speakers=4)
    model = make_model("full", task=task)
    sample = make_sample(task)
    with torch.no_grad():
        logits, _ = model(**sample["net_input"])
    # the targets become the model's own best words: it is confident and right
    target = logits.argmax(-1).masked_fill(sample["target"].eq(task.target_dictionary.pad()),
                                           task.target_dictionary.pad())
    sample["target"] = target
    smoothed, _, log = criterion(task, smoothing=0.3)(model, sample)
    assert smoothed.item() > log["nll_loss"].item() + 1e-3


def test_padding_does_not_change_the_loss(setup):
    task, model, sample = setup
    padded = dict(sample, target=torch.cat(
        [sample["target"], torch.full((3, 3), task.target_dictionary.pad())], dim=1))
    padded["net_input"] = dict(sample["net_input"], prev_output_tokens=torch.cat(
        [sample["net_input"]["prev_output_tokens"], torch.full((3, 3), task.target_dictionary.pad())], dim=1))
    a, _, _ = criterion(task)(model, sample)
    b, _, _ = criterion(task)(model, padded)
    assert a.item() == pytest.approx(b.item(), rel=1e-5)


def test_reduced_loss_is_the_sum_of_the_unreduced_plus_the_regularizer():
    task = make_task(num_speakers=4)
    model = make_model("full", task=task, speaker_l2=0.5)
    sample = make_sample(task)
    crit = criterion(task)
    reduced, _, _ = crit(model, sample, reduce=True)
    net_output = model(**sample["net_input"])
    unreduced, _ = LabelSmoothedCrossEntropyCriterion.compute_loss(crit, model, net_output, sample, reduce=False)
    penalty = 0.5 * sample["ntokens"] * net_output[1]["speaker_bias"].pow(2).sum(1).mean()
    assert reduced.item() == pytest.approx(unreduced.sum().item() + penalty.item(), rel=1e-5)


def test_without_regularizer_it_is_fairseqs_criterion(setup):
    task, model, sample = setup
    ours, size, log = criterion(task)(model, sample)
    theirs, their_size, their_log = LabelSmoothedCrossEntropyCriterion(task, False, 0.1)(model, sample)
    assert ours.item() == pytest.approx(theirs.item(), rel=1e-6)
    assert size == their_size and log["nll_loss"] == pytest.approx(their_log["nll_loss"])
    assert not any(key.startswith("speaker_aux:") for key in log)


@pytest.mark.parametrize("name", ["full", "fact", "simplex"])
@pytest.mark.parametrize("sentence_avg", [False, True])
def test_l2_penalty_and_logged_bias_norm(name, sentence_avg):
    task = make_task(num_speakers=4)
    sample = make_sample(task)
    model = make_model(name, task=task, speaker_l2=0.01)
    plain = make_model(name, task=task, speaker_l2=0.0)
    plain.load_state_dict(model.state_dict())
    base, size, _ = criterion(task, sentence_avg=sentence_avg)(plain, sample)
    penalized, _, log = criterion(task, sentence_avg=sentence_avg)(model, sample)
    rows = model.speaker_bias(sample["net_input"]["speakers"])
    assert size == (3 if sentence_avg else sample["ntokens"])
    expected = 0.01 * size * rows.pow(2).sum(1).mean()
    assert (penalized - base).item() == pytest.approx(expected.item(), rel=1e-4)
    assert log[f"speaker_aux:{name}_l2"].item() == pytest.approx(expected.item(), rel=1e-4)
    assert log["speaker_bias_norm"].item() == pytest.approx(rows.norm(dim=1).sum().item(), rel=1e-5)


def test_l2_gradient_reaches_only_the_speakers_of_the_batch():
    task = make_task(num_speakers=4)
    model = make_model("full", task=task, speaker_l2=1.0).train()
    loss, _, _ = criterion(task)(model, make_sample(task))
    loss.backward()
    touched = model.speaker_bias.weight.grad.abs().sum(1).nonzero().flatten().tolist()
    assert touched == [0, 2, 3]


def test_a_variants_own_regularizer_is_added_and_logged_under_its_name():
    @register_speaker_bias("test_l1")
    class L1Bias(FullSpeakerBias):
        def aux_losses(self, speakers, bias, encoder_out=None):
            return {"test_l1_sparsity": 0.1 * bias.abs().sum(1).mean()}

    try:
        task = make_task(num_speakers=4)
        model = make_model("test_l1", task=task)
        plain = make_model("full", task=task)
        plain.load_state_dict(model.state_dict())
        sample = make_sample(task)
        with_l1, size, log = criterion(task)(model, sample)
        without, _, _ = criterion(task)(plain, sample)
        expected = 0.1 * size * model.speaker_bias(sample["net_input"]["speakers"]).abs().sum(1).mean()
        assert (with_l1 - without).item() == pytest.approx(expected.item(), rel=1e-4)
        with metrics.aggregate() as agg:
            SpeakerLabelSmoothedCrossEntropyCriterion.reduce_metrics([log, log])
        logged = agg.get_smoothed_values()
        assert logged["test_l1_sparsity"] == pytest.approx(expected.item() / size, abs=1e-4)
        assert "bias_norm" in logged
    finally:
        unregister_speaker_bias("test_l1")


def test_baseline_logs_no_bias_norm_nor_regularizer():
    task = make_task()
    model = make_model("none", task=task, speaker_l2=1.0)
    _, _, log = criterion(task)(model, make_sample(task))
    assert "speaker_bias_norm" not in log
    assert not any(key.startswith("speaker_aux:") for key in log)


@pytest.mark.parametrize("smoothing", [0.0, 0.1, 0.4])
def test_the_fused_loss_gives_fairseqs_loss_and_gradients(smoothing):
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

    from fairseq_speaker.criterions.speaker_label_smoothed_cross_entropy import label_smoothed_nll_loss_from_logits

    torch.manual_seed(3)
    logits = (3 * torch.randn(4, 5, 11)).requires_grad_()
    target = torch.randint(2, 11, (20,))
    target[[3, 7, 8, 19]] = 1  # padding
    loss, nll = label_smoothed_nll_loss_from_logits(logits, target, smoothing, ignore_index=1)
    plain_logits = logits.detach().clone().requires_grad_()
    lprobs = torch.log_softmax(plain_logits, -1).view(-1, 11)
    expected, expected_nll = label_smoothed_nll_loss(lprobs, target, smoothing, ignore_index=1)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert nll.item() == pytest.approx(expected_nll.item(), rel=1e-6)
    (2.5 * loss).backward()
    (2.5 * expected).backward()
    assert torch.allclose(logits.grad, plain_logits.grad, atol=1e-6)
    assert logits.grad.view(-1, 11)[[3, 7, 8, 19]].abs().sum() == 0


def test_the_fused_loss_refuses_a_second_backward():
    from fairseq_speaker.criterions.speaker_label_smoothed_cross_entropy import label_smoothed_nll_loss_from_logits

    logits = torch.randn(3, 7, requires_grad=True)
    loss, _ = label_smoothed_nll_loss_from_logits(logits, torch.tensor([2, 3, 4]), 0.1, ignore_index=1)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="backward runs once"):
        loss.backward()


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", sorted(SPEAKER_BIAS_REGISTRY))
def test_the_criterion_fuses_the_loss_and_its_gradients_are_fairseqs(name, family, monkeypatch):
    from fairseq_speaker.criterions import speaker_label_smoothed_cross_entropy as module

    task = make_task(num_speakers=4)
    model = make_model(name, task=task, family=family).train()
    if model.speaker_bias.acts_on_state:
        # a speaker state of a trained model's size: the tests' usual N(0, 2) offsets saturate the Transformer's
        # attention, whose gradients then differ by rounding far beyond the tolerance
        randomize(model.speaker_bias, std=0.3)
    sample = make_sample(task)
    calls = []
    fused = module.label_smoothed_nll_loss_from_logits
    monkeypatch.setattr(module, "label_smoothed_nll_loss_from_logits", lambda *a: calls.append(1) or fused(*a))
    runs = []
    for plain in (False, True):
        # the criterion's view of the switch alone: the model's own fast paths stay as they are
        monkeypatch.setattr(module, "fast_paths", types.SimpleNamespace(enabled=lambda: not plain))
        model.zero_grad()
        torch.manual_seed(1)
        loss, _, log = criterion(task)(model, sample)
        loss.backward()
        runs.append((loss.item(), log["nll_loss"].item(),
                     {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    assert calls == [1]
    (loss, nll, grads), (plain_loss, plain_nll, plain_grads) = runs
    assert loss == pytest.approx(plain_loss, rel=1e-6) and nll == pytest.approx(plain_nll, rel=1e-6)
    assert grads.keys() == plain_grads.keys()
    for key in grads:
        assert torch.allclose(grads[key], plain_grads[key], atol=1e-6), key


def test_a_model_with_its_own_normalization_keeps_fairseqs_loss(setup, monkeypatch):
    """The fused loss is log_softmax's: a model that normalizes otherwise gets fairseq's path."""
    from fairseq_speaker.criterions import speaker_label_smoothed_cross_entropy as module

    task, model, sample = setup

    class Tempered(type(model)):
        def get_normalized_probs(self, net_output, log_probs, sample=None):
            return torch.log_softmax(net_output[0] / 2.0, dim=-1)

    model.__class__ = Tempered
    monkeypatch.setattr(module, "label_smoothed_nll_loss_from_logits", None)  # would fail if called
    loss, _, _ = criterion(task)(model, sample)
    logits, _ = model(**sample["net_input"])
    lprobs = torch.log_softmax(logits / 2.0, -1).view(-1, logits.size(-1))
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss
    expected, _ = label_smoothed_nll_loss(lprobs, sample["target"].view(-1), 0.1, task.target_dictionary.pad())
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)


# -- the speakers' unigram loss (--speaker-unigram) -----------------------------------------------------------


def test_the_unigram_loss_is_the_bag_of_target_words_under_the_bias_plus_the_log_frequencies():
    """Worked by hand: 4 special symbols (fairseq's), then words 4 and 5 counted 1 and 2. One sentence whose bias is
    log 2 on word 5 and whose targets are word 5, the end of sentence and a pad: over the words, softmax(log (1, 4)) =
    (1/5, 4/5), and the end and the pad are not scored, so the loss is -log(4/5)."""
    from fairseq_speaker.criterions.speaker_label_smoothed_cross_entropy import unigram_loss

    log2 = float(torch.tensor(2.0).log())
    bias = torch.tensor([[9.0, 9.0, 9.0, 9.0, 0.0, log2]])  # a bias on the specials changes nothing
    log_frequencies = torch.tensor([0.0, 0.0, 0.0, 0.0, 0.0, log2])
    loss = unigram_loss(bias, torch.tensor([[5, 2, 1]]), log_frequencies, nspecial=4)
    assert loss.item() == pytest.approx(-torch.tensor(0.8).log().item(), rel=1e-6)
    # a second sentence, no bias: (1/3, 2/3) for words 4 and 5, both said
    two = unigram_loss(torch.cat([bias, torch.zeros(1, 6)]), torch.tensor([[5, 2, 1], [4, 5, 2]]), log_frequencies, 4)
    expected = -torch.tensor(0.8).log() - torch.tensor(1 / 3).log() - torch.tensor(2 / 3).log()
    assert two.item() == pytest.approx(expected.item(), rel=1e-6)


def test_the_unigram_loss_is_added_per_token_logged_and_reaches_only_the_batchs_speakers(setup):
    task, model, sample = setup
    plain, _, _ = criterion(task)(model, sample)
    weighted = SpeakerLabelSmoothedCrossEntropyCriterion(task, False, 0.1, speaker_unigram=0.5)
    loss, _, log = weighted(model, sample)
    from fairseq_speaker.criterions.speaker_label_smoothed_cross_entropy import unigram_loss

    _, extra = model(**sample["net_input"])
    expected = 0.5 * unigram_loss(extra["speaker_bias"], sample["target"], weighted.log_frequencies(
        extra["speaker_bias"].size(1)), task.target_dictionary.nspecial)
    assert loss.item() == pytest.approx(plain.item() + expected.item(), rel=1e-5)
    assert log["speaker_aux:speaker_unigram"].item() == pytest.approx(expected.item(), rel=1e-5)
    model.zero_grad()
    (loss - plain.detach()).backward()
    rows = model.decoder.speaker_bias.weight.grad.abs().sum(dim=1)
    assert rows[[0, 2, 3]].gt(0).all() and rows[1] == 0  # speaker 1 is not in the batch


@pytest.mark.parametrize("weight", [-1.0, float("nan"), float("inf")])
def test_a_unigram_weight_that_is_no_weight_is_refused(weight):
    from fairseq_speaker.errors import UserError

    with pytest.raises(UserError, match="--speaker-unigram must be a number >= 0"):
        SpeakerLabelSmoothedCrossEntropyCriterion(make_task(num_speakers=4), False, 0.1, speaker_unigram=weight)
