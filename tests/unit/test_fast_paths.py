"""One switch for every fast CPU path (fairseq_speaker/fast_paths.py): off, the plain path runs plain."""

import os
import subprocess
import sys

import pytest
import torch

from fairseq_speaker import fast_paths
from fairseq_speaker.criterions import SpeakerLabelSmoothedCrossEntropyCriterion
from fairseq_speaker.criterions import speaker_label_smoothed_cross_entropy as criterion_module
from fairseq_speaker.modules import attentional_lstm, gemm, pointwise, step_weights
from tests.helpers import make_model, make_task, random_batch


def _spies(monkeypatch):
    """Counters of each fast path's own code: oneDNN's product, tanh from sigmoid, one product per
    recurrent weight gradient, the hoisted teacher-forced recurrence, the fused loss."""
    calls = {"onednn": 0, "tanh": 0, "step_weight": 0, "teacher_forced_steps": 0, "fused_loss": 0}

    def counting(key, fn):
        def wrapped(*args, **kwargs):
            calls[key] += 1
            return fn(*args, **kwargs)
        return wrapped

    if gemm._onednn_op is not None:
        monkeypatch.setattr(gemm, "_onednn_op", counting("onednn", gemm._onednn_op))
    monkeypatch.setattr(pointwise, "_tanh", counting("tanh", pointwise._tanh))
    monkeypatch.setattr(step_weights._StepLinear, "apply", counting("step_weight", step_weights._StepLinear.apply))
    decoder = attentional_lstm.AttentionalLSTMDecoder
    monkeypatch.setattr(decoder, "_teacher_forced_steps", counting("teacher_forced_steps", decoder._teacher_forced_steps))
    monkeypatch.setattr(criterion_module, "label_smoothed_nll_loss_from_logits",
                        counting("fused_loss", criterion_module.label_smoothed_nll_loss_from_logits))
    return calls


def _train_and_decode(task, name="fact"):
    model = make_model(name, task=task, lstm_dropout=0.2).train()
    src = random_batch(task.source_dictionary, [5, 3, 4])
    target = random_batch(task.target_dictionary, [4, 6, 2], left_pad=False)
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(1).sum(1), "speakers": torch.tensor([0, 1, 2]),
                            "prev_output_tokens": target.roll(1, dims=1)},
              "target": target, "ntokens": int(target.ne(1).sum()), "nsentences": 3}
    criterion = SpeakerLabelSmoothedCrossEntropyCriterion(task, False, 0.1)
    loss, _, _ = criterion(model, sample)
    loss.backward()
    model.eval()
    with torch.no_grad():  # one generation step
        encoder_out = model.encoder(src, src_lengths=sample["net_input"]["src_lengths"], speakers=torch.tensor([0, 1, 2]))
        model.decoder(target[:, :1], encoder_out, incremental_state={})


@pytest.mark.parametrize("name", ["fact", "fact+hyper_lhuc"])  # a bias; a bias and a speaker state
def test_the_switch_off_runs_no_fast_path_and_on_runs_each(monkeypatch, fast_path_switch, name):
    task = make_task(num_speakers=4)
    calls = _spies(monkeypatch)
    fast_path_switch(False)
    _train_and_decode(task, name)
    assert calls == dict.fromkeys(calls, 0)

    fast_path_switch(True)
    _train_and_decode(task, name)
    expected = {key for key in calls if key != "onednn" or gemm._AVAILABLE}
    assert {key for key, n in calls.items() if n > 0} == expected


def test_plain_is_a_block_and_the_environment_sets_the_default():
    before = fast_paths.enabled()
    with fast_paths.plain():
        assert not fast_paths.enabled()
        assert not gemm.serves(torch.zeros(2, 2))
    assert fast_paths.enabled() == before
    code = "from fairseq_speaker import fast_paths; print(fast_paths.enabled())"
    for value, expected in (("1", "False"), ("0", "True")):
        env = dict(os.environ, FAIRSEQ_SPEAKER_PLAIN=value)
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        assert out.stdout.strip() == expected


@pytest.mark.parametrize("module", [gemm, pointwise, step_weights, criterion_module, attentional_lstm])
def test_no_fast_path_reads_the_environment_itself(module):
    """The switch is read in one place: no module of a fast path looks at the variable on its own."""
    source = open(module.__file__, encoding="utf-8").read()
    assert fast_paths.ENVIRONMENT_VARIABLE not in source.replace("``FAIRSEQ_SPEAKER_PLAIN=1``", "")
    assert "os.environ" not in source
