"""The spk_token baseline: a speaker token starts every target, is forced when decoding, and is stripped."""

import os

import torch
from fairseq import checkpoint_utils, utils
from fairseq.data import Dictionary

from fairseq_speaker.data import MEAN_SPEAKER
from fairseq_speaker.generate_output import read_generate_output
from fairseq_speaker.tasks.speaker_translation import SPEAKER_TOKEN
from tests.cli import SIZES, USER_DIR, generate_args, run


def load(checkpoint, data, tmp_path, penalize_speaker_tokens=False):
    """Task and model from a checkpoint, as fairseq-generate loads them (no --speaker-token given)."""
    if penalize_speaker_tokens:  # the model would never choose a speaker token by itself
        state = torch.load(checkpoint, weights_only=True)
        names = state["task_state"]["speaker_dictionary"]["names"]
        first = len(Dictionary.load(os.path.join(data, "dict.fr.txt")))
        state["model"]["decoder.output_bias"][first : first + len(names)] = -100.0
        checkpoint = str(tmp_path / "penalized.pt")
        torch.save(state, checkpoint)
    utils.import_user_module(type("Args", (), {"user_dir": USER_DIR})())
    models, _, task = checkpoint_utils.load_model_ensemble_and_task(
        [checkpoint], arg_overrides={"data": data})
    return task, [m.eval() for m in models]


def test_the_checkpoint_knows_it_was_trained_with_speaker_tokens(toy, trained):
    state = torch.load(trained("lstm_base+spk_token"), weights_only=True)
    assert state["task_state"]["speaker_token"] is True
    words = len(Dictionary.load(os.path.join(toy["bin"], "dict.fr.txt")))
    assert state["model"]["decoder.embed_tokens.weight"].shape[0] == words + 8  # one token per speaker


def test_prefix_is_forced_and_stripped(toy, trained, tmp_path):
    task, models = load(trained("lstm_base+spk_token"), toy["bin"], tmp_path, penalize_speaker_tokens=True)
    task.load_dataset("test")
    dataset = task.dataset("test")
    sample = dataset.collater([dataset[i] for i in range(6)])
    speakers = sample["net_input"]["speakers"]
    tokens = task.speaker_token_ids()
    # the decoder reads the speaker token first; it is an input, not a prediction target
    assert torch.equal(sample["net_input"]["prev_output_tokens"][:, 1], tokens[speakers])
    assert (sample["target"][:, 0] == task.target_dictionary.pad()).all()
    words = sum(len(dataset.dataset[i]["target"]) for i in range(6))
    assert sample["ntokens"] == words  # the speaker tokens are not counted as predicted words
    assert task.target_dictionary[int(tokens[0])] == SPEAKER_TOKEN.format(task.speaker_dictionary.names[0])

    generator = task.build_generator(models, type("G", (), {"beam": 5, "max_len_b": 6})())
    prefix = tokens[speakers].unsqueeze(1)
    with torch.no_grad():
        raw = generator.generate(models, sample, prefix_tokens=prefix)
    # forced: despite a -100 bias against them, every hypothesis starts with its speaker's token
    assert [int(h[0]["tokens"][0]) for h in raw] == tokens[speakers].tolist()
    stripped = task.inference_step(generator, models, sample)
    for r, s in zip(raw, stripped):
        assert s[0]["tokens"].tolist() == r[0]["tokens"][1:].tolist()
        assert len(s[0]["positional_scores"]) == len(s[0]["tokens"])

    # an unseen speaker has no token: nothing is forced, the model chooses the first word itself
    sample["net_input"]["speakers"] = torch.full_like(speakers, MEAN_SPEAKER)
    with torch.no_grad():
        free = task.inference_step(generator, models, sample)
    firsts = [int(h[0]["tokens"][0]) for h in free]
    assert not set(firsts) & set(tokens.tolist() + [task.target_dictionary.unk()])


def test_fairseq_generate_prints_clean_hypotheses_and_references(toy, trained):
    proc = run("generate", generate_args(toy["bin"], trained("lstm_base+spk_token")))
    assert "<spk:" not in proc.stdout
    assert len(read_generate_output(proc.stdout)) == SIZES["test"]
    assert sum(line.startswith("T-") for line in proc.stdout.splitlines()) == SIZES["test"]
