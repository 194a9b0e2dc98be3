"""The topic model of the ``topic`` variant: scikit-learn's LDA, its inference redone in torch."""

import argparse
import os

import numpy as np
import pytest
import torch
from fairseq.data.data_utils import collate_tokens

from fairseq_speaker.data import SpeakerDataError
from fairseq_speaker.modules.speaker_bias import build_speaker_bias
from fairseq_speaker.topic_model import TopicModel, bag_of_words, fit, topic_mixture
from tests.helpers import build_bias, make_dictionary, make_task


def corpus(dictionary, n=200, seed=0):
    """Sentences from two clear topics: the first half of the words, or the second half."""
    rng = np.random.default_rng(seed)
    first, words = dictionary.nspecial, len(dictionary)
    half = (first + words) // 2
    sentences = []
    for i in range(n):
        low, high = (first, half) if i % 2 else (half, words)
        sentences.append(np.append(rng.integers(low, high, rng.integers(3, 9)), dictionary.eos()))
    return sentences


@pytest.fixture(scope="module")
def fitted():
    dictionary = make_dictionary(20)
    sentences = corpus(dictionary)
    model, lda = fit(sentences, dictionary, num_topics=3, seed=1)
    return dictionary, sentences, model, lda


def test_torch_inference_is_scikit_learns_transform(fitted):
    dictionary, sentences, model, lda = fitted
    expected = lda.transform(bag_of_words(sentences, len(dictionary), dictionary.nspecial))
    tokens = collate_tokens([torch.as_tensor(s) for s in sentences], dictionary.pad(), left_pad=True)
    got = topic_mixture(tokens, torch.from_numpy(model.exp_topic_word), model.doc_topic_prior,
                        model.max_doc_update_iter, model.mean_change_tol, model.nspecial)
    # the model file keeps exp(E[log beta]) in float32: agreement to a few 1e-5
    assert np.abs(got.numpy() - expected).max() < 1e-4
    assert torch.allclose(got.sum(1), torch.ones(len(sentences), dtype=got.dtype))


def test_padding_special_symbols_and_word_order_do_not_matter(fitted):
    dictionary, sentences, model, _ = fitted
    args = (torch.from_numpy(model.exp_topic_word), model.doc_topic_prior, model.max_doc_update_iter,
            model.mean_change_tol, model.nspecial)
    sentence = torch.as_tensor(sentences[3])
    alone = topic_mixture(sentence.unsqueeze(0), *args)
    padded = torch.cat([torch.full((4,), dictionary.pad()), torch.tensor([dictionary.unk()]), sentence.flip(0)])
    assert torch.allclose(topic_mixture(padded.unsqueeze(0), *args), alone, atol=1e-7)


def test_the_two_topics_of_the_corpus_are_found(fitted):
    dictionary, sentences, model, lda = fitted
    theta = lda.transform(bag_of_words(sentences, len(dictionary), dictionary.nspecial))
    odd, even = theta[1::2].mean(0), theta[::2].mean(0)
    assert np.abs(odd - even).max() > 0.5  # the halves of the vocabulary get different topics


def test_save_load_round_trip_and_refusals(fitted, tmp_path):
    _, _, model, _ = fitted
    path = str(tmp_path / "topics.npz")
    model.save(path)
    loaded = TopicModel.load(path)
    assert np.array_equal(loaded.exp_topic_word, model.exp_topic_word)
    assert (loaded.doc_topic_prior, loaded.nspecial, loaded.dictionary_hash) == \
        (model.doc_topic_prior, model.nspecial, model.dictionary_hash)
    with pytest.raises(SpeakerDataError, match="topic model not found: expected .*nope.npz"):
        TopicModel.load(str(tmp_path / "nope.npz"))
    (tmp_path / "junk.npz").write_bytes(b"not numpy")
    with pytest.raises(SpeakerDataError, match="junk.npz: not a topic model"):
        TopicModel.load(str(tmp_path / "junk.npz"))


def test_the_topic_variant_refuses_another_vocabulary_and_needs_a_model(fitted, tmp_path):
    _, _, model, _ = fitted
    path = str(tmp_path / "topics.npz")
    model.save(path)
    task = make_task(num_words=12)  # not the 20-word dictionary the model was fitted on
    with pytest.raises(SpeakerDataError, match="fitted on another source dictionary"):
        build_speaker_bias("topic", argparse.Namespace(topic_model=path), task.speaker_dictionary,
                           task.target_dictionary, task.source_dictionary)
    with pytest.raises(SpeakerDataError, match="needs --topic-model FILE"):
        build_speaker_bias("topic", argparse.Namespace(), task.speaker_dictionary, task.target_dictionary)


def test_a_checkpoint_brings_its_topic_model_when_the_file_is_gone(tmp_path):
    task = make_task()
    trained = build_bias("topic", task)
    source = {"source_tokens": [torch.tensor([[5, 6, 7, 2], [8, 9, 9, 2]])]}
    expected = trained(None, source)
    gone = str(tmp_path / "moved.npz")
    assert not os.path.exists(gone)
    fresh = build_speaker_bias("topic", argparse.Namespace(topic_model=gone), task.speaker_dictionary,
                               task.target_dictionary, task.source_dictionary)
    with pytest.raises(SpeakerDataError, match="not found and no checkpoint gave one"):
        fresh(None, source)
    fresh.load_state_dict(trained.state_dict())
    assert torch.equal(fresh(None, source), expected)


@pytest.mark.parametrize("args,message", [
    (["/nonexistent", "--out", "x.npz"], "data directory not found: /nonexistent"),
    (["{data}", "--source-lang", "de", "--target-lang", "en", "--out", "x.npz"], "dict.de.txt (is --source-lang right?)"),
    (["{data}", "--out", "/nonexistent/x.npz"], "the folder /nonexistent does not exist"),
])
def test_the_command_says_what_is_wrong(tmp_path, args, message, capsys):
    from fairseq_speaker.topic_model import main

    (tmp_path / "dict.en.txt").write_text("a 1\n")
    (tmp_path / "dict.fr.txt").write_text("b 1\n")
    with pytest.raises(SystemExit) as ended:
        main([a.format(data=tmp_path) for a in args])
    assert ended.value.code == 2  # a user error (fairseq_speaker/errors.py)
    assert message in capsys.readouterr().err.strip().splitlines()[-1]
