"""The toy corpus's oracles: what training makes knowable about each speaker's words."""

import pytest

from fairseq_speaker.analysis.speaker_words import Trait
from fairseq_speaker.toy.oracle import oracle_accuracy, oracle_rows
from fairseq_speaker.toy.demo import format_table

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
