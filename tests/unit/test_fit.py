"""The fast fit of a speaker's parameters (cached scores, L-BFGS) against the model itself.

Uses the frozen 0.2.0 checkpoints of every variant with speaker parameters, both families.
"""

import pytest
import torch
from fairseq.data import LanguagePairDataset

from fairseq_speaker.onboarding.adapter import SpeakerAdapter
from fairseq_speaker.onboarding.checkpoint import OnboardingError
from fairseq_speaker.onboarding.fit import fit_speakers
from fairseq_speaker.onboarding.fit_loss import scored_nll
from fairseq_speaker.onboarding.fit_options import FitOptions
from fairseq_speaker.onboarding.scoring import score_tokens
from tests.helpers import frozen_pairs, open_frozen

SYSTEMS = ["lstm_full_bias", "lstm_fact_bias", "lstm_proj", "lstm_simplex", "transformer_full_bias",
           "transformer_fact_topic"]


_open = open_frozen
_pairs = frozen_pairs


def _model_nll(checkpoint, pairs, speaker_id, smoothing=0.0):
    """The summed loss of the target words as the model computes it (logits + bias, log-softmax); with
    ``smoothing`` e, (1 - e) of it plus e times the mean over the vocabulary of -log p at each target position."""
    task = checkpoint.task
    ds = LanguagePairDataset([s for s, _ in pairs], [len(s) for s, _ in pairs], task.src_dict,
                             [t for _, t in pairs], [len(t) for _, t in pairs], task.tgt_dict, shuffle=False)
    batch = ds.collater([ds[i] for i in range(len(pairs))])
    net = batch["net_input"]
    with torch.no_grad():
        logits, _ = checkpoint.model(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"],
                                     speakers=torch.full((len(pairs),), speaker_id))
    lprobs = torch.log_softmax(logits.float(), dim=-1)
    target = batch["target"]
    keep = target.ne(task.tgt_dict.pad())
    nll = -lprobs.gather(2, target.unsqueeze(2)).squeeze(2)[keep].sum()
    uniform = -lprobs.mean(2)[keep].sum()
    return float((1 - smoothing) * nll + smoothing * uniform)


@pytest.mark.parametrize("system", SYSTEMS)
def test_fast_loss_is_the_models_loss(system):
    checkpoint = _open(system)
    bias = checkpoint.check_adaptable()
    pairs = _pairs(checkpoint, "spk001")
    scores = score_tokens(checkpoint.model, pairs, checkpoint.task.src_dict, checkpoint.task.tgt_dict)
    assert scores.num_tokens == sum(len(t) for _, t in pairs)
    for speaker in (0, 3):  # trained speakers' rows: the cached scores plus the bias give the model's loss
        rows = {k: v.float() for k, v in bias.export_speakers([speaker]).items()}
        assert float(scored_nll(bias, rows, scores)) == pytest.approx(_model_nll(checkpoint, pairs, speaker), rel=1e-5)
    fitted, _, report = fit_speakers(bias, [[scores]], FitOptions())
    assert report.loss_after < report.loss_before
    checkpoint.add_speakers(["new"], fitted[0])
    fast = float(scored_nll(bias, {k: v.float() for k, v in fitted[0].items()}, scores))
    assert fast == pytest.approx(_model_nll(checkpoint, pairs, bias.num_speakers - 1), rel=1e-5)


def test_adapter_adds_only_new_rows_and_is_deterministic():
    results = []
    for _ in range(2):
        checkpoint = _open("lstm_fact_bias")
        before = {k: v.clone() for k, v in checkpoint.model.state_dict().items() if torch.is_tensor(v)}
        adapter = SpeakerAdapter(checkpoint.model, checkpoint.task)
        reports = adapter.adapt({"newcomer": _pairs(checkpoint, "spk002")})
        assert reports["newcomer"].loss_after < reports["newcomer"].loss_before
        after = checkpoint.model.state_dict()
        assert checkpoint.speaker_names[-1] == "newcomer"
        assert checkpoint.task.speaker_dictionary.counts[-1] == len(_pairs(checkpoint, "spk002"))
        for key, value in before.items():
            if key == "decoder.speaker_bias.speaker_weights":
                assert torch.equal(after[key][:-1], value)  # every trained speaker's row is untouched
            else:
                assert torch.equal(after[key], value), key
        results.append(after["decoder.speaker_bias.speaker_weights"][-1])
    assert torch.equal(results[0], results[1])


def test_incremental_update_refits_on_all_sentences():
    checkpoint = _open("lstm_full_bias")
    pairs = _pairs(checkpoint, "spk002")
    adapter = SpeakerAdapter(checkpoint.model, checkpoint.task, FitOptions(tolerance=1e-10, max_iter=500))
    adapter.adapt({"a": pairs[:-1]})
    adapter.update("a", pairs[-1:])
    incremental = checkpoint.speaker_bias.export_speakers([checkpoint.task.speaker_dictionary.index("a")])
    adapter.adapt({"b": pairs})  # the same sentences at once
    at_once = checkpoint.speaker_bias.export_speakers([checkpoint.task.speaker_dictionary.index("b")])
    assert torch.allclose(incremental["weight"], at_once["weight"], atol=1e-3)
    # a trained speaker moves from their trained row, not from the mean
    trained = checkpoint.speaker_bias.export_speakers([0])["weight"]
    adapter.update("spk000", pairs[:1])
    moved = checkpoint.speaker_bias.export_speakers([0])["weight"]
    assert not torch.equal(moved, trained)
    assert (moved - trained).norm() < (moved - checkpoint.speaker_bias.weight[:8].mean(0)).norm()


def test_refusals():
    checkpoint = _open("lstm_fact_bias")
    adapter = SpeakerAdapter(checkpoint.model, checkpoint.task)
    with pytest.raises(OnboardingError, match="already in the model: pass --replace"):
        adapter.adapt({"spk001": _pairs(checkpoint, "spk001")})
    with pytest.raises(OnboardingError, match="no sentences"):
        adapter.adapt({"x": []})
    with pytest.raises(OnboardingError, match="nothing to adapt"):
        SpeakerAdapter(_open("lstm_base").model, _open("lstm_base").task)
    with pytest.raises(OnboardingError, match="speaker-token"):
        spk = _open("lstm_spk_token")
        SpeakerAdapter(spk.model, spk.task)


def test_speakers_scored_in_one_batch_are_fitted_as_if_alone():
    """Grouping speakers' sentences into one batch of the network (and slicing the scores apart) changes
    nothing: each speaker's fit equals their fit alone."""
    together = _open("transformer_full_bias")
    speakers = ["spk000", "spk001", "spk002", "spk003"]
    adapter = SpeakerAdapter(together.model, together.task, batch_sentences=8)  # groups of several speakers
    adapter.adapt({f"new-{s}": _pairs(together, s) for s in speakers})
    for s in speakers:
        alone = _open("transformer_full_bias")
        SpeakerAdapter(alone.model, alone.task).adapt({f"new-{s}": _pairs(alone, s)})
        rows = [c.speaker_bias.export_speakers([c.task.speaker_dictionary.index(f"new-{s}")])["weight"]
                for c in (together, alone)]
        assert torch.allclose(rows[0], rows[1], atol=1e-5), s


@pytest.mark.parametrize("system", ["lstm_fact_bias", "transformer_full_bias", "transformer_fact_topic"])
def test_the_label_smoothed_fast_loss_is_the_models(system):
    checkpoint = _open(system)
    bias = checkpoint.check_adaptable()
    pairs = _pairs(checkpoint, "spk002")
    scores = score_tokens(checkpoint.model, pairs, checkpoint.task.src_dict, checkpoint.task.tgt_dict)
    rows = {k: v.float() for k, v in bias.export_speakers([2]).items()}
    params = {**dict(bias.shared_parameters()), **rows}
    for smoothing in (0.0, 0.1, 0.5):
        assert float(scored_nll(bias, params, scores, smoothing)) == pytest.approx(
            _model_nll(checkpoint, pairs, 2, smoothing), rel=1e-5)


def test_the_curvature_of_a_fit_is_the_bfgs_matrix_of_its_steps():
    """On a quadratic 1/2 x^T A x - b^T x, the BFGS matrix of L-BFGS's steps meets the secant condition of its
    last step (B s = y) and is near A (not equal: the line search is inexact); the model it gives predicts the
    objective at another point."""
    from fairseq_speaker.onboarding.curvature import Curvature

    torch.manual_seed(0)
    m = torch.randn(4, 4, dtype=torch.float64)
    a = m @ m.t() + 4 * torch.eye(4, dtype=torch.float64)
    b = torch.randn(4, dtype=torch.float64)
    x = torch.zeros(4, dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([x], max_iter=50, tolerance_grad=1e-12, tolerance_change=1e-14,
                                  line_search_fn="strong_wolfe")

    def f(v):
        return 0.5 * v @ (a @ v) - b @ v

    def closure():
        optimizer.zero_grad()
        loss = f(x)
        loss.backward()
        return loss

    optimizer.step(closure)
    state = optimizer.state[x]
    curvature = Curvature.from_lbfgs(state, {"x": x.detach()}, tokens=1, loss=float(f(x.detach())))
    s, y = state["old_stps"][-1].double(), state["old_dirs"][-1].double()
    assert torch.allclose(curvature.hessian @ s, y, atol=1e-8)
    assert float((curvature.hessian - a).norm() / a.norm()) < 0.1
    assert float((torch.eye(4, dtype=torch.float64) - a).norm() / a.norm()) > 0.5  # what no curvature would be
    other = x.detach() + torch.tensor([0.3, -0.2, 0.1, 0.5], dtype=torch.float64)
    assert float(curvature.penalty({"x": other})) == pytest.approx(float(f(other)), rel=0.05)
    assert Curvature.from_lbfgs({}, {"x": x.detach()}, tokens=1, loss=0.0) is None  # no step taken: no model


def test_a_fit_through_the_decoder_stops_at_its_own_tolerance_and_an_update_at_the_strict_one():
    """Each evaluation of a fit through the decoder is a pass of the network: a new speaker's fit stops at
    ``decoder_tolerance``, not ``tolerance`` (an update keeps the strict one: one sentence moves a speaker little);
    a fit on cached logits keeps ``tolerance``."""
    import os

    from fairseq_speaker.onboarding.checkpoint import SpeakerCheckpoint
    from tests.helpers import FROZEN_0_2_0

    release = os.path.join(os.path.dirname(FROZEN_0_2_0), "0.5.0")
    state = SpeakerCheckpoint.load(os.path.join(release, "lstm_hyper_lhuc.pt"), data=release,
                                   overrides={"source_lang": "en", "target_lang": "fr"})
    pairs = frozen_pairs(state, "spk002")
    loose = FitOptions(tolerance=1e-12, gradient_tolerance=0.0, decoder_tolerance=1e3)
    adapter = SpeakerAdapter(state.model, state.task, loose)
    assert adapter.through_decoder
    assert adapter.adapt({"a": pairs[:-1]})["a"].evaluations == 1  # any change is below 1e3 nats a word
    assert adapter.update("a", pairs[-1:]).evaluations > 1
    strict = SpeakerAdapter(state.model, state.task, FitOptions(tolerance=1e-12, gradient_tolerance=0.0))
    assert strict.adapt({"b": pairs[:-1]})["b"].evaluations > 1

    logits = _open("lstm_fact_bias")
    assert SpeakerAdapter(logits.model, logits.task, loose).adapt({"c": _pairs(logits, "spk002")})["c"].evaluations > 1
