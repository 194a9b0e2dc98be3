"""Bias inspection reads what a checkpoint's speaker biases favour."""

import pytest
import torch

from fairseq_speaker.analysis.inspect_bias import BiasInspection

WORDS = ["chat", "chien", "maison", "voiture", "médicaments", "drogues"]
SPEAKERS = ["ann", "bob", "cy", "dee"]


def checkpoint(tmp_path, variant, params, speaker_token=False):
    (tmp_path / "dict.fr.txt").write_text("".join(f"{w} 1\n" for w in WORDS), encoding="utf-8")
    vocab = 4 + len(WORDS) + (len(SPEAKERS) if speaker_token else 0)
    state = {
        "cfg": {"model": {"speaker_bias": variant}, "task": {"target_lang": "fr"}},
        "task_state": {"speaker_dictionary": {"names": SPEAKERS, "counts": [1] * 4}, "speaker_token": speaker_token},
        "model": {"decoder.output_bias": torch.zeros(vocab), **params(vocab)},
    }
    torch.save(state, tmp_path / "checkpoint.pt")
    return str(tmp_path / "checkpoint.pt"), str(tmp_path / "dict.fr.txt")


def test_full_bias_words_and_neighbours(tmp_path):
    def params(vocab):
        weight = torch.zeros(len(SPEAKERS), vocab)
        weight[0, 4 + WORDS.index("médicaments")] = 3.0
        weight[0, 4 + WORDS.index("drogues")] = -2.0
        weight[0, 0] = 9.0  # a special symbol: never listed
        weight[1] = weight[0] * 0.5
        weight[2, 4 + WORDS.index("drogues")] = 3.0
        weight[3, 4 + WORDS.index("chat")] = 1.0
        return {"decoder.speaker_bias.weight": weight}

    inspection = BiasInspection.from_checkpoint(*checkpoint(tmp_path, "full", params))
    raised, lowered = inspection.top_words("ann", k=2)
    assert raised[0] == ("médicaments", 3.0)
    assert lowered[0] == ("drogues", -2.0)
    assert inspection.nearest("ann", k=1)[0][0] == "bob"
    assert inspection.projection().shape == (4, 2)
    with pytest.raises(ValueError, match="speaker 'zoe' is not among the model's 4 speakers"):
        inspection.top_words("zoe")


def test_fact_bias_shared_vectors_and_mixture_weights(tmp_path):
    def params(vocab):
        shared = torch.zeros(vocab, 2)
        shared[4 + WORDS.index("chien"), 0] = 2.0
        shared[4 + WORDS.index("voiture"), 1] = 2.0
        weights = torch.tensor([[1.0, 0.0], [0.9, 0.1], [0.0, 1.0], [-1.0, 0.0]])
        return {"decoder.speaker_bias.speaker_weights": weights, "decoder.speaker_bias.shared_biases": shared}

    inspection = BiasInspection.from_checkpoint(*checkpoint(tmp_path, "fact", params, speaker_token=True))
    assert len(inspection.words) == 4 + len(WORDS) + len(SPEAKERS)  # the spk_token symbols are listed too
    vectors = inspection.shared_vector_words(k=1)
    assert [up[0][0] for up, _ in vectors] == ["chien", "voiture"]
    assert inspection.top_words("cy", k=1)[0][0][0] == "voiture"
    assert inspection.top_words("dee", k=1)[1][0][0] == "chien"  # a negative weight lowers the word
    assert [name for name, _ in inspection.nearest("ann", k=2)] == ["bob", "cy"]


def test_mismatched_dictionary_and_baseline_checkpoint(tmp_path):
    path, dictionary = checkpoint(tmp_path, "full", lambda v: {"decoder.speaker_bias.weight": torch.zeros(4, v)})
    (tmp_path / "other.txt").write_text("one 1\n")
    with pytest.raises(ValueError, match="has 5 words but .* was trained with 10"):
        BiasInspection.from_checkpoint(path, str(tmp_path / "other.txt"))
    path, dictionary = checkpoint(tmp_path, "none", lambda v: {})
    with pytest.raises(ValueError, match="no speaker bias to inspect"):
        BiasInspection.from_checkpoint(path, dictionary)
