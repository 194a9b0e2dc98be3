"""Speaker vectors files (fairseq_speaker.onboarding.vectors) without training: writing, reading, checking."""

import json
import os

import numpy as np
import pytest
import torch

from fairseq_speaker.data import dictionary_hash
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY
from fairseq_speaker.onboarding.checkpoint import OnboardingError
from fairseq_speaker.onboarding.vectors_compat import check_compatible, warn_far_outside
from fairseq_speaker.onboarding.vectors_file import (
    FORMAT,
    load_speaker_vectors,
    save_speaker_vectors,
    shared_state_hash,
    write_npz,
)
from tests.helpers import build_bias, make_task


def named_bias(name: str, task, **overrides):
    bias = build_bias(name, task, **overrides)
    bias.speaker_names = list(task.speaker_dictionary.names)
    return bias


@pytest.fixture
def task():
    return make_task(num_speakers=4)


@pytest.fixture
def fact(task):
    return named_bias("fact", task)


@pytest.fixture
def exported(fact, task, tmp_path):
    path = str(tmp_path / "speakers.npz")
    save_speaker_vectors(path, fact, ["spk2", "spk0"], task.target_dictionary, model_label="model.pt")
    return path


def rewrite(path: str, out: str, names=None, rows=None, **meta_changes) -> str:
    """A copy of a vectors file with some of its contents changed (written as the exporter writes)."""
    vectors = load_speaker_vectors(path)
    write_npz(out, vectors.names if names is None else names, vectors.rows if rows is None else rows,
              {**vectors.meta, **meta_changes})
    return out


def test_round_trip(fact, task, exported, tmp_path):
    with np.load(exported, allow_pickle=False) as f:  # plain numpy, no pickle
        assert sorted(f.files) == ["meta", "names", "param/speaker_weights"]
        assert f["param/speaker_weights"].dtype == np.float32
        meta = json.loads(str(f["meta"]))
    assert meta["format"] == FORMAT and meta["format_version"] == 1
    assert meta["variant"] == "fact" and meta["row_shapes"] == {"speaker_weights": [3]}
    assert meta["target_dictionary_hash"] == dictionary_hash(task.target_dictionary)
    assert meta["target_dictionary_size"] == len(task.target_dictionary)
    assert meta["model"] == "model.pt"
    assert os.listdir(tmp_path) == ["speakers.npz"]  # no temporary file left

    vectors = load_speaker_vectors(exported)
    assert vectors.names == ["spk2", "spk0"]
    expected = fact.export_speakers([2, 0])["speaker_weights"]
    assert torch.equal(vectors.tensors()["speaker_weights"], expected)
    assert torch.equal(vectors.tensors(["spk0"])["speaker_weights"], expected[1:])
    check_compatible(vectors, fact, task.target_dictionary)


def test_summary_and_path_without_suffix(fact, task, tmp_path):
    path = str(tmp_path / "speakers.vec")
    summary = save_speaker_vectors(path, fact, ["spk1"], task.target_dictionary)
    assert os.path.isfile(path)  # written where asked, no ".npz" appended
    assert (summary.speakers, summary.parameters_per_speaker, summary.bytes_per_speaker) == (1, 3, 12)
    assert summary.file_bytes == os.path.getsize(path)


def test_combined_variant(task, tmp_path):
    bias = named_bias("fact+full", task)
    path = str(tmp_path / "sum.npz")
    save_speaker_vectors(path, bias, ["spk3"], task.target_dictionary)
    vectors = load_speaker_vectors(path)
    assert vectors.meta["variant"] == "sum" and vectors.meta["variant_spelling"] == "fact+full"
    assert set(vectors.rows) == {"parts.fact.speaker_weights", "parts.full.weight"}
    check_compatible(vectors, bias, task.target_dictionary)
    with pytest.raises(OnboardingError, match="'fact\\+full' speaker bias, but the model has a 'fact' one"):
        check_compatible(vectors, named_bias("fact", task), task.target_dictionary)


def test_export_refuses_unknown_and_repeated_speakers(fact, task, tmp_path):
    path = str(tmp_path / "x.npz")
    with pytest.raises(OnboardingError, match="model.pt: no speaker\\(s\\) 'nobody'"):
        save_speaker_vectors(path, fact, ["spk0", "nobody"], task.target_dictionary, model_label="model.pt")
    with pytest.raises(OnboardingError, match="'spk0' named twice"):
        save_speaker_vectors(path, fact, ["spk0", "spk0"], task.target_dictionary)
    with pytest.raises(OnboardingError, match="the folder .* does not exist"):
        save_speaker_vectors(str(tmp_path / "no" / "x.npz"), fact, ["spk0"], task.target_dictionary)
    assert not os.path.exists(path)


def test_check_compatible_refusals(fact, task, exported, tmp_path):
    vectors = load_speaker_vectors(exported)
    with pytest.raises(OnboardingError, match="speakers.npz: speaker vectors of a 'fact' speaker bias, but m.pt "
                                              "has a 'full' one"):
        check_compatible(vectors, named_bias("full", task), task.target_dictionary, where="m.pt")
    with pytest.raises(OnboardingError, match=r"speakers.npz: speaker parameters speaker_weights \(3,\), but the "
                                              r"model has speaker_weights \(2,\)"):
        check_compatible(vectors, named_bias("fact", task, speaker_rank=2), task.target_dictionary)
    other = make_task(num_speakers=4, num_words=13)
    with pytest.raises(OnboardingError, match="speakers.npz: written for another target dictionary "
                                              "\\(19 words, hash [0-9a-f]{12}\\) than the model's \\(20 words"):
        check_compatible(vectors, named_bias("fact", other), other.target_dictionary)
    full_path = str(tmp_path / "full.npz")  # the dictionary is what differs, not (only) the rows' size
    save_speaker_vectors(full_path, named_bias("full", task), ["spk0"], task.target_dictionary)
    with pytest.raises(OnboardingError, match="full.npz: written for another target dictionary"):
        check_compatible(load_speaker_vectors(full_path), named_bias("full", other), other.target_dictionary)
    with torch.no_grad():
        fact.shared_biases[0, 0] += 1e-3
    with pytest.raises(OnboardingError, match="speakers.npz: .*shared speaker-bias parameters differ"):
        check_compatible(vectors, fact, task.target_dictionary)


def _has_rows_and_shared_parameters(name: str) -> bool:
    bias = build_bias(name, make_task(), randomize_parameters=False)
    return bool(bias.speaker_parameters()) and bool(bias.shared_parameters())


#: the variants whose speakers' rows sit beside shared parameters (asked of the contract, not named)
ROWS_AND_SHARED = [name for name in SPEAKER_BIAS_REGISTRY if _has_rows_and_shared_parameters(name)]


@pytest.mark.parametrize("name", ROWS_AND_SHARED)
def test_the_speakers_own_rows_do_not_enter_the_shared_hash(name, task, tmp_path):
    bias = named_bias(name, task)
    path = str(tmp_path / "speakers.npz")
    save_speaker_vectors(path, bias, ["spk1"], task.target_dictionary)
    before = shared_state_hash(bias)
    with torch.no_grad():
        for rows in bias.speaker_parameters().values():
            rows.add_(1.0)
    assert shared_state_hash(bias) == before
    check_compatible(load_speaker_vectors(path), bias, task.target_dictionary)  # the file is still accepted
    with torch.no_grad():
        for shared in bias.shared_parameters().values():
            shared.view(-1)[0] += 1e-3
    assert shared_state_hash(bias) != before


def test_load_refusals(exported, tmp_path):
    missing = str(tmp_path / "missing.npz")
    with pytest.raises(OnboardingError, match=f"speaker vectors not found: {missing}"):
        load_speaker_vectors(missing)

    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"garbage \x00\xff" * 30)
    with pytest.raises(OnboardingError, match="garbage.npz: not a .npz archive"):
        load_speaker_vectors(str(garbage))
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(open(exported, "rb").read()[:200])
    with pytest.raises(OnboardingError, match="truncated.npz: not a .npz archive"):
        load_speaker_vectors(str(truncated))
    array = str(tmp_path / "array.npy")
    np.save(array, np.zeros(3))
    with pytest.raises(OnboardingError, match="array.npy: not a speaker vectors file"):
        load_speaker_vectors(array)
    other = str(tmp_path / "other.npz")
    np.savez(other, names=np.array(["a"]), meta=np.array(json.dumps({"format": "something else"})))
    with pytest.raises(OnboardingError, match="other.npz: not a speaker vectors file"):
        load_speaker_vectors(other)

    newer = rewrite(exported, str(tmp_path / "newer.npz"), format_version=2)
    with pytest.raises(OnboardingError, match="newer.npz: speaker vectors format 2, newer than"):
        load_speaker_vectors(newer)
    twice = rewrite(exported, str(tmp_path / "twice.npz"), names=["spk2", "spk2"])
    with pytest.raises(OnboardingError, match="twice.npz: speaker\\(s\\) 'spk2' appear twice"):
        load_speaker_vectors(twice)
    short = rewrite(exported, str(tmp_path / "short.npz"), names=["spk2"])
    with pytest.raises(OnboardingError, match=r"short.npz: parameter 'speaker_weights' has shape \(2, 3\) \(float32\), "
                                              r"expected \(1, 3\)"):
        load_speaker_vectors(short)
    wide = rewrite(exported, str(tmp_path / "wide.npz"), row_shapes={"speaker_weights": [4]})
    with pytest.raises(OnboardingError, match=r"wide.npz: parameter 'speaker_weights' .* expected \(2, 4\)"):
        load_speaker_vectors(wide)
    renamed = rewrite(exported, str(tmp_path / "renamed.npz"), row_shapes={"weight": [3]})
    for bad_shape in (3, ["3"], None):
        odd = rewrite(exported, str(tmp_path / "odd.npz"), row_shapes={"speaker_weights": bad_shape})
        with pytest.raises(OnboardingError, match="odd.npz: .*the file is damaged"):
            load_speaker_vectors(odd)
    with pytest.raises(OnboardingError, match="renamed.npz: holds parameters \\['speaker_weights'\\] but its "
                                              "metadata describes \\['weight'\\]"):
        load_speaker_vectors(renamed)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_rows_are_refused_naming_the_file_and_speaker(exported, tmp_path, bad):
    vectors = load_speaker_vectors(exported)
    rows = {k: v.copy() for k, v in vectors.rows.items()}
    rows["speaker_weights"][1, 2] = bad
    path = rewrite(exported, str(tmp_path / "bad.npz"), rows=rows)
    with pytest.raises(OnboardingError, match=r"bad.npz: parameter 'speaker_weights' of speaker\(s\) 'spk0' holds "
                                              r"NaN or infinite values"):
        load_speaker_vectors(path)


@pytest.mark.parametrize("big", [1e300, 3.5e38, float(np.finfo(np.float32).max), 1e20])
def test_float64_rows_beyond_float32s_range_are_refused(exported, tmp_path, big):
    """Finite in the file's float64, infinite in the model's float32: imported, every translation as the speaker
    ended in an AssertionError of fairseq's search."""
    with np.load(exported, allow_pickle=False) as f:  # written by another program: float64, not cast to float32
        arrays = {key: f[key] for key in f.files}
    arrays["param/speaker_weights"] = arrays["param/speaker_weights"].astype(np.float64)
    arrays["param/speaker_weights"][1, 2] = big
    path = str(tmp_path / "big.npz")
    np.savez(path, **arrays)
    with pytest.raises(OnboardingError, match=r"big.npz: parameter 'speaker_weights' of speaker\(s\) 'spk0' holds "
                                              r"NaN or infinite values, or values beyond float32's range"):
        load_speaker_vectors(path)


def test_rows_far_outside_the_models_range_are_reported(fact, exported, tmp_path, caplog):
    vectors = load_speaker_vectors(exported)
    assert warn_far_outside(vectors, fact) == []
    rows = {k: v.copy() for k, v in vectors.rows.items()}
    rows["speaker_weights"][0, 0] = 1e15
    huge = load_speaker_vectors(rewrite(exported, str(tmp_path / "huge.npz"), rows=rows))
    with caplog.at_level("WARNING"):
        assert warn_far_outside(huge, fact) == ["spk2"]
    assert "'spk2' have values over 100 times the largest" in caplog.text
