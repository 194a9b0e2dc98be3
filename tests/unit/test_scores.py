"""BLEU/chrF with sacrebleu and the paired bootstrap test."""

import os
import random
import re
import subprocess
import sys

import pytest

from fairseq_speaker.analysis.scores import detokenize, read_hypotheses, score_systems
from tests.helpers import refused


def corpus(seed=0, n=120):
    rng = random.Random(seed)
    words = "le chat la maison un chien mange dort voit petit grand rouge vert".split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(5, 12))) + " ." for _ in range(n)]


def degrade(lines, every, seed=1):
    rng = random.Random(seed)
    out = []
    for i, line in enumerate(lines):
        words = line.split()
        if i % every == 0:
            words = [w if rng.random() < 0.5 else "xx" for w in words]
        out.append(" ".join(words))
    return out


def test_a_system_output_is_read_as_the_references_are(tmp_path):
    """A byte-order mark is no text (it was part of the first hypothesis's first word: BLEU 90.5 for an output equal to
    its references), lines end at a line feed alone (a U+2028 inside a hypothesis made two), CRLF as LF."""
    plain = tmp_path / "plain.txt"
    plain.write_bytes("\ufeffa b c .\r\nd e\u2028f .\n".encode("utf-8"))
    assert read_hypotheses(str(plain)) == ["a b c .", "d e\u2028f ."]
    generated = tmp_path / "generate.txt"
    generated.write_bytes("\ufeffH-1\t-0.5\td e\u2028f .\nH-0\t-0.1\ta b c .\n".encode("utf-8"))
    assert read_hypotheses(str(generated)) == ["a b c .", "d e\u2028f ."]


def test_bleu_and_chrf_agree_with_the_sacrebleu_command_line(tmp_path):
    refs, hyps = corpus(), degrade(corpus(), 2)
    (tmp_path / "ref").write_text("\n".join(refs) + "\n")
    (tmp_path / "hyp").write_text("\n".join(hyps) + "\n")
    scores, signatures = score_systems({"sys": hyps}, refs, "sys")
    sacrebleu = os.path.join(os.path.dirname(sys.executable), "sacrebleu")
    for metric, ours in (("bleu", scores[0].bleu), ("chrf", scores[0].chrf)):
        out = subprocess.run([sacrebleu, str(tmp_path / "ref"), "-i", str(tmp_path / "hyp"), "-m", metric,
                              "-b", "-w", "4"], stdout=subprocess.PIPE, text=True, check=True).stdout
        assert float(out.strip()) == pytest.approx(ours, abs=1e-4)
    assert "tok:13a" in signatures["BLEU"]


def test_bootstrap_is_seeded_and_detects_a_planted_difference():
    refs = corpus()
    systems = {"base": degrade(refs, 2), "better": degrade(refs, 6), "same": degrade(refs, 2)}
    first, signatures = score_systems(systems, refs, "base", samples=300, seed=7)
    again, _ = score_systems(systems, refs, "base", samples=300, seed=7)
    assert [s.__dict__ for s in first] == [s.__dict__ for s in again]
    assert "bs:300|seed:7" in signatures["BLEU"]
    base, better, same = first
    assert base.bleu_p is None and not base.significant
    assert better.bleu > base.bleu and better.bleu_p < 0.05 and better.significant
    assert same.bleu_p == 1.0 and not same.significant  # identical output: no difference at all


def test_a_small_difference_is_not_significant():
    refs = corpus(n=60)
    base = degrade(refs, 3)
    close = list(base)
    close[0] = refs[0]  # one sentence better
    scores, _ = score_systems({"base": base, "close": close}, refs, "base", samples=300)
    assert scores[1].bleu > scores[0].bleu and scores[1].bleu_p > 0.05


def test_mismatched_lengths_and_unknown_baseline():
    with pytest.raises(ValueError, match="has 1 hypotheses for 2 references"):
        score_systems({"a": ["x"]}, ["x", "y"], "a")
    with pytest.raises(ValueError, match="baseline 'b' is not among"):
        score_systems({"a": ["x"]}, ["x"], "b")


def test_read_hypotheses_from_generate_output_or_plain_text(tmp_path):
    generate = tmp_path / "gen.txt"
    generate.write_text("S-1\tb\nH-1\t-0.1\tdeux @@x\nD-1\t-0.1\tdeuxx\nH-0\t-0.2\tun\nD-0\t-0.2\tun\nP-0\t-0.1\n")
    plain = tmp_path / "hyp.txt"
    plain.write_text("un\ndeux @@x\n")
    assert read_hypotheses(str(generate)) == read_hypotheses(str(plain)) == ["un", "deux @@x"]
    assert read_hypotheses(str(generate), kind="D") == ["un", "deuxx"]


def test_detokenize_unescapes_moses():
    assert detokenize(["c&apos; est l&apos; idée ."], "fr") == ["c'est l'idée."]


def test_a_plain_file_whose_hypotheses_start_with_d_dash_is_read_as_plain(tmp_path):
    path = tmp_path / "hyp.txt"
    path.write_text("D-Day was long ago .\nH-bomb tests .\nthe end .\n", encoding="utf-8")
    assert read_hypotheses(str(path)) == ["D-Day was long ago .", "H-bomb tests .", "the end ."]
    path.write_text("S-0\tx\nH-0\t-0.1\tthe end .\nD-0\t-0.1\tThe end.\n", encoding="utf-8")
    assert read_hypotheses(str(path)) == ["the end ."] and read_hypotheses(str(path), "D") == ["The end."]


def test_the_report_checks_its_inputs_before_writing_anything(tmp_path, capsys):
    from fairseq_speaker.analysis.report import main

    refs, hyps, out = tmp_path / "refs.txt", tmp_path / "hyps.txt", tmp_path / "out"
    refs.write_text("", encoding="utf-8")
    hyps.write_text("", encoding="utf-8")
    assert "refs.txt is empty" in refused(main, ["--out", str(out), "--references", str(refs), "--system", f"x={hyps}"],
                                          capsys)
    refs.write_text("a .\nb .\n", encoding="utf-8")
    hyps.write_text("a .\n", encoding="utf-8")
    assert re.search(r"--system x=.*hyps.txt: 1 hypotheses for the 2 references",
                     refused(main, ["--out", str(out), "--references", str(refs), "--system", f"x={hyps}"], capsys))
    assert not out.exists()
