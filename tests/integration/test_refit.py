"""fairseq-speaker-refit: trained speakers estimated again under a learned prior, saved for onboarding."""

import os

import pytest
import torch

from fairseq_speaker.onboarding import refit
from fairseq_speaker.onboarding.checkpoint import split_sentences
from fairseq_speaker.onboarding.prior import CHECKPOINT_KEY, SpeakerPrior
from tests.cli import generate_args, run


@pytest.fixture(scope="module")
def refitted(trained, toy, tmp_path_factory):
    checkpoint = trained("lstm_fact_bias")
    out = str(tmp_path_factory.mktemp("refit") / "refit.pt")
    proc = run("fairseq-speaker-refit", [toy["bin"], "--path", checkpoint, "--save", out, "--components", "2",
                                         "--shared", "keep", "--threads", "1"])
    return checkpoint, out, proc


def test_refit_with_shared_keep_changes_only_the_speaker_rows_and_saves_the_prior(refitted):
    checkpoint, out, proc = refitted
    assert "8 speakers refitted (fact bias)" in proc.stdout and "prior: 2 component(s)" in proc.stdout
    before, after = torch.load(checkpoint, weights_only=False), torch.load(out, weights_only=False)
    for key, value in before["model"].items():
        if not torch.is_tensor(value):
            assert after["model"][key] == value, key
        elif key.endswith("speaker_bias.speaker_weights"):
            assert not torch.equal(after["model"][key], value)
        else:
            assert torch.equal(after["model"][key], value), key  # the shared network is not touched
    prior = SpeakerPrior.from_state_dict(after[CHECKPOINT_KEY])
    assert prior.components == 2 and prior.variant == "fact"
    assert set(prior.means) == {"speaker_weights"} and prior.means["speaker_weights"].shape[0] == 2
    assert after["task_state"]["speaker_dictionary"] == before["task_state"]["speaker_dictionary"]  # same speakers


def test_a_refitted_checkpoint_decodes_and_onboards_under_its_prior(refitted, toy, tmp_path):
    _, out, _ = refitted
    generated = run("generate", generate_args(toy["bin"], out, "--gen-subset", "test"))
    assert generated.stdout.count("\nH-") + generated.stdout.startswith("H-") == 37
    prefix = os.path.join(toy["raw"], "test")
    rows = {}
    for prior in ("checkpoint", "mean"):
        save = str(tmp_path / f"adapted-{prior}.pt")
        run("fairseq-speaker-adapt", [toy["bin"], "--path", out, "--adapt-prefix", prefix, "--save", save,
                                      "--replace", "--adapt-prior", prior])
        rows[prior] = torch.load(save, weights_only=False)["model"]["decoder.speaker_bias.speaker_weights"]
    assert not torch.allclose(rows["checkpoint"], rows["mean"], atol=1e-4)


def test_shared_fit_moves_the_shared_bias_vectors_too(trained, toy, tmp_path, capsys):
    checkpoint = trained("lstm_fact_bias")
    out = str(tmp_path / "joint.pt")
    refit.main([toy["bin"], "--path", checkpoint, "--save", out, "--components", "1",  # --shared auto: fit
                "--shared-max-iter", "20", "--threads", "1"])
    printed = capsys.readouterr()
    assert "speakers and shared parameters fitted together" in printed.out
    assert "warning" not in printed.err  # half of training's label smoothing (0.1), by default
    refit.main([toy["bin"], "--path", checkpoint, "--save", str(tmp_path / "sharp.pt"), "--components", "1",
                "--shared", "fit", "--shared-max-iter", "2", "--label-smoothing", "0", "--threads", "1"])
    assert "--label-smoothing 0, less than half of training's 0.1" in capsys.readouterr().err
    before, after = torch.load(checkpoint, weights_only=False)["model"], torch.load(out, weights_only=False)["model"]
    for key, value in before.items():
        if not torch.is_tensor(value):
            continue
        moved = not torch.equal(after[key], value)
        assert moved == key.endswith(("speaker_bias.speaker_weights", "speaker_bias.shared_biases")), key


def test_shared_fit_is_refused_for_a_variant_on_the_decoders_state(trained, toy, tmp_path, capsys):
    err = _refused([toy["bin"], "--path", trained("lstm_base:lhuc"), "--save", str(tmp_path / "o.pt"),
                    "--shared", "fit"], capsys)
    assert "does not have: use --shared keep" in err


def _refused(argv, capsys) -> str:
    with pytest.raises(SystemExit) as exit:
        refit.main(argv)
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_a_model_without_speaker_parameters_is_refused(trained, toy, tmp_path, capsys):
    out = str(tmp_path / "o.pt")
    assert "nothing to adapt" in _refused([toy["bin"], "--path", trained("lstm_base"), "--save", out], capsys)
    assert not os.path.exists(out)


def test_auto_keeps_the_shared_parameters_of_a_state_variant(trained, toy, tmp_path, capsys):
    checkpoint = trained("lstm_base:lhuc")
    out = str(tmp_path / "lhuc.pt")
    refit.main([toy["bin"], "--path", checkpoint, "--save", out, "--components", "1", "--max-iter", "5",
                "--threads", "1"])
    assert "fitted together" not in capsys.readouterr().out
    before, after = torch.load(checkpoint, weights_only=False)["model"], torch.load(out, weights_only=False)["model"]
    owned = [k for k in before if torch.is_tensor(before[k]) and not torch.equal(before[k], after[k])]
    assert owned and all("speaker_bias" in k for k in owned), owned


def test_styles_learned_from_the_sentences_become_the_prior_every_speaker_starts_from(trained, toy, tmp_path):
    """--styles K: the prior's components are styles fitted on the speakers' pooled sentences (EM), saved for
    onboarding; every speaker is refitted from the style their sentences make most probable, and with a very
    large --style-precision stays on it."""
    from fairseq_speaker.onboarding.checkpoint import SpeakerCheckpoint
    from fairseq_speaker.onboarding.styles import style_log_likelihoods

    checkpoint = trained("lstm_fact_bias")
    out = str(tmp_path / "styles.pt")
    proc = run("fairseq-speaker-refit", [toy["bin"], "--path", checkpoint, "--save", out, "--styles", "2",
                                         "--style-precision", "1e6", "--shared", "keep", "--threads", "1"])
    assert "styles: iteration 1" in proc.stdout and "prior: 2 component(s)" in proc.stdout
    saved = torch.load(out, weights_only=False)
    prior = SpeakerPrior.from_state_dict(saved[CHECKPOINT_KEY])
    assert prior.components == 2 and prior.precision == 1e6
    # each speaker's rows are their style's: the one whose rows explain their sentences best
    opened = SpeakerCheckpoint.load(out, data=toy["bin"])
    bias = opened.check_adaptable()
    sentences = split_sentences(opened.task, "train")
    adapter = refit.SpeakerAdapter(opened.model, opened.task, max_unknown_rate=1.0)
    adapter.sentences = {name: list(pairs) for name, pairs in sentences.items()}
    names = list(sentences)
    problems = {name: chunks for group in adapter.score_groups(names) for name, chunks in group}
    styles = [prior.component_rows(k) for k in range(2)]
    best = (style_log_likelihoods(bias, styles, [problems[n] for n in names])
            + prior.log_weights.double()[None]).argmax(1).tolist()
    rows = bias.export_speakers([opened.task.speaker_dictionary.index(n) for n in names])["speaker_weights"]
    for i, k in enumerate(best):
        assert torch.allclose(rows[i].float(), styles[k]["speaker_weights"][0], atol=1e-3), names[i]


def test_a_checkpoint_whose_training_command_line_named_an_input_speaker_is_still_refitted(trained, toy, tmp_path):
    """fairseq-train now refuses --speaker (fairseq-interactive's), which a checkpoint written before holds in its
    saved options; the commands that read such a checkpoint's splits leave it out rather than refuse it."""
    state = torch.load(trained("lstm_fact_bias"), weights_only=False)
    state["cfg"]["task"]["speaker"], state["cfg"]["task"]["speaker_per_line"] = "spk003", True
    stray = str(tmp_path / "stray.pt")
    torch.save(state, stray)
    out = str(tmp_path / "refit.pt")
    proc = run("fairseq-speaker-refit", [toy["bin"], "--path", stray, "--save", out, "--components", "1",
                                         "--shared", "keep", "--threads", "1"])
    assert "8 speakers refitted (fact bias)" in proc.stdout


def test_a_sum_of_variants_is_named_as_trained(trained, toy, tmp_path):
    """A fact+hyper_lhuc model was "refitted (sum bias)": its class's name, which fairseq-speaker-vectors and
    -speakers spell fact+hyper_lhuc."""
    proc = run("fairseq-speaker-refit", [toy["bin"], "--path", trained("lstm_speaker"), "--save",
                                         str(tmp_path / "refit.pt"), "--components", "1", "--shared", "keep",
                                         "--threads", "1", "--max-iter", "2"])
    assert "8 speakers refitted (fact+hyper_lhuc bias)" in proc.stdout, proc.stdout
