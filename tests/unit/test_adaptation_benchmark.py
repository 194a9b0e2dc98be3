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
    import fairseq_speaker.onboarding.adapter as adapt_module

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
