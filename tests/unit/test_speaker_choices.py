"""fairseq_speaker.analysis.choices: the choices, traits and kinds of speaker a made-up corpus was generated with,
found from its parallel text alone; and scripts/speaker_choices.py on it."""

import os
import random
import runpy
import subprocess
import sys

import numpy as np
import pytest

from fairseq_speaker.analysis.choices import (KINDS, choice_groups, choice_traits, corpus_kinds, kinds,
                                              speaker_choices, traits)
from fairseq_speaker.toy.corpus import write_corpus

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
#: three styles, each one translation of every phrase (the style's index in each tuple)
PHRASES = {"bike": (("le", "vélo"), ("la", "bécane"), ("la", "bicyclette")),
           "job": (("le", "travail"), ("le", "boulot"), ("le", "taf")),
           "guy": (("le", "type"), ("le", "mec"), ("le", "gars")),
           "food": (("la", "nourriture"), ("la", "bouffe"), ("la", "nourriture"))}
#: two genders, each one form of every adjective
ADJECTIVES = {"tired": ("fatigué", "fatiguée"), "happy": ("content", "contente")}


def corpus(speakers: int = 120, sentences: int = 24, seed: int = 3):
    """Parallel sentences of speakers of style s % 3 and gender (s // 3) % 2, and every speaker's words."""
    rng = random.Random(seed)
    sources, targets, labels = [], [], []
    for s in range(speakers):
        style, gender = s % 3, (s // 3) % 2
        for _ in range(sentences):
            kind = rng.choice(["phrase", "adjective", "dog"])
            if kind == "phrase":
                phrase = rng.choice(sorted(PHRASES))
                article, noun = PHRASES[phrase][style]
                source, target = f"i saw the {phrase} .", f"j' ai vu {article} {noun} ."
            elif kind == "adjective":
                adjective = rng.choice(sorted(ADJECTIVES))
                source, target = f"i am {adjective} .", f"je suis {ADJECTIVES[adjective][gender]} ."
            else:
                source, target = "i saw the dog .", "j' ai vu le chien ."
            sources.append(source.split())
            targets.append(target.split())
            labels.append(f"spk{s}")
    return sources, targets, labels


def test_the_choices_traits_and_kinds_are_those_the_corpus_was_made_with():
    sources, targets, labels = corpus()
    found = choice_groups(sources, targets, labels)
    # "food" has two translations only (its third style shares the first's), "dog" one: no choice; "le", "ai", "vu"
    # are said by every speaker: no choice either
    assert [(c.anchor, c.alternatives) for c in found] == [
        ("bike", ("bicyclette", "bécane", "vélo")), ("food", ("bouffe", "nourriture")),
        ("guy", ("gars", "mec", "type")), ("happy", ("content", "contente")), ("job", ("boulot", "taf", "travail")),
        ("tired", ("fatigué", "fatiguée"))]
    said = {}
    for words, label in zip(targets, labels):
        said.setdefault(label, set()).update(words)
    chosen = speaker_choices(found, list(said.values()))
    assert chosen.shape == (120, 6) and (chosen >= 0).mean() > 0.9
    for row, label in enumerate(said):  # each speaker's choices are their style's and gender's translations
        style, gender = int(label[3:]) % 3, (int(label[3:]) // 3) % 2
        for c, choice in enumerate(found):
            truth = PHRASES[choice.anchor][style][1] if choice.anchor in PHRASES else ADJECTIVES[choice.anchor][gender]
            assert chosen[row, c] in (-1, choice.alternatives.index(truth)), (label, choice)
    groups = traits(chosen)
    assert [[found[c].anchor for c in group] for group in groups] == [["bike", "food", "guy", "job"],
                                                                      ["happy", "tired"]]
    style = kinds(chosen[:, groups[0]], [len(found[c].alternatives) for c in groups[0]], restarts=4, iters=50)
    gender = kinds(chosen[:, groups[1]], [len(found[c].alternatives) for c in groups[1]], restarts=4, iters=50)
    assert (style.k, gender.k) == (3, 2), (style.bic, gender.bic)
    # each kind of style says one translation of each phrase, as the corpus's styles do (up to their order)
    said_by_kind = sorted(tuple(int(np.argmax(table[k])) for table in style.alternatives) for k in range(3))
    truth = sorted(tuple(found[c].alternatives.index(PHRASES[found[c].anchor][s][1]) for c in groups[0])
                   for s in range(3))
    assert said_by_kind == truth
    assert all(table.max() > 0.9 for table in style.alternatives)
    assert np.isclose(style.prior.sum(), 1.0) and np.allclose(style.prior, 1 / 3, atol=0.05)


def test_words_that_speakers_say_together_are_no_choice_and_the_inputs_must_agree():
    sources = [["the", "bike"], ["the", "bike"], ["a", "dog"]] * 10
    targets = [["le", "vélo"], ["la", "bécane"], ["un", "chien"]] * 10
    assert [(c.anchor, c.alternatives) for c in choice_groups(sources, targets, ["a", "b", "c"] * 10)] == [
        ("bike", ("bécane", "vélo"))]  # the articles go with the bike, and each is said with its noun: dropped
    assert choice_groups(sources, targets, ["a"] * 30) == []  # one speaker says both: no one chooses
    with pytest.raises(ValueError, match="30 source sentences, 30 targets and 3 speaker labels"):
        choice_groups(sources, targets, ["a", "b", "c"])


def _script(argv, monkeypatch):
    """scripts/speaker_choices.py run in this process (its start-up is fairseq's import, seconds in a new one)."""
    monkeypatch.setattr(sys, "argv", ["speaker_choices.py", *argv])
    runpy.run_path(os.path.join(ROOT, "scripts", "speaker_choices.py"), run_name="__main__")


def _script_on_corpus(tmp_path, monkeypatch, speakers: int, sentences: int) -> None:
    """The script run on :func:`corpus`'s sentences, written as ``tmp_path/train.{en,fr,spk}``."""
    sources, targets, labels = corpus(speakers=speakers, sentences=sentences)
    for ext, rows in (("en", sources), ("fr", targets), ("spk", [[label] for label in labels])):
        (tmp_path / f"train.{ext}").write_text("".join(" ".join(row) + "\n" for row in rows), encoding="utf-8")
    _script([str(tmp_path / "train")], monkeypatch)


def test_the_script_prints_each_trait_with_its_kinds(tmp_path, monkeypatch, capsys):
    _script_on_corpus(tmp_path, monkeypatch, speakers=60, sentences=20)
    out = capsys.readouterr().out
    assert "60 speakers, 1200 sentences: 6 choices" in out
    style = "bike: bicyclette bécane vélo; food: bouffe nourriture; guy: gars mec type; job: boulot taf travail"
    assert f"| 1 | {style} | 3 |" in out
    assert "| 2 | happy: content contente; tired: fatigué fatiguée | 2 |" in out


def test_the_script_says_a_trait_of_too_few_speakers_was_not_scored(tmp_path, monkeypatch, capsys):
    """Three speakers: no held-out speakers to score the kinds on; the gain was printed as nan, unexplained."""
    _script_on_corpus(tmp_path, monkeypatch, speakers=3, sentences=10)
    out = capsys.readouterr().out
    assert "nan" not in out and "| - |" in out, out
    assert "not scored on held-out speakers (too few speakers made its choices to hold some out)" in out, out


def test_the_script_names_a_missing_file_or_files_that_do_not_agree(tmp_path, monkeypatch, capsys):
    script = os.path.join(ROOT, "scripts", "speaker_choices.py")
    missing = subprocess.run([sys.executable, script, str(tmp_path / "train")], capture_output=True, text=True)
    assert missing.returncode == 2 and f"file not found: expected {tmp_path / 'train'}.en" in missing.stderr
    assert "Traceback" not in missing.stderr
    for ext, lines in (("en", "a\nb\n"), ("fr", "x\ny\n"), ("spk", "s\n")):
        (tmp_path / f"train.{ext}").write_text(lines, encoding="utf-8")
    with pytest.raises(SystemExit) as short:
        _script([str(tmp_path / "train")], monkeypatch)
    assert short.value.code == 2
    assert "2 source lines, 2 target lines and 1 speaker labels" in capsys.readouterr().err


def _written(tmp_path, labels: str) -> str:
    """A corpus of 60 speakers whose speaker file is ``labels`` (bytes as text, BOM and all) when given."""
    sources, targets, names = corpus(speakers=60, sentences=20)
    for ext, rows in (("en", sources), ("fr", targets), ("spk", [[name] for name in names])):
        (tmp_path / f"train.{ext}").write_text("".join(" ".join(row) + "\n" for row in rows), encoding="utf-8")
    if labels:
        spk = tmp_path / "train.spk"
        spk.write_text(labels.format(spk.read_text(encoding="utf-8")), encoding="utf-8")
    return str(tmp_path / "train")


def test_the_script_reads_a_speaker_file_as_every_reader_does(tmp_path, monkeypatch, capsys):
    """A byte-order mark starting the file is no part of the first label (it made a 61st speaker); one inside a
    label is refused, naming the line."""
    _script([_written(tmp_path, "\ufeff{}")], monkeypatch)
    assert "60 speakers, 1200 sentences" in capsys.readouterr().out
    prefix = _written(tmp_path, "")
    spk = tmp_path / "train.spk"
    lines = spk.read_text(encoding="utf-8").splitlines(keepends=True)
    spk.write_text("".join(lines[:2] + ["spk\ufeff0\n"] + lines[3:]), encoding="utf-8")
    with pytest.raises(SystemExit) as refused:
        _script([prefix], monkeypatch)
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert f"{spk}:3: speaker label 'spk\\ufeff0' contains '\\ufeff'" in err and "Traceback" not in err


@pytest.mark.parametrize("content,message", [
    (None, "--oracle {oracle}: not found; give the speakers.json of a styles-mode toy corpus"),
    ("items: {}\n", "{oracle}:1: not JSON (Expecting value); give the speakers.json of a styles-mode toy corpus"),
    ('{"speakers": {}}', "{oracle}: not the speakers.json of a styles-mode toy corpus (no 'items'"),
    ("[1, 2]", "{oracle}: not the speakers.json of a styles-mode toy corpus (no 'items'"),
], ids=["missing", "not JSON", "no items", "a list"])
def test_the_script_names_an_oracle_it_cannot_read(tmp_path, monkeypatch, capsys, content, message):
    oracle = tmp_path / "speakers.json"
    if content is not None:
        oracle.write_text(content, encoding="utf-8")
    with pytest.raises(SystemExit) as refused:
        _script([_written(tmp_path, ""), "--oracle", str(oracle)], monkeypatch)
    assert refused.value.code == 2
    err = capsys.readouterr()
    assert message.format(oracle=oracle) in err.err.strip().splitlines()[-1]
    assert "speakers," not in err.out  # refused before the corpus is analysed


def test_a_large_corpus_is_read_within_the_caps_and_gives_the_same_traits():
    """The caps on the pairs read for the anchors, the choices kept and the speakers fitted: a quarter of each here
    finds the traits and kinds of the whole."""
    sources, targets, labels = corpus()
    whole = corpus_kinds(sources, targets, labels)
    capped = corpus_kinds(sources, targets, labels, max_pairs=len(sources) // 4, max_choices=5, max_speakers=60)
    assert [[c.anchor for c in trait] for trait, _ in whole] == [["bike", "food", "guy", "job"], ["happy", "tired"]]
    assert [m.k for _, m in whole] == [3, 2]
    # the choice fewest speakers make (one of the phrases or agreements) goes; the kinds stay
    assert sum(len(trait) for trait, _ in capped) == 5 and [m.k for _, m in capped] == [3, 2]


def two_traits(speakers: int = 400, seed: int = 0, rare: int = 100, frequent: int = 16, styles: int = 6):
    """Speakers x choices of two independent traits, and each choice's number of alternatives: a binary one (a
    gender) marked on ``rare`` choices each made by a quarter of the speakers, and a style of ``styles`` kinds on
    ``frequent`` three-way choices each made by 4 speakers in 5; a speaker leaves their value on 1 choice in 10."""
    rng = np.random.default_rng(seed)
    gender, style = rng.integers(2, size=speakers), rng.integers(styles, size=speakers)
    table = rng.integers(3, size=(styles, frequent))  # each style's alternative of each choice
    off = rng.random((speakers, rare)) < 0.1
    binary = np.where(off, 1 - gender[:, None], gender[:, None])
    off = rng.random((speakers, frequent)) < 0.1
    multiway = np.where(off, rng.integers(3, size=(speakers, frequent)), table[style])
    chosen = np.concatenate([np.where(rng.random((speakers, rare)) < 0.25, binary, -1),
                             np.where(rng.random((speakers, frequent)) < 0.8, multiway, -1)], 1)
    return chosen, [2] * rare + [3] * frequent


def test_two_independent_traits_joined_by_chance_links_come_out_apart_with_their_kinds():
    """The rare choices' many pairs link some of them to the style's choices by chance: one component, which BIC
    fitted as one trait of 4 kinds. Split by the held-out speakers' choices, it is the two traits."""
    chosen, sizes = two_traits()
    assert [len(group) for group in traits(chosen) if len(group) > 1] == [116]  # the links join them
    found = choice_traits(chosen, sizes)
    assert [(trait, model.k) for trait, model in found] == [(list(range(100)), 2), (list(range(100, 116)), 6)]
    gender, style = (model for _, model in found)
    assert gender.gain > 0.3 and style.gain > 0.6  # nats a choice better than everyone's rates, on held-out speakers
    assert set(gender.heldout) >= {1, 2} and max(gender.heldout, key=gender.heldout.get) in (2, 3)


def test_speakers_who_choose_at_random_have_no_trait():
    rng = np.random.default_rng(1)
    sizes = [2] * 40 + [3] * 16
    chosen = np.stack([rng.integers(size, size=400) for size in sizes], 1)
    chosen[rng.random(chosen.shape) < 0.5] = -1
    assert choice_traits(chosen, sizes, keep_everyones=False) == []  # no trait whose kinds predict a held-out speaker
    assert all(model.k == 1 and model.gain == 0.0 for _, model in choice_traits(chosen, sizes))
    model = kinds(chosen[:, :8], sizes[:8])
    assert model.k == 1 and np.allclose(model.prior, 1.0)


def test_the_styles_corpus_gives_gender_address_and_style_with_their_kinds(tmp_path):
    """The toy's styles corpus (400 speakers of 30 sentences, 6 styles), its traits found and their kinds chosen
    by the held-out speakers' choices: address (2), style (6) and gender (2), as it was made."""
    write_corpus(str(tmp_path), {"train": 12000}, num_speakers=400, seed=1, styles=6, deviation=0.1)
    def read(ext):
        return [line.split() for line in (tmp_path / f"train.{ext}").read_text(encoding="utf-8").splitlines()]

    found = corpus_kinds(read("en"), read("fr"), [label for (label,) in read("spk")], keep_everyones=False)
    assert [(trait[0].anchor, len(trait), model.k) for trait, model in found] == [
        ("are", 4, 2), ("bike", 16, 6), ("busy", 9, 2)]
    assert all(model.gain > 0.5 for _, model in found)


def test_kinds_chosen_by_bic_when_not_cross_validated():
    """``folds=0``: BIC over every number of kinds, as before cross-validation."""
    sources, targets, labels = corpus()
    said = {}
    for words, label in zip(targets, labels):
        said.setdefault(label, set()).update(words)
    found = choice_groups(sources, targets, labels)
    chosen = speaker_choices(found, list(said.values()))
    style = [c for c, choice in enumerate(found) if choice.anchor in PHRASES]
    model = kinds(chosen[:, style], [len(found[c].alternatives) for c in style], folds=0, restarts=2, iters=50)
    assert model.k == 3 and sorted(model.bic) == sorted(KINDS) and model.heldout == {} and np.isnan(model.gain)


def rare_style_choices(speakers: int = 400, choices: int = 120, styles: int = 4, made: float = 0.08, seed: int = 5):
    """Speakers of ``styles`` styles, each style one of two translations of every phrase (a tenth of the speakers'
    choices leave it); each speaker makes each choice with probability ``made``, so that two choices are made by the
    same speakers about ``speakers * made**2`` times (2.6): too few for any link."""
    rng = np.random.default_rng(seed)
    table = rng.integers(2, size=(styles, choices))
    style = rng.integers(styles, size=speakers)
    said = np.where(rng.random((speakers, choices)) < 0.1, 1 - table[style], table[style])
    return np.where(rng.random((speakers, choices)) < made, said, -1), [2] * choices


def test_rare_choices_that_no_link_joins_are_fitted_together_as_one_trait():
    """Each rare choice is alone in the links; fitted together they are the styles: a trait whose kinds predict the
    held-out speakers' choices. (Before, every one stayed alone with one kind, and the search of the number of kinds
    stopped at 2, which predicts worse than 1 there.)"""
    chosen, sizes = rare_style_choices()
    assert [group for group in traits(chosen) if len(group) > 1] == []  # no link joins any two
    found = choice_traits(chosen, sizes, keep_everyones=False)
    assert len(found) >= 1
    joined = max(found, key=lambda trait: len(trait[0]))
    assert len(joined[0]) >= 100 and joined[1].k >= 3 and joined[1].gain > 0.05
    assert set(joined[1].heldout) == set(KINDS)  # every number of kinds tried, past those worse than one


def test_the_choices_of_random_speakers_are_not_joined():
    """The same corpus whose speakers choose at random: the choices left alone stay alone."""
    rng = np.random.default_rng(6)
    chosen = np.where(rng.random((400, 120)) < 0.08, rng.integers(2, size=(400, 120)), -1)
    assert choice_traits(chosen, [2] * 120, keep_everyones=False) == []


def style_gender_address(speakers: int = 400, seed: int = 7, rare: int = 100, styles: int = 4, ways: int = 3):
    """Speakers x choices of three independent traits: a style of ``styles`` kinds shown on ``rare`` three-way phrases,
    each made by 5% to 30% of the speakers (a fifth of a speaker's choices leave their style), a gender on 9 binary
    choices each made by half the speakers, an address on 4 made by 60%: the suite's ``judge-3`` in small."""
    rng = np.random.default_rng(seed)
    style, gender, address = (rng.integers(n, size=speakers) for n in (styles, 2, 2))
    table = rng.integers(ways, size=(styles, rare))
    said = np.where(rng.random((speakers, rare)) < 0.2, rng.integers(ways, size=(speakers, rare)), table[style])
    phrases = np.where(rng.random((speakers, rare)) < rng.uniform(0.05, 0.3, size=rare), said, -1)
    agreement = np.where(rng.random((speakers, 9)) < 0.05, 1 - gender[:, None], gender[:, None])
    agreement = np.where(rng.random((speakers, 9)) < 0.5, agreement, -1)
    forms = np.where(rng.random((speakers, 4)) < 0.6, np.repeat(address[:, None], 4, 1), -1)
    return np.concatenate([phrases, agreement, forms], 1), [ways] * rare + [2] * 13


def test_a_style_that_falls_apart_into_pieces_is_regrouped():
    """Links and halvings leave such a style in pieces (57, 24 and 19 of its 100 phrases, each with kinds of its own);
    regrouped by which trait's posteriors predict each choice on held-out speakers, the style is one trait of 4
    kinds, and gender and address stay apart."""
    chosen, sizes = style_gender_address()
    found = [(set(trait), model.k) for trait, model in choice_traits(chosen, sizes, keep_everyones=False)]
    style = max(found, key=lambda trait: len(trait[0] & set(range(100))))
    assert len(style[0] & set(range(100))) >= 90 and style[1] == 4
    assert not style[0] & set(range(100, 113))  # no gender or address choice in it
    assert (set(range(100, 109)), 2) in found and (set(range(109, 113)), 2) in found


def test_more_kinds_than_the_grid_are_tried_while_the_largest_predicts_best():
    """12, the largest number of :data:`KINDS`, was a ceiling: a trait of 20 styles was fitted with 12 kinds. Where
    the largest number tried predicts held-out speakers best, larger ones are tried (and a fifth of the speakers
    bounds them); without ``grow``, the grid alone."""
    rng = np.random.default_rng(7)
    styles, choices, speakers = 20, 24, 600
    table = rng.integers(4, size=(styles, choices))
    style = rng.integers(styles, size=speakers)
    said = np.where(rng.random((speakers, choices)) < 0.05, rng.integers(4, size=(speakers, choices)), table[style])
    chosen = np.where(rng.random((speakers, choices)) < 0.6, said, -1)
    grown = kinds(chosen, [4] * choices, restarts=2, iters=60)
    assert max(grown.heldout) > max(KINDS) and grown.k > max(KINDS), grown.heldout
    assert grown.heldout[grown.k] > grown.heldout[max(KINDS)]
    assert max(kinds(chosen, [4] * choices, restarts=2, iters=60, grow=False).heldout) == max(KINDS)
    few = kinds(chosen[:60], [4] * choices, restarts=2, iters=60)  # a kind for every 5 speakers at most
    assert max(few.heldout) <= 60 // 5, few.heldout


@pytest.mark.parametrize("speakers,best,tried", [
    (10_000, "largest", [1, 2, 12, 18, 27, 41, 62, 93]),  # MAX_GROWN_KINDS: each EM step costs in proportion
    (100, "largest", [1, 2, 12, 18]),  # a kind for every 5 speakers at most
    (10_000, "two", [1, 2, 12]),  # the grid's largest does not predict best: nothing more
])
def test_the_numbers_of_kinds_grow_by_half_within_their_bounds(speakers, best, tried):
    from fairseq_speaker.analysis.latent_classes import _numbers_of_kinds

    heldout, seen = {}, []
    for k in _numbers_of_kinds((1, 2, 12), heldout, True, speakers):
        seen.append(k)
        heldout[k] = float(k) if best == "largest" else -abs(k - 2)
    assert seen == tried
