"""The corpus suite: structures drawn from independent dimensions, their corpora, their exact Bayes limits, and the
split into a design half and a judging half."""

import hashlib
import itertools
import json
import math
import os
import random
from fractions import Fraction
from typing import Dict, List, Tuple

import pytest

from fairseq_speaker.analysis.speaker_words import Trait, read_traits, trait_accuracy
from fairseq_speaker.onboarding.evaluate import bayes_oracle
from fairseq_speaker.toy.corpus import main as corpus_main
from fairseq_speaker.toy.corpus import read_styles, style_word, write_corpus
from fairseq_speaker.toy.demo import ceilings, format_table
from fairseq_speaker.toy.oracle import BAYES, bayes_accuracy, onboarding_oracle, oracle_rows
from fairseq_speaker.toy.posterior import StructurePosterior, speaker_posterior
from fairseq_speaker.toy.structure_corpus import make_structure_speakers, training_sizes, write_structure
from fairseq_speaker.toy.structure_model import RANDOM, TOPIC, TOPICS, StructureModel, _phrases, build_model
from fairseq_speaker.toy.structures import (
    DESIGN,
    DIMENSIONS,
    JUDGE,
    SUITE,
    Structure,
    draw_structures,
    get_structure,
    structure_json,
)
from tests.structure_models import small, tiny_model, word_of


def lines(out, name):
    with open(os.path.join(out, name), encoding="utf-8") as f:
        return f.read().splitlines()


# -- the oracle against an enumeration of the generative story ------------------------------------------------


def speaker_of(rng: random.Random, model: StructureModel, count: int, style_share: float = 1 / 3
               ) -> Tuple[Dict, List[Tuple[str, str, str]]]:
    """A speaker drawn from ``model`` and ``count`` of their (trait, phrase, translation) occurrences, of the style
    with probability ``style_share`` (else of gender or address)."""
    speaker, = make_structure_speakers(model, 1, rng)
    own = dict(speaker.deviations)
    occurrences = []
    for _ in range(count):
        trait = model.trait("style") if rng.random() < style_share else rng.choice(model.traits[:2])
        item = rng.choice(sorted(trait.items))
        value = speaker.value(trait.name)
        if value == RANDOM:
            occurrences.append((trait.name, item, rng.choice(trait.items[item])))
        else:
            occurrences.append((trait.name, item, own.get(item, trait.table[value][item])
                                if trait.name == "style" else trait.table[value][item]))
    return speaker, occurrences


def brute_force(model: StructureModel, occurrences: List[Tuple[str, str, str]]):
    """The posterior over the joint of the values and the predictive of a new occurrence of every phrase, from the
    generative story itself: every joint value z, and for each trait of a fixed value every assignment of a
    translation to each of its phrases (the value's, or another with the deviation's probability), weighted by
    their prior probability; an occurrence of a ``random`` trait is a uniform draw of its own. Kept when it says
    every observed occurrence."""
    names = [t.name for t in model.traits]
    joint = {z: 0.0 for z in model.joint}
    predictive = {(t.name, i): {w: 0.0 for w in t.words(i)} for t in model.traits for i in t.items}
    for z, prior in model.joint.items():
        per_trait = []
        for t, v in zip(model.traits, z):
            if v == RANDOM:
                per_trait.append([(None, 1.0)])
                continue
            items = sorted(t.items)
            options = [[(o, float(t.choice(v, i, style_word(o)))) for o in t.items[i]] for i in items]
            per_trait.append([(dict(zip(items, (o for o, _ in combo))), math.prod(p for _, p in combo))
                              for combo in itertools.product(*options)])
        for combo in itertools.product(*per_trait):
            weight = float(prior) * math.prod(p for _, p in combo)
            assigned = {name: a for name, (a, _) in zip(names, combo)}
            for trait, item, translation in occurrences:
                a = assigned[trait]
                if a is None:
                    weight /= len(model.trait(trait).items[item])
                elif a[item] != translation:
                    weight = 0.0
            if not weight:
                continue
            joint[z] += weight
            for t in model.traits:
                for i, options in t.items.items():
                    for o in options:
                        a = assigned[t.name]
                        predictive[(t.name, i)][style_word(o)] += weight * (
                            1 / len(options) if a is None else float(a[i] == o))
    total = sum(joint.values())
    return ({z: m / total for z, m in joint.items()},
            {key: {w: m / total for w, m in words.items()} for key, words in predictive.items()})


def check_against_brute_force(model: StructureModel, speaker, occurrences, extra: List[Trait] = ()):
    posterior = StructurePosterior(model, [word_of(model, *o) for o in occurrences] + list(extra))
    expected_joint, expected_words = brute_force(model, occurrences)
    assert {z: float(q) for z, q in posterior.joint.items()} == pytest.approx(expected_joint, abs=1e-9)
    for t in model.traits:
        for item in t.items:
            value = speaker.value(t.name)
            truth = t.items[item][0] if value == RANDOM else dict(speaker.deviations).get(item, t.table[value][item]) \
                if t.name == "style" else t.table[value][item]
            test_word = word_of(model, t.name, item, truth)
            expected = expected_words[(t.name, item)]
            predictive = {w: float(p) for w, p in posterior.predictive(test_word).items()}
            assert predictive == pytest.approx(expected, abs=1e-9)
            best = max(expected.values())
            argmax = [w for w, p in expected.items() if p > best - 1e-12]
            assert float(posterior.score(test_word)) == pytest.approx((test_word.expected in argmax) / len(argmax))
            assert float(posterior.score(test_word, "posterior")) == pytest.approx(best, abs=1e-9)
    return posterior


@pytest.mark.parametrize("correlated", [False, True])
def test_the_oracle_is_the_posterior_over_the_joint_of_every_trait_correlated_or_not(correlated):
    rng = random.Random(1 + correlated)
    shifted = 0
    for case in range(40):
        model = tiny_model(rng, correlated=correlated)
        speaker, occurrences = speaker_of(rng, model, rng.randint(1, 5))
        posterior = check_against_brute_force(model, speaker, occurrences)
        # with correlated traits an address word alone moves the style's posterior; with independent ones never
        alone = StructurePosterior(model, [word_of(model, "address", "you", "vous")])
        prior_style = model.marginal("style")
        moved = any(alone.marginals["style"][v] != prior_style[v] for v in prior_style)
        assert not moved or correlated
        shifted += moved
        assert sum(posterior.joint.values()) == 1
    assert shifted > 30 if correlated else shifted == 0


def test_random_choosers_are_one_factor_per_occurrence_and_predicted_uniformly():
    rng = random.Random(3)
    inconsistent = 0
    for _ in range(40):
        model = tiny_model(rng, random_share=True)
        speaker, occurrences = speaker_of(rng, model, rng.randint(2, 7), style_share=0.8)
        check_against_brute_force(model, speaker, occurrences)
        said: Dict[str, set] = {}
        for trait, item, translation in occurrences:
            if trait == "style":
                said.setdefault(item, set()).add(translation)
        if any(len(words) > 1 for words in said.values()):  # only a random chooser says two words for one phrase
            inconsistent += 1
            posterior = StructurePosterior(model, [word_of(model, *o) for o in occurrences])
            assert posterior.marginals["style"][RANDOM] == 1
    assert inconsistent >= 3


def test_a_corpus_of_random_choosers_has_the_limit_one_over_the_number_of_translations():
    rng = random.Random(4)
    model = tiny_model(rng, random_share=True)
    style = model.trait("style")
    joint = {z: Fraction(0) for z in model.joint}
    for z in joint:
        if z[2] == RANDOM:
            joint[z] = Fraction(1, 4)
    everyone_random = StructureModel("random", model.traits, joint)
    history = [word_of(everyone_random, "style", item, options[0]) for item, options in style.items.items()] * 3
    for item, options in style.items.items():
        for known in ([], history):
            posterior = StructurePosterior(everyone_random, known)
            for o in options:
                word = word_of(everyone_random, "style", item, o)
                assert posterior.score(word) == posterior.score(word, "posterior") == Fraction(1, len(options))


def test_early_commitment_reveals_the_choice_at_the_article_and_the_noun_is_scored():
    rng = random.Random(5)
    for ways in (2, 3, 4):
        for j in range(2):
            (english, options), = _phrases(rng, [f"n{i}" for i in range(ways + 1)], 1, ways, True).items()
            heads = [o.split()[:-1] for o in options]
            assert len({tuple(h) for h in heads}) == ways  # the words before the noun already tell them apart
            assert len({h[0] for h in heads}) >= min(ways, 3)  # the article, but for les petits / les petites
            assert [style_word(o) for o in options] == [f"n{i}" for i in range(1, ways + 1)]
            assert english.startswith("the ")
    for _ in range(30):  # the scored word is the choice whichever position reveals it: the same limit
        model = tiny_model(rng, early=True)
        speaker, occurrences = speaker_of(rng, model, rng.randint(1, 5))
        check_against_brute_force(model, speaker, occurrences)


def test_topic_words_are_predicted_from_the_source_and_tell_nothing_of_the_speaker():
    rng = random.Random(6)
    for _ in range(20):
        model = tiny_model(rng, topics=True)
        speaker, occurrences = speaker_of(rng, model, rng.randint(1, 4))
        # the speaker said one topic's word for every topic phrase, many times: their history is irrelevant
        topic_words = [Trait(TOPIC, style_word(options[0]), tuple(style_word(o) for o in options[1:]))
                       for options in model.topic_items.values()] * 5
        with_topics = check_against_brute_force(model, speaker, occurrences, extra=topic_words)
        without = StructurePosterior(model, [word_of(model, *o) for o in occurrences])
        assert with_topics.joint == without.joint
        for options in model.topic_items.values():
            for o in options:  # whichever topic the source shows, its word is known
                word = Trait(TOPIC, style_word(o), tuple(style_word(x) for x in options if x != o))
                assert with_topics.score(word) == with_topics.score(word, "posterior") == 1
    with pytest.raises(ValueError, match="no topic phrase"):
        StructurePosterior(model, [Trait(TOPIC, "médicaments", ("drogues",))])


def test_the_structure_oracle_of_the_styles_model_is_the_styles_oracle(tmp_path):
    out = str(tmp_path / "styles")
    write_corpus(out, {"train": 480, "test": 192}, num_speakers=48, seed=2, styles=4, deviation=0.2,
                 heldout_speakers=12, heldout_sentences=12)
    styles = read_styles(os.path.join(out, "speakers.json"))
    model = StructureModel.from_styles(styles)
    read = {split: (lines(out, f"{split}.spk"), read_traits(os.path.join(out, f"{split}.traits")))
            for split in ("train", "test", "heldout")}
    for score in ("decision", "posterior"):
        assert bayes_accuracy(model, *read["train"], *read["test"], score) == pytest.approx(
            bayes_accuracy(styles, *read["train"], *read["test"], score), abs=1e-12)
        for n in (0, 1, 5):
            assert onboarding_oracle(model, *read["heldout"], n, 6, score) == pytest.approx(
                onboarding_oracle(styles, *read["heldout"], n, 6, score), abs=1e-12)
    assert type(speaker_posterior(styles)).__name__ == "SpeakerPosterior"


# -- the structures' corpora ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SUITE))
def test_every_structure_writes_files_the_readers_and_the_oracle_accept(name, tmp_path):
    structure = small(SUITE[name])
    out = str(tmp_path / name)
    speakers = write_structure(out, structure)
    model = read_styles(os.path.join(out, "speakers.json"))
    assert isinstance(model, StructureModel) and model.to_json() == build_model(SUITE[name]).to_json()
    by_name = {s.name: s for s in speakers}
    with open(os.path.join(out, "speakers.json"), encoding="utf-8") as f:
        truth = json.load(f)
    assert truth["speakers"] == {s.name: s.truth() for s in speakers}
    assert truth["dimensions"] == structure_json(structure)
    for split in ("train", "valid", "test", "heldout"):
        traits = read_traits(os.path.join(out, f"{split}.traits"))
        assert {len(lines(out, f"{split}.{ext}")) for ext in ("en", "fr", "spk")} == {len(traits)}
        assert trait_accuracy(lines(out, f"{split}.fr"), traits)["all"] == 1.0
        for en, fr, spk, sentence_traits in zip(lines(out, f"{split}.en"), lines(out, f"{split}.fr"),
                                                lines(out, f"{split}.spk"), traits):
            speaker = by_name[spk]
            for t in sentence_traits:
                if t.trait == TOPIC:  # the topic the source shows chooses it
                    item, = [i for i, o in model.topic_items.items() if {style_word(x) for x in o} == {
                        t.expected, *t.alternatives}]
                    assert any(f"{context} i saw {item}" in en and style_word(model.topics[k][item]) == t.expected
                               for k, (context, _) in TOPICS.items())
                    continue
                trait = model.trait(t.trait)
                item, = [i for i in trait.items if set(trait.words(i)) == {t.expected, *t.alternatives}]
                value = speaker.value(t.trait)
                if value != RANDOM:
                    own = dict(speaker.deviations).get(item) if t.trait == "style" else None
                    assert t.expected == style_word(own or trait.table[value][item])
    labels = lines(out, "train.spk")
    assert [labels.count(s.name) for s in speakers[:16]] == training_sizes(structure)
    test = (lines(out, "test.spk"), read_traits(os.path.join(out, "test.traits")))
    found = ceilings(out)  # the demo's table
    assert set(found) == {"traits revealed", "words seen", BAYES}
    assert f"| oracle: {BAYES} | - |" in format_table(oracle_rows(found))
    train = (lines(out, "train.spk"), read_traits(os.path.join(out, "train.traits")))
    assert found[BAYES] == bayes_accuracy(model, *train, *test)
    heldout = (lines(out, "heldout.spk"), read_traits(os.path.join(out, "heldout.traits")))
    limits = bayes_oracle(os.path.join(out, "speakers.json"), *heldout, [0, 1, 3])  # fairseq-speaker-onboarding-eval's
    assert [row["n"] for row in limits] == [0, 1, 3] and all(0 <= row["traits"]["all"] <= 1 for row in limits)


def test_the_dimensions_show_in_the_corpora():
    early = build_model(SUITE["early"])
    for options in early.trait("style").items.values():
        assert len({tuple(o.split()[:-1]) for o in options}) == len(options)
    for options in build_model(SUITE["base"]).trait("style").items.values():
        assert len({tuple(o.split()[:-1]) for o in options}) == 1
    assert len(build_model(SUITE["rare-words"]).trait("style").items) == 160
    assert {len(o) for o in build_model(SUITE["multiway-few"]).trait("style").items.values()} == {4}
    assert build_model(SUITE["topic"]).topics and not build_model(SUITE["base"]).topics
    assert build_model(SUITE["random-choosers"]).marginal("style")[RANDOM] == Fraction(1, 4)
    correlated = build_model(SUITE["correlated-address"])
    assert correlated.joint[("f", "informal", "0")] == Fraction(1, 6) * Fraction(9, 10) * Fraction(1, 2)
    assert correlated.marginal("address") == {"informal": Fraction(1, 2), "formal": Fraction(1, 2)}
    sizes = training_sizes(SUITE["zipf"])
    assert min(sizes) == 1 and max(sizes) > 150 and 20 < sum(sizes) / len(sizes) < 50
    assert training_sizes(SUITE["base"]) == [30] * 400
    assert len(build_model(SUITE["many-styles"]).trait("style").values) == 80


# -- the split ------------------------------------------------------------------------------------------------

#: the suite, as it was defined: a structure's corpus is pinned by its fields (name, half, seed, dimensions, sizes)
SUITE_DIGEST = "cd6b8ee53c2f35e99a7eee2a4fb65e9c52d9bd35bdc9df2eff015eaa19853a0f"


def suite_digest() -> str:
    return hashlib.sha256(json.dumps([structure_json(s) for s in SUITE.values()], sort_keys=True).encode()).hexdigest()


def test_the_design_and_judging_halves_are_disjoint_and_fixed():
    assert [s.name for s in DESIGN] == ["base", "correlated-address", "binary-many", "multiway-few", "rare-words",
                                        "early", "topic", "zipf", "random-choosers", "many-styles"]
    assert [s.name for s in JUDGE] == [f"judge-{i}" for i in range(1, 7)]
    assert {s.half for s in DESIGN} == {"design"} and {s.half for s in JUDGE} == {"judge"}
    assert not {s.point() for s in DESIGN} & {s.point() for s in JUDGE}
    assert not {s.seed for s in DESIGN} & {s.seed for s in JUDGE}
    assert len({s.seed for s in SUITE.values()}) == len(SUITE)
    assert suite_digest() == SUITE_DIGEST
    # every value of every dimension is judged somewhere; each design structure changes one dimension of base
    for axis, values in DIMENSIONS.items():
        assert {getattr(s, axis) for s in JUDGE} == set(values), axis
    base = SUITE["base"].point()
    assert all(sum(a != b for a, b in zip(s.point(), base)) <= 2 for s in DESIGN)


def test_a_fresh_judging_half_is_drawn_from_any_seed():
    drawn = draw_structures(7, 5)
    assert [s.name for s in drawn] == [f"drawn-7-{i}" for i in range(1, 6)]
    assert get_structure("drawn-7-3") == drawn[2] and draw_structures(7, 5) == drawn
    assert not {s.point() for s in drawn} & {s.point() for s in DESIGN}
    assert draw_structures(8, 5) != drawn
    assert get_structure("drawn-7-100").name == "drawn-7-100"
    for wrong in ("nope", "drawn-7", "drawn-7-0", "drawn-x-1", "drawn-7-101"):
        with pytest.raises(ValueError, match="the structures: base, correlated-address"):
            get_structure(wrong)
    with pytest.raises(ValueError, match="not one of"):
        Structure("x", "design", 1, sizes="huge")


def test_the_command_writes_a_structure_and_lists_them(tmp_path, capsys):
    corpus_main(["--list-structures"])
    listed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in listed] == list(SUITE)
    assert all(line.split()[1] == SUITE[line.split()[0]].half for line in listed)
    for wrong, message in [(["--structure", "nope", "--out", "x"], "no structure 'nope'"),
                           (["--structure", "base"], "required: --out"),
                           (["--structure", "base", "--out", "x", "--seed", "3"], "takes no --seed"),
                           (["--list-structures", "--out", "x"], "writes nothing"),
                           (["--list-structures", "--structure", "base"], "not both")]:
        with pytest.raises(SystemExit):
            corpus_main(wrong)
        assert message in capsys.readouterr().err


def test_the_command_writes_what_write_structure_writes(tmp_path, monkeypatch):
    from fairseq_speaker.toy import structures

    tiny = small(SUITE["judge-2"])
    monkeypatch.setitem(structures.SUITE, "judge-2", tiny)
    corpus_main(["--out", str(tmp_path / "cli"), "--structure", "judge-2"])
    write_structure(str(tmp_path / "py"), tiny)
    assert sorted(os.listdir(tmp_path / "cli")) == sorted(os.listdir(tmp_path / "py"))
    for name in os.listdir(tmp_path / "py"):
        assert lines(str(tmp_path / "cli"), name) == lines(str(tmp_path / "py"), name)
