"""Variants acting on the decoder's state through fairseq's command lines: fairseq-train, fairseq-generate with a
speaker per sentence, fairseq-interactive, and onboarding a new speaker through the frozen decoder. Decoding and
onboarding run the commands' mains in this process (tests/cli.py's run_here and call_main)."""

import os
import re
import shutil

import pytest
import torch

from fairseq_speaker.data import read_lines
from fairseq_speaker.generate_output import read_generate_output
from tests.cli import SIZES, call_main, generate_args, run_here

#: system -> the prefix of its hyper_lhuc parameters in the checkpoint
SYSTEMS = {"lstm_base:fact+hyper_lhuc": "decoder.speaker_bias.parts.hyper_lhuc.",
           "transformer_base:hyper_lhuc": "decoder.speaker_bias."}


def _scored(stdout):
    """Sentence id -> (hypothesis, score) of fairseq-generate's ``H-`` lines."""
    found = {}
    for line in stdout.splitlines():
        match = re.match(r"^H-(\d+)\t([^\t]*)\t(.*)$", line)
        if match:
            found[int(match.group(1))] = (match.group(3), float(match.group(2)))
    return found


def _amplified(checkpoint, prefix, path, factor=20.0):
    """The checkpoint with its hyper-network's maps multiplied, so that its speakers translate visibly apart."""
    state = torch.load(checkpoint, weights_only=True)
    for name in ("layer_maps", "input_map"):
        state["model"][prefix + name] *= factor
    torch.save(state, path)
    return path


# the Transformer's hyper_lhuc in the slow tier (25 s): the other state variants stay in the default run
@pytest.mark.parametrize("system", [pytest.param(s, marks=pytest.mark.slow) if s == "transformer_base:hyper_lhuc"
                                    else s for s in sorted(SYSTEMS)])
def test_a_state_variant_trains_and_decodes_each_sentence_with_its_own_speaker(toy, trained, tmp_path, system):
    checkpoint = trained(system)
    state = torch.load(checkpoint, weights_only=True)
    prefix = SYSTEMS[system]
    model = state["model"]
    assert model[prefix + "speaker_codes"].shape == (8, 3)  # r = 3 numbers per speaker (tests/cli.py)
    # the shared maps started at zero (the speaker-blind model) and were trained
    assert float(model[prefix + "layer_maps"].abs().sum()) > 0 and float(model[prefix + "input_map"].abs().sum()) > 0
    assert model[prefix + "_extra_state"]["sites"]["layer_dims"]  # the decoder's sizes, saved with the rows

    doctored = _amplified(checkpoint, prefix, str(tmp_path / "amplified.pt"))
    labels = read_lines(os.path.join(toy["raw"], "test.spk"))
    speakers = ["spk000" if i % 3 else "spk005" for i in range(len(labels))]

    def generate(labels):
        spk_file = tmp_path / "test.spk"
        spk_file.write_text("\n".join(labels) + "\n")
        return _scored(run_here("generate", generate_args(toy["bin"], doctored, "--speaker-file",
                                                          str(spk_file))).stdout)

    mixed = generate(speakers)
    alone = {name: generate([name] * len(labels)) for name in ("spk000", "spk005")}
    assert len(mixed) == SIZES["test"]
    for i, name in enumerate(speakers):  # batched beam search: each sentence as its own speaker would have it
        assert mixed[i][0] == alone[name][i][0]
        assert mixed[i][1] == pytest.approx(alone[name][i][1], abs=1e-3)
    assert any(alone["spk000"][i][0] != alone["spk005"][i][0] for i in range(SIZES["test"]))  # speakers differ

    common = generate_args(toy["bin"], doctored, "--source-lang", "en", "--target-lang", "fr")
    sentences = read_lines(os.path.join(toy["raw"], "test.en"))[:4]
    lines = [f"{name}\t{sentence}" for name in ("spk000", "spk005") for sentence in sentences]
    proc = run_here("interactive", [*common, "--speaker-per-line"], stdin="\n".join(lines) + "\n")
    assert read_generate_output(proc.stdout) == [alone[name][i][0] for name in ("spk000", "spk005")
                                                 for i in range(len(sentences))]


def test_a_new_speaker_of_a_state_variant_is_fitted_through_the_frozen_decoder(toy, trained, tmp_path):
    checkpoint = trained("lstm_base:fact+hyper_lhuc")
    folder = tmp_path / "new"
    folder.mkdir()
    for lang in ("en", "fr"):
        shutil.copy(os.path.join(toy["raw"], f"test.{lang}"), folder / f"adapt.{lang}")
    labels = read_lines(os.path.join(toy["raw"], "test.spk"))
    (folder / "adapt.spk").write_text("".join(f"new-{label}\n" for label in labels))
    adapted = str(tmp_path / "adapted.pt")
    proc = call_main("fairseq-speaker-adapt", [toy["bin"], "--path", checkpoint, "--adapt-prefix",
                                               str(folder / "adapt"), "--save", adapted])
    assert "saved to" in proc.stdout
    old, got = torch.load(checkpoint, weights_only=True), torch.load(adapted, weights_only=True)
    names = old["task_state"]["speaker_dictionary"]["names"]
    new = sorted({f"new-{label}" for label in labels})
    assert sorted(got["task_state"]["speaker_dictionary"]["names"][len(names):]) == new
    for key in ("decoder.speaker_bias.parts.hyper_lhuc.speaker_codes",
                "decoder.speaker_bias.parts.fact.speaker_weights"):
        assert torch.equal(got["model"][key][: len(names)], old["model"][key])  # the trained speakers' rows stay
        mean = old["model"][key].mean(0, keepdim=True)
        assert not torch.allclose(got["model"][key][len(names):], mean.expand(len(new), -1))  # the new ones moved
    for key, value in old["model"].items():  # and nothing shared changed
        if torch.is_tensor(value) and not key.endswith(("speaker_codes", "speaker_weights")):
            assert torch.equal(got["model"][key], value), key
    proc = run_here("generate", generate_args(toy["bin"], adapted, "--speaker-file", str(folder / "adapt.spk"),
                                              "--unknown-speaker", "fail"))
    assert len(read_generate_output(proc.stdout)) == SIZES["test"]


def test_an_incremental_update_through_the_decoder_fits_the_new_sentences_against_the_old_fits_curvature(
        toy, trained, monkeypatch):
    """The fast update runs the decoder over the new sentences only, and lands where refitting on all of them
    does: of what the exact refit gains on the objective of all the sentences, the fast one loses under a tenth
    (fitting the new sentences alone, from where the speaker was, ends above the start here)."""
    from fairseq import checkpoint_utils

    from fairseq_speaker.onboarding import fit, fit_loss
    from fairseq_speaker.onboarding.adapter import SpeakerAdapter

    checkpoint = trained("lstm_base:fact+hyper_lhuc")
    sources = read_lines(os.path.join(toy["raw"], "test.en"))[:8]
    targets = read_lines(os.path.join(toy["raw"], "test.fr"))[:8]
    seen = []
    plain = fit_loss.decoder_nll
    monkeypatch.setattr(fit_loss, "decoder_nll", lambda bias, params, batch: seen.append(batch.num_sentences)
                        or plain(bias, params, batch))
    results = {}
    for exact in (False, True):
        models, _, task = checkpoint_utils.load_model_ensemble_and_task([checkpoint], arg_overrides={"data": toy["bin"]})
        adapter = SpeakerAdapter(models[0].eval(), task, exact_updates=exact)
        pairs = adapter.encode(sources, targets)
        adapter.adapt({"newcomer": pairs[:6]})
        index = task.speaker_dictionary.index("newcomer")
        fitted = {k: v.float() for k, v in adapter.bias.export_speakers([index]).items()}
        seen.clear()
        adapter.update("newcomer", pairs[6:])
        calls = list(seen)
        rows = {k: v.float() for k, v in adapter.bias.export_speakers([index]).items()}
        objective = lambda r: float(fit._objective(  # noqa: E731  (on all eight sentences, exactly)
            adapter.bias, dict(adapter.bias.shared_parameters()), [r], [adapter.mean_speaker],
            [adapter.chunks(pairs)], adapter.options.l2).detach())
        results[exact] = (calls, objective(rows), objective(fitted))
    fast_calls, fast, start = results[False]
    exact_calls, best, _ = results[True]
    assert fast_calls and set(fast_calls) == {2}  # the two new sentences, never the six fitted before
    assert 6 in exact_calls  # the exact refit runs over the six again
    assert best < start
    assert fast - best <= 0.1 * (start - best), (fast, best, start)
