"""python -m fairseq_speaker.benchmarks.words: the speakers' words' cost as speakers change, on a small memory."""

import pytest

from fairseq_speaker.benchmarks import words as words_benchmark
from fairseq_speaker.modules import speaker_words

SMALL = ["--speakers", "40", "90", "--vocab", "300", "--draws", "20", "--repeats", "3", "--threads", "1"]


def test_each_size_gets_its_three_measures_and_a_change_builds_no_index_from_nothing(capsys, monkeypatch):
    """A change of one speaker's words is timed as the decoding after an onboarding pays it: the memory's last full
    build is kept (counted here), and the next bias row is the equation on the words as they are then."""
    builds = []
    base = speaker_words.WordsBase

    def counted(words, vocab):
        builds.append(len(words))
        return base(words, vocab)

    monkeypatch.setattr(speaker_words, "WordsBase", counted)
    words_benchmark.main(SMALL)
    rows = [line.split() for line in capsys.readouterr().out.splitlines() if line.startswith("  ") and "speakers" not in line]
    assert [(row[0], " ".join(row[1:-2])) for row in rows] == [
        (size, measure) for size in ("40", "90") for measure in ("full build", "bias row after a change", "most like")]
    assert all(float(row[-2]) >= 0 for row in rows)
    assert builds == [40] * 3 + [90] * 3  # the timed full builds only: the 3 changes of each size built none


@pytest.mark.parametrize("args, message", [
    (["--repeats", "0"], "--repeats must be at least 1, got 0"),
    (["--speakers", "1"], "--speakers must be at least 2 each, got 1"),
    (["--vocab", "-3"], "--vocab must be at least 1, got -3"),
])
def test_bad_sizes_are_refused(args, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        words_benchmark.main([*SMALL, *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
