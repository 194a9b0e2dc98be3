"""Bias inspection and the report's inspection section read any variant's checkpoint through the contract."""

import argparse
import re

import pytest
import torch
from fairseq.models import MODEL_REGISTRY

from fairseq_speaker.analysis import report
from fairseq_speaker.analysis.inspect_bias import BiasInspection, has_something_to_inspect
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY
from fairseq_speaker.tasks.speaker_translation import SPEAKER_TOKEN
from fairseq_speaker.models import get_family
from tests.helpers import FAMILIES, make_model, make_task, refused, variant_options

VARIANTS = sorted(SPEAKER_BIAS_REGISTRY) + ["fact+topic", "fact+hyper_lhuc"]
SPEAKERS = ["ann", "bob", "cy", "dee"]


def save_checkpoint(tmp_path, model, task, name, speaker_token=False, as_namespace=False, file="checkpoint.pt",
                    **options):
    """A checkpoint shaped as fairseq writes it, and the target dictionary (without speaker tokens)."""
    dictionary = tmp_path / "dict.fr.txt"
    words = [task.target_dictionary[i] for i in range(task.target_dictionary.nspecial, len(task.target_dictionary))]
    if speaker_token:
        words = words[: len(words) - len(SPEAKERS)]
    dictionary.write_text("".join(f"{w} 1\n" for w in words), encoding="utf-8")
    options = dict(variant_options(name, task), speaker_bias=name, **options)
    state = {
        "cfg": {"model": argparse.Namespace(**options) if as_namespace else options, "task": {"target_lang": "fr"}},
        "task_state": {"speaker_dictionary": {"names": SPEAKERS, "counts": [1] * len(SPEAKERS)},
                       "speaker_token": speaker_token},
        "model": model.state_dict(),
    }
    torch.save(state, tmp_path / file)
    return str(tmp_path / file), str(dictionary)


def real_words(values, dictionary):
    """``values [V]`` with fairseq's special symbols out of reach of top-k from either end."""
    real = torch.arange(len(values)) >= dictionary.nspecial
    return values.masked_fill(~real, float("-inf")), values.masked_fill(~real, float("inf"))


def extremes(values, dictionary, k):
    up, down = real_words(values, dictionary)
    return ([dictionary[int(i)] for i in up.topk(k).indices],
            [dictionary[int(i)] for i in down.topk(k, largest=False).indices])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", VARIANTS)
def test_every_variant_is_read_through_the_contract(tmp_path, name, family):
    task = make_task(num_speakers=len(SPEAKERS), num_words=10)
    d = task.target_dictionary
    model = make_model(name, task=task, family=family)
    # a model with a dataclass saves its options as a dict, an argparse model (the transformer) as a Namespace
    argparse_model = getattr(MODEL_REGISTRY[get_family(family).model], "__dataclass", None) is None
    checkpoint, dictionary = save_checkpoint(tmp_path, model, task, name, as_namespace=argparse_model)
    bias = model.decoder.speaker_bias
    if not bias.speaker_parameters() and not bias.vocabulary_vectors():
        assert not has_something_to_inspect(checkpoint)
        with pytest.raises(ValueError, match=f"{checkpoint}: a '{name}' model .*nothing to inspect"):
            BiasInspection.from_checkpoint(checkpoint, dictionary)
        return
    assert has_something_to_inspect(checkpoint)
    inspection = BiasInspection.from_checkpoint(checkpoint, dictionary)
    assert inspection.variant == name and inspection.words == [d[i] for i in range(len(d))]
    assert inspection.has_speakers == bool(bias.speaker_parameters())
    assert inspection.has_speaker_vectors == (bias.speaker_vectors() is not None)
    assert inspection.has_bias == bias.acts_on_output
    if inspection.has_speakers and not inspection.has_bias:  # a decoder state: no word of its own to read
        with pytest.raises(ValueError, match=f"the '{name}' bias gives speakers no bias of their own"):
            inspection.top_words("cy", k=3)
    if inspection.has_speakers and inspection.has_bias:
        with torch.no_grad():  # the model's own bias for speaker 2, without a source sentence
            expected = bias(torch.tensor([2]))[0]
        raised, lowered = inspection.top_words("cy", k=3)
        assert ([w for w, _ in raised], [w for w, _ in lowered]) == extremes(expected, d, 3)
        up, down = real_words(expected, d)
        assert [v for _, v in raised] == pytest.approx(up.topk(3).values.tolist(), abs=1e-5)
        assert [v for _, v in lowered] == pytest.approx(down.topk(3, largest=False).values.tolist(), abs=1e-5)
        with pytest.raises(ValueError, match="speaker 'zoe' is not among the model's 4 speakers"):
            inspection.top_words("zoe")
    if inspection.has_speaker_vectors:
        vectors = torch.nn.functional.normalize(bias.speaker_vectors().float(), dim=1)
        cosine = vectors @ vectors[0]
        cosine[0] = float("-inf")
        nearest = inspection.nearest("ann", k=3)
        assert [s for s, _ in nearest] == [SPEAKERS[int(i)] for i in cosine.topk(3).indices]
        assert [c for _, c in nearest] == pytest.approx(cosine.topk(3).values.tolist(), abs=1e-5)
        assert inspection.projection().shape == (len(SPEAKERS), 2)
    expected_vectors = bias.vocabulary_vectors()
    words = inspection.vocabulary_vector_words(k=2)
    assert list(words) == list(expected_vectors)
    for label, columns in words.items():
        values = expected_vectors[label]
        assert len(columns) == values.size(1)
        for j, (up, down) in enumerate(columns):
            assert ([w for w, _ in up], [w for w, _ in down]) == extremes(values[:, j], d, 2), (label, j)


@pytest.mark.parametrize("name", VARIANTS)
def test_the_report_section_follows_the_contract(tmp_path, name):
    task = make_task(num_speakers=len(SPEAKERS), num_words=10)
    model = make_model(name, task=task)
    bias = model.decoder.speaker_bias
    if not bias.speaker_parameters() and not bias.vocabulary_vectors():
        return
    inspection = BiasInspection.from_checkpoint(*save_checkpoint(tmp_path, model, task, name))
    figures = report.inspect_speakers(inspection, ["bob"], 3) if inspection.has_speakers else {}
    text = "\n".join(report.inspection_section("sys", inspection, figures, 3, "out/speakers_sys.png"))
    assert text.startswith(f"## What the speaker bias learned: sys (`--speaker-bias {name}`)")
    assert ("### Speaker bob" in text) == inspection.has_speakers
    nearest = f"- nearest speakers (cosine of their {inspection.speaker_vector_label}): "
    assert (nearest in text) == inspection.has_speaker_vectors
    for label, values in bias.vocabulary_vectors().items():
        table = text.split(f"### {label[0].upper() + label[1:]}\n")[1].split("\n\n")[0]
        assert table.count("\n| ") == 1 + values.size(1)  # the header, then one row a vector
    assert ("- raises: " in text) == (inspection.has_speakers and inspection.has_bias)
    if inspection.has_speakers and inspection.has_bias:
        raised = figures["bob"]["raises"]
        assert f"- raises: {', '.join(f'{w} ({v:+.2f})' for w, v in raised)}" in text


def test_at_most_twenty_vectors_of_a_kind_are_listed(tmp_path):
    task = make_task(num_speakers=len(SPEAKERS), num_words=30)
    model = make_model("fact", task=task, speaker_rank=25)
    inspection = BiasInspection.from_checkpoint(*save_checkpoint(tmp_path, model, task, "fact", speaker_rank=25))
    (label, columns), = inspection.vocabulary_vector_words(2).items()
    assert len(columns) == 25
    text = "\n".join(report.inspection_section("sys", inspection, {}, 2, None))
    assert f"### {label[0].upper() + label[1:]} (the first 20 of 25)" in text
    assert "| 19 |" in text and "| 20 |" not in text and "![" not in text


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


def test_the_target_language_comes_from_the_checkpoint_or_the_data_files(tmp_path):
    task = make_task(num_speakers=len(SPEAKERS), num_words=10)
    model = make_model("full", task=task)
    checkpoint, _ = save_checkpoint(tmp_path, model, task, "full")
    assert BiasInspection.from_checkpoint(checkpoint, data=str(tmp_path)).words[-1] == task.target_dictionary[-1]
    state = torch.load(checkpoint, weights_only=True)
    state["cfg"]["task"]["target_lang"] = None  # trained without --target-lang
    torch.save(state, checkpoint)
    with pytest.raises(ValueError, match="cannot tell the target language"):
        BiasInspection.from_checkpoint(checkpoint, data=str(tmp_path))
    (tmp_path / "train.en-fr.fr.idx").write_bytes(b"")  # what fairseq-preprocess writes: the pair is in its name
    assert BiasInspection.from_checkpoint(checkpoint, data=str(tmp_path)).speakers == SPEAKERS


def test_the_report_checks_checkpoints_and_speakers_before_anything_else(tmp_path, capsys):
    task = make_task(num_speakers=len(SPEAKERS), num_words=10)
    full, _ = save_checkpoint(tmp_path, make_model("full", task=task), task, "full", file="full.pt")
    none, _ = save_checkpoint(tmp_path, make_model("none", task=task), task, "none", file="none.pt")
    references = tmp_path / "test.fr"
    references.write_text("w1 w2\n")
    out = tmp_path / "report"
    command = ["--out", str(out), "--references", str(references), "--system", f"ref={references}",
               "--data", str(tmp_path)]
    assert re.search(r"--checkpoint full: speaker\(s\) 'zoe' not among the model's 4 speakers \(ann, bob, cy, dee\)",
                     refused(report.main, command + ["--checkpoint", f"full={full}", "--speaker", "bob", "--speaker",
                                                     "zoe"], capsys))
    assert re.search("--checkpoint base: .*a 'none' model .*nothing to inspect",
                     refused(report.main, command + ["--checkpoint", f"base={none}"], capsys))
    assert not out.exists()
