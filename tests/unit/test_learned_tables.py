"""The oracle with the tables learned from the training split (fairseq_speaker/toy/learned_tables.py): the exact
Bayes posterior of an observer told every other training speaker's values but not the tables, against an enumeration
of every table; and ``python -m fairseq_speaker.toy.oracle --tables learned``."""

import itertools
import math
import os
import random
from fractions import Fraction
from typing import Dict, List, Tuple

import pytest

from fairseq_speaker.toy.corpus import style_word, write_corpus
from fairseq_speaker.toy.learned_tables import LearnedTables
from fairseq_speaker.toy.oracle import main
from fairseq_speaker.toy.posterior import StructurePosterior
from fairseq_speaker.toy.structure_corpus import write_structure
from fairseq_speaker.toy.structure_model import RANDOM, StructureModel
from fairseq_speaker.toy.structures import SUITE
from tests.structure_models import small, tiny_model, word_of

Occurrence = Tuple[str, str, str]  # (trait, phrase, translation)


def training_speakers(rng: random.Random, model: StructureModel, count: int
                      ) -> Tuple[Dict[str, Dict[str, str]], Dict[str, List[Occurrence]]]:
    """``count`` speakers of fixed values (the joint's, without ``random``) and a few style phrases each, said as
    their value says them or, with the trait's deviation, another translation (the same every time)."""
    style = model.trait("style")
    values, said = {}, {}
    fixed = [z for z in model.joint if RANDOM not in z]
    for s in range(count):
        z = rng.choice(fixed)
        name = f"spk{s}"
        values[name] = {t.name: v for t, v in zip(model.traits, z)}
        occurrences = []
        for item in rng.sample(sorted(style.items), rng.randint(1, len(style.items))):
            own = style.table[values[name]["style"]][item]
            if rng.random() < style.deviation:
                own = rng.choice([o for o in style.items[item] if o != own])
            occurrences += [("style", item, own)] * rng.randint(1, 2)
        said[name] = occurrences
    return values, said


def enumerated(model: StructureModel, values: Dict[str, Dict[str, str]], said: Dict[str, List[Occurrence]],
               target: str) -> Dict[str, Dict[str, float]]:
    """The predictive of every style phrase the target did not say, from the generative story: every joint value of
    the target, every table of the style (each entry uniform over the phrase's translations, the others' words and
    the target's weighted by the chosen translation's probability: 1 - d for the entry, d / (n - 1) otherwise)."""
    style = model.trait("style")
    fixed = [v for v in style.values if v != RANDOM]
    entries = [(v, item) for v in fixed for item in sorted(style.items)]
    mine = {item: word for _, item, word in said[target]}
    index = [t.name for t in model.traits].index("style")

    def f(word: str, entry: str, item: str) -> float:
        n = len(style.items[item])
        return float(1 - style.deviation) if word == entry else float(style.deviation) / (n - 1)

    predictive = {item: {style_word(o): 0.0 for o in style.items[item]} for item in style.items if item not in mine}
    total = 0.0
    for table in itertools.product(*(style.items[item] for _, item in entries)):
        t = dict(zip(entries, table))
        weight = math.prod(f(word, t[(values[s]["style"], item)], item)
                           for s, occurrences in said.items() if s != target
                           for item, word in {i: w for _, i, w in occurrences}.items())
        weight /= math.prod(len(style.items[item]) for _, item in entries)
        for z, prior in model.joint.items():
            v = z[index]
            if v == RANDOM:
                continue
            w = weight * float(prior) * math.prod(f(word, t[(v, item)], item) for item, word in mine.items())
            total += w
            for item in predictive:
                for o in style.items[item]:
                    predictive[item][style_word(o)] += w * f(o, t[(v, item)], item)
    return {item: {word: p / total for word, p in words.items()} for item, words in predictive.items()}


def observed_traits(model: StructureModel, said: Dict[str, List[Occurrence]]):
    return {s: [word_of(model, *o) for o in occurrences] for s, occurrences in said.items()}


def test_the_learned_oracle_is_the_posterior_over_every_table_given_the_other_speakers():
    rng = random.Random(11)
    checked = 0
    for case in range(30):
        model = tiny_model(rng)
        if len(model.trait("style").values) * len(model.trait("style").items) > 6:
            continue  # the enumeration: at most 3^6 tables
        values, said = training_speakers(rng, model, rng.randint(2, 6))
        tables = LearnedTables(model, values, observed_traits(model, said))
        for target in said:
            posterior = StructurePosterior(model, [word_of(model, *o) for o in said[target]], tables.without(target))
            for item, expected in enumerated(model, values, said, target).items():
                options = model.trait("style").items[item]
                word = word_of(model, "style", item, options[0])
                got = {w: float(p) for w, p in posterior.predictive(word).items()}
                assert got == pytest.approx(expected, abs=1e-9)
                checked += 1
    assert checked > 20


def test_tables_every_speaker_shows_without_deviation_are_the_models_own():
    """Deviation 0 and every entry said by another speaker: the learned oracle is the known one."""
    rng = random.Random(12)
    model = tiny_model(rng)
    style = model.trait("style")
    style.deviation = Fraction(0)
    fixed = [z for z in model.joint if RANDOM not in z]
    values, said = {}, {}
    for s, z in enumerate(fixed * 2):  # each joint value twice: every speaker has another of their value
        values[f"spk{s}"] = {t.name: v for t, v in zip(model.traits, z)}
        said[f"spk{s}"] = [("style", item, style.table[z[2]][item]) for item in sorted(style.items)]
    tables = LearnedTables(model, values, observed_traits(model, said))
    for target, occurrences in said.items():
        first = [word_of(model, *occurrences[0])]
        learned = StructurePosterior(model, first, tables.without(target))
        known = StructurePosterior(model, first)
        assert learned.joint == known.joint
        for item, options in style.items.items():
            assert learned.predictive(word_of(model, "style", item, options[0])) == \
                known.predictive(word_of(model, "style", item, options[0]))


def test_an_entry_no_other_speaker_shows_is_a_guess():
    """A speaker alone in their value: their own words are left out of the tables, whose entries for that value are
    uniform; the predictive of a phrase they did not say is 1/n whatever their posterior."""
    rng = random.Random(13)
    model = tiny_model(rng)
    style = model.trait("style")
    z = next(z for z in model.joint if RANDOM not in z)
    items = sorted(style.items)
    values = {"alone": {t.name: v for t, v in zip(model.traits, z)}}
    said = {"alone": [("style", items[0], style.table[z[2]][items[0]])]}
    tables = LearnedTables(model, values, observed_traits(model, said))
    posterior = StructurePosterior(model, [word_of(model, *said["alone"][0])], tables.without("alone"))
    for item in items[1:]:
        predictive = posterior.predictive(word_of(model, "style", item, style.items[item][0]))
        assert set(predictive.values()) == {Fraction(1, len(style.items[item]))}
    with pytest.raises(ValueError, match="no values in speakers.json"):
        LearnedTables(model, {}, observed_traits(model, said))


def test_the_command_prints_the_learned_limit_and_refuses_a_styles_corpus(tmp_path, capsys):
    out = str(tmp_path / "rare")
    write_structure(out, small(SUITE["rare-words"]))
    main([out, "--shots", "0", "1", "--tables", "learned"])
    printed = capsys.readouterr().out
    assert "| test |" in printed and "| held out, n = 1 |" in printed
    styles = str(tmp_path / "styles")
    write_corpus(styles, {"train": 96, "test": 24}, num_speakers=8, seed=2, styles=2, deviation=0.2)
    with pytest.raises(SystemExit) as exit_info:
        main([styles, "--tables", "learned"])
    assert exit_info.value.code == 2
    assert "a corpus of the styles mode; learned tables are a reference of the corpus suite" in capsys.readouterr().err
    assert os.path.exists(os.path.join(styles, "speakers.json"))
