"""The toy corpus: speaker traits change the target, and the trait scorer."""

import os

import pytest

from fairseq_speaker.generate_output import read_generate_output
from fairseq_speaker.analysis.speaker_words import Trait, read_traits, trait_accuracy
from fairseq_speaker.toy.corpus import make_speakers, write_corpus


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
