"""python -m fairseq_speaker.benchmarks.adaptation: onboarding's cost, timed on a small random model here."""

import json

import pytest

from fairseq_speaker.benchmarks import adaptation

SMALL = ["--vocab", "60", "--speakers", "5", "--sentences", "3", "--length", "4", "--many", "2", "--repeats", "1",
         "--many-repeats", "1", "--threads", "1", "--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
         "--encoder-hidden-size", "16", "--decoder-hidden-size", "16",
         "--attention-dim", "16"]


def test_iterations_are_run_as_asked_for_a_state_variant_and_its_update(tmp_path, capsys, monkeypatch):
    """--iterations N runs every fit N L-BFGS iterations even on a random network: no stop on the loss's change
    nor on the gradient, and the variant's own parameters drawn at random (at the paper's sizes a random
    network's objective is flat, and its fits stopped after 4 or 5 iterations whatever the budget), so each fit
    evaluates the objective at least N times; --update-iterations gives the update its own count. The table and
    the JSON say how many."""
    import fairseq_speaker.onboarding.adapt as adapt_module

    seen = []
    fit = adapt_module.fit_speakers

    def recording(bias, problems, options, **kwargs):
        maps = dict(bias.shared_parameters())["parts.hyper_lhuc.layer_maps"]
        seen.append((options.max_iter, options.tolerance, options.gradient_tolerance, float(maps.abs().max())))
        return fit(bias, problems, options, **kwargs)

    monkeypatch.setattr(adapt_module, "fit_speakers", recording)
    out = tmp_path / "bench.json"
    adaptation.main(["--archs", "lstm_base", "--speaker-bias", "fact+hyper_lhuc", "--iterations", "8",
                     "--update-iterations", "2", "--json", str(out), *SMALL])
    assert {(n, loss, grad) for n, loss, grad, _ in seen} == {(8, 0.0, 0.0), (2, 0.0, 0.0)}
    assert all(maps > 0 for *_, maps in seen)  # hyper_lhuc's maps start at zero: drawn at random here
    printed = capsys.readouterr().out
    assert "8 L-BFGS iterations per fit (2 for an update)" in printed and "evaluations per fit" in printed
    result = json.loads(out.read_text())
    evaluations = result["evaluations"]["lstm_base"]
    assert min(evaluations["one speaker"]) >= 8 and min(evaluations["2 speakers"]) >= 8
    assert 2 <= max(evaluations["incremental update"]) < 8
    assert set(result["seconds"]["lstm_base"]) == {"one speaker", "2 speakers", "incremental update"}


@pytest.mark.parametrize("flag", ["--iterations", "--update-iterations"])
def test_a_negative_count_is_refused(flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        adaptation.main(["--archs", "lstm_base", flag, "-1", *SMALL])
    assert exit_.value.code == 2
    assert f"{flag} must be 0 (the fit's own stopping rule) or more, got -1" in capsys.readouterr().err


def test_stand_in_iterations_run_first_on_the_stand_in_and_the_exact_fit_is_timed_beside(tmp_path, capsys):
    """--stand-in-iterations S with --iterations N: a new speaker's fit takes S iterations on the output layer's
    stand-in, then N on the exact loss; the same speaker fitted with S iterations on the exact loss alone is timed
    in the same run; an update never uses the stand-in."""
    out = tmp_path / "bench.json"
    adaptation.main(["--archs", "lstm_base", "--speaker-bias", "fact+hyper_lhuc", "--iterations", "3",
                     "--stand-in-iterations", "5", "--shortlist", "20", "--json", str(out), *SMALL])
    assert "5 L-BFGS iterations on the stand-in then 3 exact per fit" in capsys.readouterr().out
    result = json.loads(out.read_text())
    evaluations, stand_in = result["evaluations"]["lstm_base"], result["stand_in_evaluations"]["lstm_base"]
    assert min(stand_in["one speaker"]) >= 5 and min(evaluations["one speaker"]) >= 5 + 3
    assert max(stand_in["one speaker, exact loss"]) == 0 and min(evaluations["one speaker, exact loss"]) >= 5
    assert max(stand_in["incremental update"]) == 0
    assert set(result["seconds"]["lstm_base"]) == {"one speaker", "one speaker, exact loss", "2 speakers",
                                                   "incremental update"}


@pytest.mark.parametrize("flags, message", [
    (["--stand-in-iterations", "4"], "--stand-in-iterations S needs --iterations N"),
    (["--iterations", "2", "--stand-in-iterations", "4", "--no-stand-in"], "contradict each other"),
    (["--shortlist", "0"], "--shortlist must be a number of words >= 1, got 0"),
])
def test_stand_in_options_that_cannot_be_followed_are_refused(flags, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        adaptation.main(["--archs", "lstm_base", *flags, *SMALL])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
