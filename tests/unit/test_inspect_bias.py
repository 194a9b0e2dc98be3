"""Bias inspection reads any variant's checkpoint through the contract."""

import argparse

import pytest
import torch

from fairseq_speaker.analysis.inspect_bias import BiasInspection, has_something_to_inspect
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY
from fairseq_speaker.tasks.speaker_translation import SPEAKER_TOKEN
from tests.helpers import make_model, make_task, variant_options

VARIANTS = sorted(SPEAKER_BIAS_REGISTRY) + ["fact+topic"]
SPEAKERS = ["ann", "bob", "cy", "dee"]


def save_checkpoint(tmp_path, model, task, name, speaker_token=False, as_namespace=False):
    """A checkpoint shaped as fairseq writes it, and the target dictionary (without speaker tokens)."""
    words = [task.target_dictionary[i] for i in range(task.target_dictionary.nspecial, len(task.target_dictionary))]
    if speaker_token:
        words = words[: len(words) - len(SPEAKERS)]
    (tmp_path / "dict.fr.txt").write_text("".join(f"{w} 1\n" for w in words), encoding="utf-8")
    options = dict(variant_options(name, task), speaker_bias=name)
    state = {
        "cfg": {"model": argparse.Namespace(**options) if as_namespace else options, "task": {"target_lang": "fr"}},
        "task_state": {"speaker_dictionary": {"names": SPEAKERS, "counts": [1] * len(SPEAKERS)},
                       "speaker_token": speaker_token},
        "model": model.state_dict(),
    }
    torch.save(state, tmp_path / "checkpoint.pt")
    return str(tmp_path / "checkpoint.pt"), str(tmp_path / "dict.fr.txt")


@pytest.mark.parametrize("family", ["lstm", "transformer"])
@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_is_read_through_the_contract(tmp_path, name, family):
    task = make_task(num_speakers=len(SPEAKERS), num_words=10)
    model = make_model(name, task=task, family=family)
    checkpoint, dictionary = save_checkpoint(tmp_path, model, task, name, as_namespace=family == "transformer")
    bias = model.speaker_bias
    if not bias.speaker_parameters() and not bias.vocabulary_vectors():
        assert not has_something_to_inspect(checkpoint)
        with pytest.raises(ValueError, match="nothing to inspect"):
            BiasInspection.from_checkpoint(checkpoint, dictionary)
        return
    assert has_something_to_inspect(checkpoint)
    inspection = BiasInspection.from_checkpoint(checkpoint, dictionary)
    assert inspection.variant == name and inspection.has_speakers == bool(bias.speaker_parameters())
    if inspection.has_speakers:
        with torch.no_grad():
            expected = bias(torch.tensor([2]))[0]
        raised, lowered = inspection.top_words("cy", k=3)
        real = torch.arange(len(expected)) >= task.target_dictionary.nspecial
        top = expected.masked_fill(~real, float("-inf")).topk(3)
        assert [w for w, _ in raised] == [task.target_dictionary[int(i)] for i in top.indices]
        assert raised[0][1] == pytest.approx(float(top.values[0]), abs=1e-5)
        assert lowered[0][1] == pytest.approx(float(expected.masked_fill(~real, float("inf")).min()), abs=1e-5)
        vectors = torch.nn.functional.normalize(bias.speaker_vectors(), dim=1)
        cosine = vectors @ vectors[0]
        cosine[0] = float("-inf")
        assert inspection.nearest("ann", k=1)[0][0] == SPEAKERS[int(cosine.argmax())]
        assert inspection.projection().shape == (len(SPEAKERS), 2)
        with pytest.raises(ValueError, match="speaker 'zoe' is not among the model's 4 speakers"):
            inspection.top_words("zoe")
    for label, columns in inspection.vocabulary_vector_words(k=2).items():
        values = bias.vocabulary_vectors()[label]
        assert len(columns) == values.size(1)
        best = values[task.target_dictionary.nspecial:, 0].argmax() + task.target_dictionary.nspecial
        assert columns[0][0][0][0] == task.target_dictionary[int(best)]


def test_a_doctored_full_bias_shows_the_words_it_was_given(tmp_path):
    task = make_task(num_speakers=len(SPEAKERS), num_words=10)
    model = make_model("full", task=task, randomize_bias=False)
    d = task.target_dictionary
    with torch.no_grad():
        model.speaker_bias.weight[0, d.index("w7")] = 3.0
        model.speaker_bias.weight[0, d.index("w2")] = -2.0
        model.speaker_bias.weight[0, d.eos()] = 9.0  # a special symbol: never listed
        model.speaker_bias.weight[1] = model.speaker_bias.weight[0] * 0.5
        model.speaker_bias.weight[2, d.index("w2")] = 3.0
    inspection = BiasInspection.from_checkpoint(*save_checkpoint(tmp_path, model, task, "full"))
    raised, lowered = inspection.top_words("ann", k=2)
    assert raised[0] == ("w7", 3.0) and lowered[0] == ("w2", -2.0)
    assert inspection.nearest("ann", k=1)[0][0] == "bob"
    assert inspection.speaker_vector_label == "bias vectors"


def test_speaker_tokens_are_in_the_word_list_and_a_wrong_dictionary_is_refused(tmp_path):
    task = make_task(num_speakers=len(SPEAKERS), num_words=10)
    for name in SPEAKERS:
        task.target_dictionary.add_symbol(SPEAKER_TOKEN.format(name))
    model = make_model("fact", task=task)
    checkpoint, dictionary = save_checkpoint(tmp_path, model, task, "fact", speaker_token=True)
    inspection = BiasInspection.from_checkpoint(checkpoint, dictionary)
    assert inspection.words[-len(SPEAKERS):] == [SPEAKER_TOKEN.format(n) for n in SPEAKERS]
    assert not any(w.startswith("<spk:") for w, _ in inspection.top_words("ann", k=20)[0])
    (tmp_path / "other.txt").write_text("one 1\n")
    with pytest.raises(ValueError, match="has 9 words but .* was trained with"):
        BiasInspection.from_checkpoint(checkpoint, str(tmp_path / "other.txt"))
