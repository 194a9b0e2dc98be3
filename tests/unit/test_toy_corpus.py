"""The toy corpus: speaker traits change the target, and the trait scorer; the styles mode."""

import hashlib
import json
import os
import random

import pytest

from fairseq_speaker.generate_output import read_generate_output
from fairseq_speaker.analysis.speaker_words import Trait, read_traits, trait_accuracy
from fairseq_speaker.toy.corpus import (
    ADDRESS_VERBS, DEFAULT_DEVIATION, GENDERED_ADJECTIVES, INVARIABLE_ADJECTIVES, NOUNS, PLACES, PROFESSION_NOUNS,
    STYLE_ITEMS, TIMES, Styles, make_speakers, make_style_speakers, make_styles, read_styles, style_word,
    write_corpus)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("toy"))
    speakers = write_corpus(out, {"train": 600, "valid": 48, "test": 48}, num_speakers=24, seed=3)
    return out, speakers


def lines(out, name):
    with open(os.path.join(out, name), encoding="utf-8") as f:
        return f.read().splitlines()


def test_files_are_aligned_and_every_speaker_is_in_every_split(corpus):
    out, speakers = corpus
    for split, size in [("train", 600), ("valid", 48), ("test", 48)]:
        sizes = {ext: len(lines(out, f"{split}.{ext}")) for ext in ("en", "fr", "spk", "traits")}
        assert set(sizes.values()) == {size}
        assert set(lines(out, f"{split}.spk")) == {s.name for s in speakers}


def test_the_references_carry_their_speakers_traits(corpus):
    out, speakers = corpus
    traits = read_traits(os.path.join(out, "train.traits"))
    refs = lines(out, "train.fr")
    assert trait_accuracy(refs, traits)["all"] == 1.0
    by_name = {s.name: s for s in speakers}
    for spk, sentence_traits in zip(lines(out, "train.spk"), traits):
        for t in sentence_traits:
            if t.trait == "address":
                assert t.expected == ("vous" if by_name[spk].address == "formal" else "tu")


def test_the_source_does_not_reveal_the_speaker(corpus):
    out, _ = corpus
    sources = {}
    for en, spk in zip(lines(out, "train.en"), lines(out, "train.spk")):
        sources.setdefault(en, set()).add(spk)
    assert max(len(s) for s in sources.values()) > 3  # one English sentence, many speakers


def test_speakers_share_each_combination_of_traits():
    speakers = make_speakers(24)
    combos = {(s.gender, s.address, s.profession) for s in speakers}
    assert len(combos) == 12


def test_trait_accuracy_needs_the_right_word_and_not_its_rival():
    traits = [[Trait("gender", "fatiguée", ("fatigué",))], [Trait("address", "vous", ("tu",))]]
    assert trait_accuracy(["je suis fatiguée .", "tu veux"], traits) == {"all": 0.5, "gender": 1.0, "address": 0.0}
    assert trait_accuracy(["fatiguée fatigué", "vous"], traits)["gender"] == 0.0
    with pytest.raises(ValueError, match="2 hypotheses but 1 lines"):
        trait_accuracy(["a", "b"], traits[:1])


def test_read_generate_output_orders_by_id_and_keeps_the_best():
    text = "S-1\tb\nH-1\t-0.5\tsecond\nH-0\t-0.1\tfirst\nH-0\t-0.9\tworse\nD-0\t-0.1\tfirst\n"
    assert read_generate_output(text) == ["first", "second"]
    with pytest.raises(ValueError, match=r"no hypothesis for sentence ids \[1\]"):
        read_generate_output("H-0\t-1\ta\nH-2\t-1\tc\n")


def test_read_generate_output_refuses_two_runs_appended_and_keeps_nbest():
    """Two outputs appended (>>) gave the first run's hypotheses without a word; fairseq-generate's --nbest prints an
    id's hypotheses one after the other (H-, D-, P- lines each), below its one S- line."""
    nbest = "S-1\tb\nH-1\t-0.5\tone\nD-1\t-0.5\tone\nP-1\t-0.5\nH-1\t-0.7\ttwo\nS-0\ta\nH-0\t-0.1\tzero\n"
    assert read_generate_output(nbest) == ["zero", "one"]
    with pytest.raises(ValueError, match=r"^x: line 8: sentence id 1 again \(first at line 1\): two outputs appended"):
        read_generate_output(nbest + nbest, source="x")
    hypotheses = "H-1\t-0.5\tone\nH-0\t-0.1\tzero\n"  # grep ^H of two runs: no S- lines
    with pytest.raises(ValueError, match=r"line 3: sentence id 1 again \(first at line 1\)"):
        read_generate_output(hypotheses + hypotheses)


def test_heldout_speakers_are_in_no_other_split_and_change_nothing_else(tmp_path):
    sizes = {"train": 48, "valid": 24, "test": 24}
    plain, extra = str(tmp_path / "plain"), str(tmp_path / "extra")
    write_corpus(plain, sizes, num_speakers=12, seed=3)
    speakers = write_corpus(extra, sizes, num_speakers=12, seed=3, heldout_speakers=3, heldout_sentences=5)
    for name in os.listdir(plain):  # the other splits are byte-identical; speakers.tsv only grows
        if name != "speakers.tsv":
            assert lines(plain, name) == lines(extra, name), name
    assert lines(extra, "speakers.tsv")[: len(lines(plain, "speakers.tsv"))] == lines(plain, "speakers.tsv")
    assert [s.name for s in speakers[12:]] == ["new000", "new001", "new002"]

    labels = lines(extra, "heldout.spk")
    assert sorted(labels) == sorted(["new000", "new001", "new002"] * 5)
    assert not set(labels) & set(lines(extra, "train.spk") + lines(extra, "valid.spk") + lines(extra, "test.spk"))
    assert {len(lines(extra, f"heldout.{ext}")) for ext in ("en", "fr", "traits")} == {15}
    traits = read_traits(os.path.join(extra, "heldout.traits"))
    assert trait_accuracy(lines(extra, "heldout.fr"), traits)["all"] == 1.0
    by_name = {s.name: s for s in speakers}
    for spk, sentence_traits in zip(labels, traits):
        for t in sentence_traits:
            if t.trait == "address":
                assert t.expected == ("vous" if by_name[spk].address == "formal" else "tu")
    # a few held-out speakers already differ in every trait
    for trait in ("gender", "address", "profession"):
        assert len({getattr(s, trait) for s in speakers[12:]}) > 1


def test_the_command_writes_heldout_speakers_only_when_asked(tmp_path):
    from fairseq_speaker.toy.corpus import main

    common = ["--train", "24", "--valid", "12", "--test", "12", "--speakers", "12"]
    main(["--out", str(tmp_path / "a"), *common])
    assert not os.path.exists(tmp_path / "a" / "heldout.spk")
    main(["--out", str(tmp_path / "b"), *common, "--heldout", "--heldout-speakers", "2", "--heldout-sentences", "3"])
    assert sorted(lines(str(tmp_path / "b"), "heldout.spk")) == ["new000"] * 3 + ["new001"] * 3
    with pytest.raises(SystemExit):
        main(["--out", str(tmp_path / "c"), *common, "--heldout", "--heldout-sentences", "0"])


# -- the styles mode ------------------------------------------------------------------------------------------

#: sha256 of the default corpora below (names and bytes of every file), written before the styles mode existed
DEFAULT_CORPORA = [
    ({"train": 600, "valid": 48, "test": 48}, dict(num_speakers=24, seed=3),
     "a18ee7cdb46e907f4aced174fb84864bc79b2c0f3d3b7e19367671d046b14e4e"),
    ({"train": 48, "valid": 24, "test": 24}, dict(num_speakers=12, seed=3, heldout_speakers=3, heldout_sentences=5),
     "2b3a43cc4220a5b7c926f2781852ad48b849405fef5c185170ed277469abe373"),
]


def corpus_digest(out):
    digest = hashlib.sha256()
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name), "rb") as f:
            digest.update(name.encode() + b"\0" + f.read() + b"\0")
    return digest.hexdigest()


@pytest.mark.parametrize("sizes,options,digest", DEFAULT_CORPORA)
def test_the_default_corpus_is_byte_for_byte_what_it_was_before_the_styles_mode(tmp_path, sizes, options, digest):
    for name, mode in [("implicit", {}), ("explicit", {"styles": 0, "deviation": 0.3})]:
        out = str(tmp_path / name)
        write_corpus(out, sizes, **options, **mode)
        assert corpus_digest(out) == digest, name
        assert not os.path.exists(os.path.join(out, "speakers.json"))


#: sha256 of styles corpora (names and bytes of every file), written before the corpus suite existed
STYLES_CORPORA = [
    ({"train": 240, "valid": 24, "test": 48},
     dict(num_speakers=24, seed=3, styles=4, deviation=0.25, heldout_speakers=5, heldout_sentences=6),
     "78db8df1423d202ef389132c27b20363738eaad80db2940da8d1a41b259e9040"),
    ({"train": 96, "test": 24}, dict(num_speakers=12, seed=7, styles=6),
     "61040655c0bade6b3ab8c42c751e891b0ca840bacad2b200293d9dcfe5f8d04b"),
]


@pytest.mark.parametrize("sizes,options,digest", STYLES_CORPORA)
def test_the_styles_corpus_is_byte_for_byte_what_it_was_before_the_corpus_suite(tmp_path, sizes, options, digest):
    write_corpus(str(tmp_path), sizes, **options)
    assert corpus_digest(str(tmp_path)) == digest


@pytest.fixture(scope="module")
def styles_corpus(tmp_path_factory):
    out = str(tmp_path_factory.mktemp("styles"))
    speakers = write_corpus(out, {"train": 960, "valid": 48, "test": 96}, num_speakers=48, seed=5, styles=4,
                            deviation=0.25, heldout_speakers=8, heldout_sentences=20)
    return out, speakers


def test_every_style_word_is_the_speakers_style_but_where_they_leave_it_and_its_rivals_are_the_others(styles_corpus):
    out, speakers = styles_corpus
    with open(os.path.join(out, "speakers.json"), encoding="utf-8") as f:
        truth = json.load(f)
    styles = read_styles(os.path.join(out, "speakers.json"))
    assert {s.name: (s.gender, s.address, s.style, dict(s.deviations)) for s in speakers} == {
        name: (t["gender"], t["address"], t["style"], t["deviations"]) for name, t in truth["speakers"].items()}
    by_name = {s.name: s for s in speakers}
    said = followed = left = 0
    for split in ("train", "valid", "test", "heldout"):
        traits = read_traits(os.path.join(out, f"{split}.traits"))
        assert trait_accuracy(lines(out, f"{split}.fr"), traits)["all"] == 1.0  # no rival in the reference
        for en, fr, name, sentence_traits in zip(lines(out, f"{split}.en"), lines(out, f"{split}.fr"),
                                                 lines(out, f"{split}.spk"), traits):
            speaker = by_name[name]
            assert {t.trait for t in sentence_traits} <= {"gender", "address", "style"}
            for t in (t for t in sentence_traits if t.trait == "style"):
                item, = [i for i, options in STYLE_ITEMS.items() if t.expected in {style_word(o) for o in options}]
                own = dict(speaker.deviations).get(item)
                expected = own or truth["styles"][speaker.style][item]
                assert t.expected == style_word(expected) and expected in fr and item in en
                assert sorted(t.alternatives) == sorted(style_word(o) for o in STYLE_ITEMS[item] if o != expected)
                assert styles.choice(speaker, item) == expected
                said += 1
                followed += own is None
                left += own is not None and own != truth["styles"][speaker.style][item]
    assert said > 400 and followed > 0 and left > 0 and followed + left == said


def test_styles_are_shared_equally_and_every_speaker_keeps_gender_and_address(styles_corpus):
    out, speakers = styles_corpus
    train = speakers[:48]
    assert {(s.gender, s.address, s.style) for s in train} == {
        (g, a, k) for g in ("f", "m") for a in ("informal", "formal") for k in range(4)}
    assert [sum(s.style == k for s in train) for k in range(4)] == [12] * 4
    assert all(s.profession is None for s in speakers)
    heldout = speakers[48:]
    assert [s.name for s in heldout] == [f"new{i:03d}" for i in range(8)]
    for trait in ("gender", "address", "style"):  # a few held-out speakers already mix every trait
        assert len({getattr(s, trait) for s in heldout}) > 1
    by_name = {s.name: s for s in speakers}
    for spk, sentence_traits in zip(lines(out, "train.spk"), read_traits(os.path.join(out, "train.traits"))):
        for t in sentence_traits:
            if t.trait == "address":
                assert t.expected == ("vous" if by_name[spk].address == "formal" else "tu")
    assert lines(out, "speakers.tsv")[0].split("\t") == ["speaker", "gender", "address", "style", "deviations"]


@pytest.mark.parametrize("deviation", [0.0, 0.1, 0.4, 1.0])
def test_speakers_leave_their_style_on_the_share_of_phrases_asked_for_a_translation_drawn_among_the_others(
        deviation):
    styles = make_styles(6, seed=2, deviation=deviation)
    speakers = make_style_speakers(2400, styles, random.Random(0))
    left = [(s, item, own) for s in speakers for item, own in s.deviations]
    rate = len(left) / (len(speakers) * len(STYLE_ITEMS))
    assert abs(rate - deviation) < 0.01  # 38,400 phrases: 7 standard deviations at 0.1
    assert all(own != styles.table[s.style][item] and own in STYLE_ITEMS[item] for s, item, own in left)
    if deviation:  # uniform among the others: each other translation of a 4-way phrase about 1/3 of the time
        counts = {}
        for s, item, own in left:
            if item == "the job":
                counts.setdefault(styles.table[s.style][item], {}).setdefault(own, 0)
                counts[styles.table[s.style][item]][own] += 1
        for style_choice, owns in counts.items():
            assert sorted(owns) == sorted(o for o in STYLE_ITEMS["the job"] if o != style_choice)
            total = sum(owns.values())
            assert all(abs(c / total - 1 / 3) < 4 * (2 / 9 / total) ** 0.5 for c in owns.values()), owns


def test_held_out_speakers_of_the_styles_mode_change_nothing_else(tmp_path):
    sizes = {"train": 48, "valid": 24, "test": 24}
    plain, extra = str(tmp_path / "plain"), str(tmp_path / "extra")
    write_corpus(plain, sizes, num_speakers=12, seed=3, styles=3)
    write_corpus(extra, sizes, num_speakers=12, seed=3, styles=3, heldout_speakers=5, heldout_sentences=4)
    for name in os.listdir(plain):
        if name not in ("speakers.tsv", "speakers.json"):
            assert lines(plain, name) == lines(extra, name), name
    assert lines(extra, "speakers.tsv")[:13] == lines(plain, "speakers.tsv")
    with open(os.path.join(plain, "speakers.json")) as a, open(os.path.join(extra, "speakers.json")) as b:
        plain_json, extra_json = json.load(a), json.load(b)
    assert {k: v for k, v in extra_json.items() if k != "speakers"} == {
        k: v for k, v in plain_json.items() if k != "speakers"}
    assert list(extra_json["speakers"])[:12] == list(plain_json["speakers"])


def test_a_default_corpus_written_over_a_styles_one_leaves_no_stale_model(tmp_path):
    out = str(tmp_path / "raw")
    write_corpus(out, {"train": 24}, num_speakers=12, styles=2)
    assert os.path.exists(os.path.join(out, "speakers.json"))
    write_corpus(out, {"train": 24}, num_speakers=12)
    assert not os.path.exists(os.path.join(out, "speakers.json"))


def test_style_words_are_single_words_found_nowhere_else_in_the_corpus():
    words = [style_word(o) for options in STYLE_ITEMS.values() for o in options]
    assert len(words) == len(set(words))
    assert all(2 <= len(options) <= 4 for options in STYLE_ITEMS.values()) and len(STYLE_ITEMS) >= 12
    others = {w for d in (NOUNS, INVARIABLE_ADJECTIVES, PLACES, TIMES) for phrase in d.values() for w in phrase.split()}
    others |= {w for pair in GENDERED_ADJECTIVES.values() for w in pair}
    others |= {w for options in PROFESSION_NOUNS.values() for o in options for w in o.split()}
    others |= {w for _, informal, formal in ADDRESS_VERBS for w in (informal + " " + formal).split()}
    assert not set(words) & others
    assert not set(STYLE_ITEMS) & (set(NOUNS) | set(PROFESSION_NOUNS))
    with pytest.raises(ValueError, match="ends two translations"):
        Styles({"a": ("le x", "la y"), "b": ("le x", "le z")}, [{"a": "le x", "b": "le z"}], 0.1, [1.0])


def test_the_command_writes_the_styles_mode(tmp_path):
    from fairseq_speaker.toy.corpus import main

    main(["--out", str(tmp_path / "a"), "--styles", "3", "--deviation", "0.2", "--speakers", "12",
          "--sentences-per-speaker", "5", "--valid", "12", "--test", "12"])
    assert len(lines(str(tmp_path / "a"), "train.spk")) == 60
    styles = read_styles(str(tmp_path / "a" / "speakers.json"))
    assert styles.num_styles == 3 and styles.deviation == 0.2 and styles.prior == [1 / 3] * 3
    main(["--out", str(tmp_path / "b"), "--styles", "2", "--speakers", "8", "--train", "16", "--valid", "8",
          "--test", "8"])
    assert read_styles(str(tmp_path / "b" / "speakers.json")).deviation == DEFAULT_DEVIATION == 0.1
    for wrong in (["--deviation", "0.2"], ["--styles", "2", "--train", "24", "--sentences-per-speaker", "2"],
                  ["--styles", "2", "--deviation", "1.5"], ["--styles", "-1"]):
        with pytest.raises(SystemExit):
            main(["--out", str(tmp_path / "c"), "--speakers", "12", *wrong])
