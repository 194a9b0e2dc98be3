"""The toy corpus's oracles: what training makes knowable about each speaker's words; the Bayes limit."""

import itertools
import math
import os
import random
from fractions import Fraction
from typing import Dict, List, Tuple

import pytest

from fairseq_speaker.analysis.speaker_words import Trait, read_traits
from fairseq_speaker.toy.corpus import Styles, make_styles, read_styles, style_word, write_corpus
from fairseq_speaker.toy.demo import ceilings, format_table, parse_args
from fairseq_speaker.toy.oracle import BAYES, bayes_accuracy, onboarding_oracle, oracle_accuracy, oracle_rows
from fairseq_speaker.toy.posterior import SpeakerPosterior

DRUGS = Trait("profession", "médicaments", ("drogues", "produits"))
PILLS = Trait("profession", "comprimés", ("cachets", "pilules"))
TIRED = Trait("gender", "fatiguée", ("fatigué",))


def test_a_trait_shown_in_training_makes_its_other_words_knowable_to_the_first_oracle_only():
    train = (["ann", "bob"], [[DRUGS], [TIRED]])
    test = (["ann", "ann", "bob", "bob"], [[PILLS], [DRUGS], [DRUGS], [TIRED]])
    acc = oracle_accuracy(*train, *test)
    revealed, seen = acc["traits revealed"], acc["words seen"]
    # ann's profession is shown (drugs): both her profession words are knowable; bob's profession is not (1/3)
    assert revealed["profession"] == pytest.approx((1 + 1 + 1 / 3) / 3)
    # only the exact word ann said is known to the second oracle: pills is a guess
    assert seen["profession"] == pytest.approx((1 / 3 + 1 + 1 / 3) / 3)
    assert revealed["gender"] == seen["gender"] == 1.0
    assert revealed["all"] == pytest.approx((1 + 1 + 1 / 3 + 1) / 4)


def test_a_speaker_without_training_sentences_is_guessed():
    acc = oracle_accuracy(["ann"], [[TIRED]], ["zoe"], [[TIRED]])
    assert acc["traits revealed"]["all"] == acc["words seen"]["all"] == 0.5


def test_oracles_are_rows_of_the_demo_table():
    table = format_table(oracle_rows(oracle_accuracy(["ann"], [[TIRED]], ["ann"], [[TIRED]])))
    assert "| oracle: traits revealed | - | 100.0% |" in table
    with pytest.raises(ValueError):
        oracle_accuracy(["ann"], [], [], [])


# -- the Bayes oracle of the styles mode -----------------------------------------------------------------------


def tiny_styles(rng: random.Random) -> Styles:
    """2-3 styles over 3 phrases of 2-3 translations, a random prior and deviation rate."""
    items = {f"the {name}": tuple(f"le {name}{j}" for j in range(rng.choice([2, 3]))) for name in "abc"}
    table = [{item: rng.choice(options) for item, options in items.items()} for _ in range(rng.choice([2, 3]))]
    prior = [rng.uniform(0.2, 1.0) for _ in table]
    return Styles(items, table, rng.choice([0.05, 0.1, 0.3, 0.6]), [p / sum(prior) for p in prior])


def style_trait(styles: Styles, item: str, translation: str) -> Trait:
    return Trait("style", style_word(translation),
                 tuple(style_word(o) for o in styles.items[item] if o != translation))


def brute_force(styles: Styles, observed: List[Tuple[str, str]]):
    """The posterior over styles and the posterior predictive of every phrase, from every assignment of a style
    and, for each phrase, the style's translation or one of the others: each weighted by its prior probability,
    kept when it says every observed (phrase, translation)."""
    items = sorted(styles.items)
    style_mass = [0.0] * len(styles.table)
    word_mass = {item: {style_word(o): 0.0 for o in styles.items[item]} for item in items}
    d = styles.deviation
    for k, prior in enumerate(styles.prior):
        per_item = []
        for item in items:
            options = styles.items[item]
            per_item.append([(o, 1 - d if o == styles.table[k][item] else d / (len(options) - 1)) for o in options])
        for assignment in itertools.product(*per_item):
            choice = {item: o for item, (o, _) in zip(items, assignment)}
            weight = prior * math.prod(p for _, p in assignment)
            if all(choice[item] == o for item, o in observed):
                style_mass[k] += weight
                for item in items:
                    word = style_word(choice[item])
                    word_mass[item][word] += weight
    total = sum(style_mass)
    return ([m / total for m in style_mass],
            {item: {w: m / total for w, m in words.items()} for item, words in word_mass.items()})


def test_the_bayes_oracle_is_the_posterior_of_every_assignment_of_style_and_deviations():
    rng = random.Random(0)
    repeated = 0
    for case in range(60):
        styles = tiny_styles(rng)
        # a speaker drawn from the model says 2-4 style words, phrases drawn with replacement
        style = rng.choices(range(len(styles.table)), weights=styles.prior)[0]
        choice = {}
        for item, options in styles.items.items():
            mine = styles.table[style][item]
            choice[item] = rng.choice([o for o in options if o != mine]) if rng.random() < styles.deviation else mine
        said = [rng.choice(sorted(styles.items)) for _ in range(rng.randint(2, 4))]
        repeated += len(set(said)) < len(said)
        observed = [(item, choice[item]) for item in said]
        posterior = SpeakerPosterior(styles, [style_trait(styles, item, o) for item, o in observed])

        expected_styles, expected_words = brute_force(styles, observed)
        assert [float(q) for q in posterior.style_posterior()] == pytest.approx(expected_styles, abs=1e-9), case
        for item in styles.items:
            truth = choice[item]
            test_word = style_trait(styles, item, truth)
            predictive = posterior.predictive(test_word)
            assert {w: float(p) for w, p in predictive.items()} == pytest.approx(expected_words[item], abs=1e-9)
            best = max(expected_words[item].values())
            argmax = [w for w, p in expected_words[item].items() if p > best - 1e-12]
            decision = (style_word(truth) in argmax) / len(argmax)
            assert float(posterior.score(test_word)) == pytest.approx(decision, abs=1e-9)
            assert float(posterior.score(test_word, "posterior")) == pytest.approx(best, abs=1e-9)
    assert repeated >= 10  # one factor per phrase said, not one per sentence: repeated phrases tell them apart


def test_the_bayes_oracle_knows_a_phrase_the_speaker_said_and_splits_ties():
    styles = Styles({"the a": ("le a0", "le a1"), "the b": ("le b0", "le b1")},
                    [{"the a": "le a0", "the b": "le b0"}, {"the a": "le a1", "the b": "le b0"}], 0.1, [0.5, 0.5])
    a1, b1, b0 = style_trait(styles, "the a", "le a1"), style_trait(styles, "the b", "le b1"), \
        style_trait(styles, "the b", "le b0")
    nobody = SpeakerPosterior(styles)
    assert nobody.score(a1) == Fraction(1, 2) and nobody.score(a1, "posterior") == Fraction(1, 2)  # an exact tie
    assert nobody.score(b0) == 1 and nobody.score(b1) == 0  # both styles say b0
    assert nobody.score(b0, "posterior") == Fraction(9, 10)
    known = SpeakerPosterior(styles, [b1, b1])  # the speaker left both styles on b: that tells nothing of a
    assert known.score(b1) == 1 and known.score(a1) == Fraction(1, 2)
    assert known.style_posterior() == [Fraction(1, 2)] * 2
    with pytest.raises(ValueError, match="said both"):
        SpeakerPosterior(styles, [b1, b0])
    with pytest.raises(ValueError, match="no phrase of the styles model"):
        SpeakerPosterior(styles, [Trait("style", "médicaments", ("drogues",))])
    with pytest.raises(ValueError, match="score"):
        nobody.score(a1, "best")


@pytest.fixture(scope="module")
def styles_corpus(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("styles"))
    write_corpus(out, {"train": 2400, "test": 960}, num_speakers=240, seed=4, styles=6, deviation=0.2,
                 heldout_speakers=120, heldout_sentences=25)
    read = {split: (lines(out, f"{split}.spk"), read_traits(os.path.join(out, f"{split}.traits")))
            for split in ("train", "test", "heldout")}
    return out, read_styles(os.path.join(out, "speakers.json")), read


def lines(out, name):
    with open(os.path.join(out, name), encoding="utf-8") as f:
        return f.read().splitlines()


def point_estimate(posterior: SpeakerPosterior, t: Trait) -> Dict[str, Fraction]:
    """What a learner that takes the speaker for their most probable style (ties split) says: a phrase the
    speaker said as they said it, any other as that style does."""
    if t.trait != "style":
        return posterior.predictive(t)
    item, = [i for i, options in posterior.styles.items.items()
             if {style_word(o) for o in options} == {t.expected, *t.alternatives}]
    if item in posterior.said:
        return posterior.predictive(t)
    q = posterior.style_posterior()
    best = [k for k, p in enumerate(q) if p == max(q)]
    words = [style_word(posterior.styles.table[k][item]) for k in best]
    return {w: Fraction(words.count(w), len(words)) for w in [t.expected, *t.alternatives]}


def test_the_bayes_oracle_beats_a_point_estimate_of_the_style_and_stays_a_probability(styles_corpus):
    _, styles, read = styles_corpus
    observed = {}
    for speaker, traits in zip(*read["train"]):
        observed.setdefault(speaker, []).extend(traits)
    gain = 0
    for speaker, traits in zip(*read["test"]):
        posterior = SpeakerPosterior(styles, observed[speaker])
        for t in traits:
            bayes = posterior.predictive(t)
            guess = point_estimate(posterior, t)
            top = [w for w, p in guess.items() if p == max(guess.values())]
            # the expectation over what the speaker may say, given D_s: the Bayes decision is the best there is,
            # word by word (on the test's actual words either may win by chance: in this regime the point
            # estimate's loss, about 0.3% of style words, is smaller than that noise)
            assert posterior.score(t, "posterior") >= sum(bayes[w] for w in top) / len(top)
            gain += posterior.score(t, "posterior") - sum(bayes[w] for w in top) / len(top)
            assert 0 <= posterior.score(t) <= 1 and 0 < posterior.score(t, "posterior") <= 1
    assert gain > 0  # strictly better somewhere

    acc = bayes_accuracy(styles, *read["train"], *read["test"])
    ceilings = oracle_accuracy(*read["train"], *read["test"])
    for trait in ("gender", "address"):  # one word reveals them: Bayes is "traits revealed"
        assert acc[trait] == pytest.approx(ceilings["traits revealed"][trait])
    # for the style, "traits revealed" knows every word once one is shown (deviations too): out of reach
    assert ceilings["words seen"]["style"] < acc["style"] < ceilings["traits revealed"]["style"] <= 1
    posterior_acc = bayes_accuracy(styles, *read["train"], *read["test"], score="posterior")
    assert posterior_acc["style"] == pytest.approx(acc["style"], abs=0.03)  # the same in expectation
    assert set(acc) == {"all", "gender", "address", "style"}


def test_onboarding_scores_every_n_on_the_same_sentences_and_learns_with_n(styles_corpus):
    _, styles, read = styles_corpus
    labels, traits = read["heldout"]
    curve = {n: onboarding_oracle(styles, labels, traits, n, evaluated_after=20, score="posterior")
             for n in (0, 1, 3, 10, 20)}
    assert curve[0]["gender"] == curve[0]["address"] == 0.5  # the prior alone
    values = [curve[n]["style"] for n in sorted(curve)]
    assert values == sorted(values) and values[0] < values[-1] - 0.2
    assert [curve[n]["all"] for n in sorted(curve)] == sorted(curve[n]["all"] for n in curve)

    # at n = its evaluation point it is the training speakers' oracle with the first n sentences as training
    first, rest = [], []
    seen = {}
    for i, label in enumerate(labels):
        seen[label] = seen.get(label, 0) + 1
        (first if seen[label] <= 20 else rest).append(i)
    split = [([labels[i] for i in ids], [traits[i] for i in ids]) for ids in (first, rest)]
    assert onboarding_oracle(styles, labels, traits, 20) == bayes_accuracy(styles, *split[0], *split[1])
    with pytest.raises(ValueError, match="0 <= n <= that"):
        onboarding_oracle(styles, labels, traits, 5, evaluated_after=3)


def test_a_single_style_without_deviations_is_known_before_any_sentence():
    styles = make_styles(1, deviation=0.0)
    words = [style_trait(styles, item, options[-1]) for item, options in styles.items.items()]
    truth = [style_trait(styles, item, styles.table[0][item]) for item in styles.items]
    acc = onboarding_oracle(styles, ["ann"] * 2, [truth, words], 0)
    assert acc["style"] == pytest.approx(sum(1 for w, t in zip(words, truth) if w == t) / len(words) / 2 + 0.5)


def test_the_demo_shows_the_bayes_limit_only_for_a_styles_corpus(styles_corpus, tmp_path):
    out, _, _ = styles_corpus
    found = ceilings(out)
    assert set(found) == {"traits revealed", "words seen", BAYES}
    table = format_table(oracle_rows(found))
    assert "| system | BLEU | speaker words | gender | address | style | seconds |" in table
    assert "| oracle: Bayes | - |" in table
    plain = str(tmp_path / "plain")
    write_corpus(plain, {"train": 48, "test": 24}, num_speakers=12)
    assert set(ceilings(plain)) == {"traits revealed", "words seen"}
    assert "| gender | address | profession | seconds |" in format_table(oracle_rows(ceilings(plain)))
    args = parse_args(["--styles", "4", "--deviation", "0.2"])
    assert (args.styles, args.deviation) == (4, 0.2)
    assert (parse_args([]).styles, parse_args([]).deviation) == (0, 0.1)
    with pytest.raises(SystemExit):
        parse_args(["--styles", "4", "--deviation", "2"])
