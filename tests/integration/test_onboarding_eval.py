"""fairseq-speaker-onboarding-eval: held-out speakers adapted on n sentences, scored on the sentences after (the
command's main, in this process; its process's output: test_quiet.py)."""

import json
import os

import pytest
import sacrebleu

from fairseq_speaker.data import read_lines
from fairseq_speaker.serving import SpeakerTranslator
from fairseq_speaker.analysis.speaker_words import read_traits, trait_accuracy
from fairseq_speaker.toy.corpus import write_corpus
from tests.cli import call_main

SPEAKERS, SENTENCES, SHOTS = 3, 8, ["0", "1", "5"]


@pytest.fixture(scope="module")
def heldout(tmp_path_factory):
    """Toy sentences of 3 speakers the toy model never saw (new000 ...), 8 each, with their traits."""
    folder = str(tmp_path_factory.mktemp("heldout"))
    write_corpus(folder, {}, num_speakers=8, seed=2, heldout_speakers=SPEAKERS, heldout_sentences=SENTENCES)
    return os.path.join(folder, "heldout")


def evaluate(toy, checkpoint, prefix, out, *extra, check=True):
    return call_main("fairseq-speaker-onboarding-eval", [toy["bin"], "--path", checkpoint, "--heldout-prefix", prefix,
                                                         "--out", str(out), "--max-len-b", "6", *extra], check=check)


def test_a_row_per_n_and_n0_is_the_mean_speaker(toy, trained, heldout, tmp_path):
    checkpoint = trained("lstm_full_bias")
    proc = evaluate(toy, checkpoint, heldout, tmp_path, "--shots", *SHOTS)
    for name in ("onboarding.md", "onboarding.json", "onboarding.png"):
        assert os.path.getsize(tmp_path / name) > 0, name
    table = [line for line in read_lines(str(tmp_path / "onboarding.md")) if line.startswith("| ")]
    assert table[0].startswith("| n | BLEU | speaker words | gender | address | profession |")
    assert [row.split(" | ")[0] for row in table[1:]] == ["| 0", "| 1", "| 5"]
    assert all(row in proc.stdout for row in table)
    assert "is not among the model's" not in proc.stderr  # n = 0 is the mean speaker by design, not a warning

    with open(tmp_path / "onboarding.json", encoding="utf-8") as f:
        result = json.load(f)
    assert [row["n"] for row in result["rows"]] == [0, 1, 5]
    # what the fits took: none for n = 0 (no fit), the median of the speakers' fits otherwise, in the table too
    assert table[0].endswith("| fit evaluations | adapt s |")
    assert "fit_evaluations" not in result["rows"][0] and table[1].endswith(" | - | 0.00 |")
    for row, line in zip(result["rows"][1:], table[2:]):
        assert row["fit_evaluations"] >= 1 and row["fit_iterations"] >= 1
        assert line.endswith(f" | {row['fit_evaluations']:g} | {row['adapt_seconds']:.2f} |")
    assert result["speakers"] == SPEAKERS and result["eval_sentences"] == SPEAKERS * (SENTENCES - 5)
    # the same sentences for every n: each speaker's after their first 5
    labels, sources = read_lines(f"{heldout}.spk"), read_lines(f"{heldout}.en")
    evaluated = [i - 1 for i in result["eval_lines"]]
    for i in evaluated:
        assert labels[:i].count(labels[i]) >= 5
    assert len(evaluated) == SPEAKERS * (SENTENCES - 5)

    # the scores are those of the hypotheses written
    references = [read_lines(f"{heldout}.fr")[i] for i in evaluated]
    traits = [read_traits(f"{heldout}.traits")[i] for i in evaluated]
    for row in result["rows"]:
        hyps = read_lines(str(tmp_path / f"hypotheses.n{row['n']}.txt"))
        assert row["bleu"] == pytest.approx(sacrebleu.corpus_bleu(hyps, [references], tokenize="none").score)
        assert row["traits"] == pytest.approx(trait_accuracy(hyps, traits))

    # n = 0 translates as an unknown speaker (the mean speaker) of the checkpoint as trained;
    # n = 5 as a speaker added from their first 5 sentences
    translator = SpeakerTranslator.from_pretrained(checkpoint, data=toy["bin"], max_len_b=6)
    unknown = translator.translate([sources[i] for i in evaluated], speakers="someone-new", beam=5, max_len_b=6)
    assert read_lines(str(tmp_path / "hypotheses.n0.txt")) == unknown
    targets = read_lines(f"{heldout}.fr")
    for speaker in sorted(set(labels)):
        first = [i for i, label in enumerate(labels) if label == speaker][:5]
        translator.add_speaker(speaker, [sources[i] for i in first], [targets[i] for i in first])
    adapted = translator.translate([sources[i] for i in evaluated], speakers=[labels[i] for i in evaluated],
                                   beam=5, max_len_b=6)
    assert read_lines(str(tmp_path / "hypotheses.n5.txt")) == adapted


def test_user_errors_are_one_line(toy, trained, heldout, tmp_path):
    cases = [
        (trained("lstm_full_bias"), heldout, ["--shots", "0", str(SENTENCES)],
         [f"{heldout}.spk: speaker 'new00", f"' has {SENTENCES} sentence(s) (and 2 more speaker(s)), but --shots "
          f"{SENTENCES} needs at least {SENTENCES + 1} per speaker"]),
        (trained("lstm_base"), heldout, [], ["this model has no speaker parameters", "so there is nothing to adapt"]),
        (trained("lstm_full_bias"), str(tmp_path / "missing"), [], [f"file not found: expected {tmp_path}/missing.en"]),
    ]
    for checkpoint, prefix, extra, messages in cases:
        proc = evaluate(toy, checkpoint, prefix, tmp_path / "out", *extra, check=False)
        last = proc.stderr.strip().splitlines()[-1]
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
        assert last.startswith("fairseq-speaker-onboarding-eval: ") and all(m in last for m in messages), last


def test_held_out_speakers_the_model_has_are_said_to_keep_their_rows(toy, trained, tmp_path):
    """The note said they were "evaluated as new speakers all the same", though their rows and words stay in the
    model, where a fit may start from them."""
    prefix = os.path.join(toy["raw"], "test")  # the training speakers' test sentences
    proc = evaluate(toy, trained("lstm_full_bias"), prefix, tmp_path / "out", "--shots", "0", "1")
    assert f"note: 8 speaker(s) of {prefix}.spk were seen in training or onboarded ('spk000', 'spk001', 'spk002' " \
           f"...): they are evaluated as new speakers, but their own rows and words stay in the model" in proc.stderr


def test_the_documented_command_parses():
    """docs/onboarding.md's evaluation of the demo's model (tests/system/test_onboarding.py runs it)."""
    from fairseq_speaker.onboarding.evaluate import build_parser
    from tests.documents import command_lines

    commands = [command.split() for _, command in command_lines(["fairseq-speaker-onboarding-eval"],
                                                                 ["docs/onboarding.md"])]
    assert commands
    for argv in commands:
        args = build_parser().parse_args(argv[1:])
        assert args.heldout_prefix and args.shots == [0, 1, 2, 5, 10, 20]


@pytest.fixture(scope="module")
def styles_heldout(tmp_path_factory):
    """Held-out speakers of a styles-mode corpus (2 styles), 6 sentences each, its speakers.json beside them. The
    words are not all the toy model's: its scores are low, the oracle's are what is checked."""
    folder = str(tmp_path_factory.mktemp("styles"))
    write_corpus(folder, {}, num_speakers=4, seed=3, heldout_speakers=3, heldout_sentences=6, styles=2)
    return os.path.join(folder, "heldout")


def test_a_styles_corpus_gets_the_bayes_limit_beside_every_n(toy, trained, styles_heldout, tmp_path):
    """The held-out files of a styles-mode corpus: its speakers.json is found beside them, and every n gets a row
    of the Bayes limit for the same speakers known from the same first n sentences, scored on the same sentences
    (the oracle's own arithmetic is checked against enumeration in tests/unit/test_oracle.py); the JSON holds it
    and the plot is drawn. --oracle none goes without."""
    from fairseq_speaker.toy.corpus import read_styles
    from fairseq_speaker.toy.oracle import onboarding_oracle

    checkpoint = trained("lstm_full_bias")
    proc = evaluate(toy, checkpoint, styles_heldout, tmp_path / "auto", "--shots", "0", "1", "3")
    with open(tmp_path / "auto" / "onboarding.json", encoding="utf-8") as f:
        result = json.load(f)
    model = os.path.join(os.path.dirname(styles_heldout), "speakers.json")
    assert result["oracle_model"] == model
    styles = read_styles(model)
    labels, traits = read_lines(f"{styles_heldout}.spk"), read_traits(f"{styles_heldout}.traits")
    assert [row["n"] for row in result["oracle"]] == [0, 1, 3]
    for row in result["oracle"]:
        assert row["traits"] == pytest.approx(onboarding_oracle(styles, labels, traits, row["n"], 3))
    assert result["oracle"][0]["traits"]["gender"] == pytest.approx(0.5)  # n = 0: a coin for every gender word
    assert result["oracle"][2]["traits"]["all"] > result["oracle"][0]["traits"]["all"]
    table = [line for line in proc.stdout.splitlines() if line.startswith("| ")]
    assert [line.split(" | ")[0] for line in table[1:]] == \
        ["| 0", "| 0, Bayes limit", "| 1", "| 1, Bayes limit", "| 3", "| 3, Bayes limit"]
    limit = result["oracle"][1]["traits"]
    assert f"| 1, Bayes limit | - | {100 * limit['all']:.1f}% | {100 * limit['gender']:.1f}% |" in proc.stdout
    assert "'Bayes limit'" in proc.stdout and os.path.getsize(tmp_path / "auto" / "onboarding.png") > 0
    without = evaluate(toy, checkpoint, styles_heldout, tmp_path / "none", "--shots", "0", "1", "3", "--oracle", "none")
    assert "Bayes limit" not in without.stdout
    with open(tmp_path / "none" / "onboarding.json", encoding="utf-8") as f:
        assert "oracle" not in json.load(f)
