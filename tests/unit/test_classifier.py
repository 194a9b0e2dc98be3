"""The speaker classifier of Appendix C: it finds speakers when their words give them away, and only then."""

import random

from fairseq_speaker.analysis.classifier import NgramVocabulary, TrainedClassifier, train_classifier

SPEAKERS = ["ann", "bob", "cy", "dee", "eve"]
COMMON = "le la un une chat chien maison voit mange dort petit grand".split()


def sentences(n, telltale, seed):
    """Sentences of common words; with ``telltale``, each speaker also uses words of their own."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        speaker = SPEAKERS[i % len(SPEAKERS)]
        words = [rng.choice(COMMON) for _ in range(8)]
        if telltale:
            words[rng.randrange(8)] = f"{speaker}_word{rng.randrange(3)}"
        rows.append((" ".join(words), speaker))
    return [r[0] for r in rows], [r[1] for r in rows]


def test_obvious_speakers_are_recognized():
    text, speakers = sentences(1000, telltale=True, seed=1)
    classifier = train_classifier(text, speakers, epochs=20, progress=None)
    test_text, test_speakers = sentences(300, telltale=True, seed=2)
    assert classifier.accuracy(test_text, test_speakers) > 0.95


def test_indistinguishable_speakers_are_at_chance():
    text, speakers = sentences(1000, telltale=False, seed=1)
    classifier = train_classifier(text, speakers, epochs=20, progress=None)
    test_text, test_speakers = sentences(1000, telltale=False, seed=3)
    assert abs(classifier.accuracy(test_text, test_speakers) - 1 / len(SPEAKERS)) < 0.06


def test_unigrams_and_bigrams_and_unknown_ngrams():
    vocabulary = NgramVocabulary.build(["a b c", "a b"])
    assert set(vocabulary.index) == {"a", "b", "c", "a b", "b c"}
    ids = vocabulary.encode(["a b z", "z"])
    assert ids.shape == (2, 3) and ids[1].tolist() == [0, 0, 0]  # 'z', 'b z' unknown: padding only


def test_save_and_load(tmp_path):
    text, speakers = sentences(200, telltale=True, seed=1)
    classifier = train_classifier(text, speakers, epochs=2, progress=None)
    path = str(tmp_path / "classifier.pt")
    classifier.save(path)
    loaded = TrainedClassifier.load(path)
    assert loaded.predict(text[:50]) == classifier.predict(text[:50])
