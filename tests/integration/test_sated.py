"""SATED preparation on a hand-written fixture, the per-pair recipes at toy scale through the real CLIs, and raw text
in and out of a model trained on the prepared data (docs/sated.md)."""

import glob
import importlib.util
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import torch
from sacremoses import MosesDetokenizer

from fairseq_speaker.data import SpeakerDictionary
from tests import documents
from tests.cli import BIN, USER_DIR, assert_user_error, call_main, run, run_here, train_args

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SATED = os.path.join(ROOT, "examples", "sated")
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "sated")
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHON=sys.executable)


def lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def script(name: str):
    """examples/sated/NAME.py as a module, to call its ``main`` in this process."""
    spec = importlib.util.spec_from_file_location(f"sated_{name}", os.path.join(SATED, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def prepare_script(*args):
    """prepare.py run as the docs run it: a process of its own."""
    return subprocess.run([sys.executable, os.path.join(SATED, "prepare.py"), *args], env=ENV,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def prepare(*args):
    """prepare.py's main in this process (its fairseq-preprocess still a process): the same outcome as
    :func:`prepare_script` without a Python start (the ``prepared`` fixture runs the script itself)."""
    return call_main(script("prepare").main, args, check=False)


@pytest.fixture(scope="module")
def prepared(once):
    """The fixture prepared (once for all test workers): the output folder and what prepare.py printed."""
    def make(folder):
        out = os.path.join(folder, "en-fr")
        proc = prepare_script("--input", os.path.join(FIXTURE, "en-fr"), "--src", "en", "--tgt", "fr", "--out", out)
        assert proc.returncode == 0, proc.stderr
        with open(os.path.join(folder, "stdout.txt"), "w", encoding="utf-8") as f:
            f.write(proc.stdout)

    folder = once("sated-prepared", make)
    with open(os.path.join(folder, "stdout.txt"), encoding="utf-8") as f:
        return os.path.join(folder, "en-fr"), f.read()


def test_long_pairs_are_dropped_with_their_speaker_labels(prepared):
    out, stdout = prepared
    src, tgt, spk = (lines(os.path.join(out, "text", f"train.{ext}")) for ext in ("en", "fr", "spk"))
    original = lines(os.path.join(FIXTURE, "en-fr", "train.en"))
    assert len(original) == 24 and len(src) == len(tgt) == len(spk) == 23
    assert max(len(s.split()) for s in src) <= 60
    # the dropped pair was talk_2's: every remaining line keeps its own speaker
    expected = [(s, u) for s, u in zip(original, lines(os.path.join(FIXTURE, "en-fr", "train.usr")))
                if len(s.split()) <= 60]
    assert list(zip(src, spk)) == expected
    assert "kept 23 of 24 pairs" in stdout


def test_dev_and_test_are_kept_whole_and_renamed(prepared):
    out, _ = prepared
    assert lines(os.path.join(out, "text", "valid.fr")) == lines(os.path.join(FIXTURE, "en-fr", "dev.fr"))
    assert lines(os.path.join(out, "bin", "test.spk")) == lines(os.path.join(FIXTURE, "en-fr", "test.usr"))
    for split in ("train", "valid", "test"):
        assert os.path.exists(os.path.join(out, "bin", f"{split}.en-fr.en.bin"))
        assert os.path.exists(os.path.join(out, "bin", f"{split}.spk"))


def test_moses_escapes_of_the_release_are_kept(prepared):
    out, _ = prepared
    text = " ".join(lines(os.path.join(out, "text", "train.en")) + lines(os.path.join(out, "text", "train.fr")))
    assert "&apos;s" in text and "c&apos;" in text and "&amp;" not in text
    vocabulary = [line.split()[0] for line in lines(os.path.join(out, "bin", "dict.fr.txt"))]
    assert "c&apos;" in vocabulary


def test_vocabulary_keeps_words_seen_at_least_twice(prepared):
    out, _ = prepared
    counts = {}
    for line in lines(os.path.join(out, "text", "train.fr")):
        for word in line.split():
            counts[word] = counts.get(word, 0) + 1
    vocabulary = {line.split()[0] for line in lines(os.path.join(out, "bin", "dict.fr.txt"))}
    words = {w for w in vocabulary if not w.startswith("madeupword")}
    assert words == {w for w, n in counts.items() if n >= 2}
    assert "heureux" in words and "médecin" in words and "bien" not in words


def test_rare_and_unseen_speakers_are_kept_and_reported(prepared):
    out, stdout = prepared
    stats = json.load(open(os.path.join(out, "prepare.json")))
    assert stats["speakers_under_10_sentences"] == ["talk_2", "talk_3"]
    assert stats["speakers_unseen_in_training"] == ["talk_4"]
    assert "3 speakers, 2 with fewer than 10 training sentences" in stdout
    assert set(lines(os.path.join(out, "bin", "train.spk"))) == {"talk_1", "talk_2", "talk_3"}


def test_raw_text_is_tokenized_and_lowercased_like_the_release(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    rows = {"train": [("It's a good idea.", "C'est une bonne idée.", "ann")] * 3 + [
                ("I saw Paris.", "J'ai vu Paris.", "ann"), ("He said yes.", "Il a dit oui.", "ann"),
                ("- Yes.", "- Oui.", "ann"), ("- Yes!", "- Oui !", "ann")],
            "dev": [("Thank you!", "Merci !", "ann")], "test": [("It's mine.", "C'est à moi.", "bob")]}
    for split, data in rows.items():
        for i, ext in enumerate(("en", "fr", "spk")):
            (raw / f"{split}.{ext}").write_text("".join(r[i] + "\n" for r in data), encoding="utf-8")
    out = str(tmp_path / "out")
    proc = prepare("--input", str(raw), "--src", "en", "--tgt", "fr", "--speaker-ext", "spk", "--raw", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert lines(os.path.join(out, "text", "train.en"))[0] == "it &apos;s a good idea ."
    assert lines(os.path.join(out, "text", "train.fr"))[0] == "c&apos; est une bonne idée ."
    # the case the lowercasing took is learnt from the cased translations, and restored when decoding
    record = json.load(open(os.path.join(out, "bin", "preprocessing.json")))
    assert record["tokenizer"]["recase"] is True and record["tokenizer"]["truecase_model"] == "truecase.fr"
    assert "each word's most frequent casing in the training translations" in proc.stdout
    from fairseq_speaker.data import preprocessing

    tokenizer = preprocessing.build("tokenizer", preprocessing.read_record(
        os.path.join(out, "bin", "preprocessing.json"), "en", "fr"))
    assert tokenizer.decode("c&apos; est paris .") == "C'est Paris."
    assert tokenizer.decode("il a dit oui .") == "Il a dit oui."  # "- Oui" starts a sentence: not learnt from


def test_misaligned_input_is_refused_and_nothing_is_replaced(tmp_path):
    corpus = tmp_path / "en-fr"
    shutil.copytree(os.path.join(FIXTURE, "en-fr"), corpus)
    with open(corpus / "train.usr", "a") as f:
        f.write("talk_9\n")
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    proc = prepare("--input", str(corpus), "--src", "en", "--tgt", "fr", "--out", str(out))
    assert proc.returncode != 0
    assert f"{corpus}/train.usr: 25 speaker labels but the text has 24 sentences" in proc.stderr
    assert (out / "precious.txt").read_text() == "keep me"
    # a folder that is not an earlier output is never deleted
    labels = lines(os.path.join(FIXTURE, "en-fr", "train.usr"))
    (corpus / "train.usr").write_text("".join(labels[i] + "\n" for i in range(24)))
    proc = prepare("--input", str(corpus), "--src", "en", "--tgt", "fr", "--out", str(out))
    assert proc.returncode != 0 and "is not an earlier output of prepare.py" in proc.stderr
    assert (out / "precious.txt").exists()


@pytest.mark.slow  # the recipe's other runs; its first run, resume refusals and raw text stay in the default run
def test_the_manual_flow_reads_sateds_dev_speakers_for_the_valid_split(tmp_path):
    """fairseq-preprocess names SATED's dev split valid; its speaker file keeps SATED's name, dev.usr."""
    corpus, data = os.path.join(FIXTURE, "en-fr"), str(tmp_path / "bin")
    run("preprocess", ["--source-lang", "en", "--target-lang", "fr", "--trainpref", f"{corpus}/train",
                       "--validpref", f"{corpus}/dev", "--testpref", f"{corpus}/test", "--destdir", data,
                       "--workers", "1"])
    for path in glob.glob(os.path.join(corpus, "*.usr")):
        shutil.copy(path, data)
    args = train_args(data, str(tmp_path / "ckpt"), "lstm_fact_bias", "--max-epoch", "1", "--speaker-suffix", "usr")
    proc = run_here("train", args)
    assert f"valid: no valid.usr, speaker labels read from {data}/dev.usr" in proc.log + proc.stdout
    assert os.path.exists(tmp_path / "ckpt" / "checkpoint_best.pt")

    os.remove(os.path.join(data, "dev.usr"))
    proc = run("train", args, check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(
        f"error: speaker file not found: expected {data}/valid.usr; put one speaker label per sentence of the "
        f"valid split there or in {data}/dev.usr (SATED's name for that split)")


def recipe_script(*options):
    """recipe.py run as the docs run it: a process of its own."""
    return subprocess.run([sys.executable, os.path.join(SATED, "recipe.py"), *options], env=ENV,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def recipe(*options):
    """recipe.py's main in this process (its fairseq commands still processes): the same outcome as
    :func:`recipe_script` without a Python start (the ``toy_run`` fixture runs the script itself)."""
    return call_main(script("recipe").main, options, check=False)


@pytest.fixture(scope="module")
def toy_run(prepared, once):
    """The base system trained by the recipe at toy sizes, two epochs a stage (once for all test workers)."""
    data, _ = prepared

    def options(folder):
        return ["--data", data, "--pair", "en-fr", "--out", os.path.join(folder, "runs"), "--systems", "base", "--toy",
                "--max-epoch", "2"]

    def make(folder):
        proc = recipe_script(*options(folder))
        assert proc.returncode == 0, proc.stderr[-3000:]
        with open(os.path.join(folder, "stdout.txt"), "w", encoding="utf-8") as f:
            f.write(proc.stdout)

    folder = once("sated-recipe", make)
    with open(os.path.join(folder, "stdout.txt"), encoding="utf-8") as f:
        return pathlib.Path(folder) / "runs", options(folder), f.read()


def test_toy_runs_the_epochs_max_epoch_asks_for(toy_run):
    out, *_ = toy_run
    for stage in ("adam", "sgd"):
        log = (out / "base" / f"{stage}.log").read_text()
        assert "--max-epoch 2" in log.splitlines()[0] and "--max-epoch 1" not in log.splitlines()[0]
        assert "end of epoch 2 " in log and "end of epoch 3 " not in log


def stamps(folder):
    return {str(p): p.stat().st_mtime_ns for p in folder.rglob("*")}


@pytest.mark.slow  # the recipe's other runs; its first run, resume refusals and raw text stay in the default run
def test_a_folder_run_with_other_settings_is_refused_saying_what_differs(toy_run, prepared, tmp_path):
    out, *_ = toy_run
    before = stamps(out)
    other = tmp_path / "other"
    shutil.copytree(prepared[0], other)
    with open(other / "bin" / "train.spk", "a", encoding="utf-8") as f:
        f.write("talk_1\n")
    common = ["--pair", "en-fr", "--out", str(out), "--systems", "base"]
    cases = [
        (["--data", prepared[0], "--toy", "--max-epoch", "2", "--family", "transformer"],
         "--family lstm then, transformer now"),
        (["--data", prepared[0], "--toy"], "--max-epoch 2 then, not given now"),
        (["--data", prepared[0], "--max-epoch", "2"], "--toy on then, off now"),
        (["--data", str(other), "--toy", "--max-epoch", "2"], "other data, the files of --data's bin/ differ"),
    ]
    for options, difference in cases:
        proc = recipe(*common, *options)
        assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        message = proc.stderr.strip().splitlines()[-1]
        assert message.startswith(f"recipe.py: error: {out} holds a run with other settings ("), message
        assert difference in message, message
        assert message.endswith(f"give another --out (with run.sh, another WORK_DIR) or delete {out} to start again")
    assert stamps(out) == before  # nothing trained, nothing written


def test_a_used_folder_without_the_record_of_a_run_is_refused(prepared, tmp_path):
    out = tmp_path / "runs"
    (out / "base" / "adam").mkdir(parents=True)
    (out / "base" / "adam" / "checkpoint_last.pt").write_bytes(b"a checkpoint of unknown settings")
    proc = recipe("--data", prepared[0], "--pair", "en-fr", "--out", str(out), "--systems", "base", "--toy")
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    message = proc.stderr.strip().splitlines()[-1]
    assert message.startswith(f"recipe.py: error: {out} is not empty but has no recipe.json"), message
    assert message.endswith(f"or delete {out} to start again")
    assert (out / "base" / "adam" / "checkpoint_last.pt").read_bytes() == b"a checkpoint of unknown settings"


@pytest.mark.slow  # the recipe's other runs; its first run, resume refusals and raw text stay in the default run
def test_the_same_settings_resume_the_run(toy_run, tmp_path):
    out, options, _ = toy_run
    copy = tmp_path / "runs"
    shutil.copytree(out, copy)
    options = [str(copy) if o == str(out) else o for o in options]
    checkpoints = {p: p.stat().st_mtime_ns for p in copy.rglob("*.pt")}
    results = json.load(open(copy / "results.json"))

    proc = recipe(*options)  # everything was finished: nothing is trained or decoded again
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[base] Adam: finished by an earlier run, kept" in proc.stdout
    assert "[base] SGD tuning from the best Adam model: finished by an earlier run, kept" in proc.stdout
    assert "(scored by an earlier run)" in proc.stdout
    assert {p: p.stat().st_mtime_ns for p in copy.rglob("*.pt")} == checkpoints
    assert json.load(open(copy / "results.json")) == results

    # a stage that did not finish goes on from its own last checkpoint, not from the Adam model
    record = json.load(open(copy / "recipe.json"))
    record["finished"].remove("base/sgd")
    (copy / "recipe.json").write_text(json.dumps(record))
    proc = recipe(*options)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"SGD tuning from the best Adam model: resuming from {copy}/base/sgd/checkpoint_last.pt" in proc.stdout
    log = (copy / "base" / "sgd.log").read_text()
    assert "--restore-file" not in log.splitlines()[0]
    assert f"Loaded checkpoint {copy}/base/sgd/checkpoint_last.pt" in log
    assert "base/sgd" in json.load(open(copy / "recipe.json"))["finished"]


def run_recipe(pair, work, *options):
    script = os.path.join(SATED, f"run_{pair.replace('-', '_')}.sh")
    return subprocess.run([script, str(work["sated"]), str(work["out"]), "--toy", *options], env=ENV,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def work(tmp_path):
    """The fixture under every pair's name (the recipe only needs the layout)."""
    sated = tmp_path / "sated"
    for pair in ("en-fr", "en-es", "en-de"):
        tgt = pair.split("-")[1]
        (sated / pair).mkdir(parents=True)
        for name in os.listdir(os.path.join(FIXTURE, "en-fr")):
            shutil.copy(os.path.join(FIXTURE, "en-fr", name), sated / pair / name.replace(".fr", f".{tgt}"))
    return {"sated": sated, "out": tmp_path / "work"}


@pytest.mark.slow  # four systems trained through the recipe (a minute); the recipe's other tests stay in the default run
def test_en_fr_recipe_runs_the_four_systems(work):
    proc = run_recipe("en-fr", work)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = work["out"] / "en-fr" / "runs"
    results = json.load(open(runs / "results.json"))
    assert [r["system"] for r in results["systems"]] == ["base", "spk_token", "full_bias", "fact_bias"]
    table = (runs / "results.md").read_text()
    assert "| spk_token |" in table and "| 38.85 |" in table and "| 39.01 |" in table
    for system in ("base", "spk_token", "full_bias", "fact_bias"):
        assert (runs / system / "sgd" / "checkpoint_best.pt").exists()
        assert len(lines(runs / system / "test.hyp")) == 4
        assert "<spk:" not in (runs / system / "test.hyp").read_text()
    # the SGD pass started from the best Adam model, with its own optimizer
    log = (runs / "fact_bias" / "sgd.log").read_text()
    assert f"Loaded checkpoint {runs}/fact_bias/adam/checkpoint_best.pt" in log
    assert "--optimizer sgd --lr 1.0 --clip-norm 0.1" in log.splitlines()[0]
    assert "--lr-scheduler restart_from_best" in log.splitlines()[0]


# en-fr in the default run (above); en-es and en-de, the same script, in the slow tier
@pytest.mark.slow
@pytest.mark.parametrize("pair,paper", [("en-es", "39.88"), ("en-de", "26.94")])
def test_other_pairs_recipe(work, pair, paper):
    proc = run_recipe(pair, work, "--systems", "fact_bias")
    assert proc.returncode == 0, proc.stderr[-3000:]
    table = (work["out"] / pair / "runs" / "results.md").read_text()
    assert "| fact_bias |" in table and f"| {paper} |" in table
    speakers = SpeakerDictionary.load(str(work["out"] / pair / "data" / "bin" / "dict.spk.txt"))
    assert len(speakers) == 3


@pytest.mark.slow  # the same recipe as above with --family transformer: in the slow tier
def test_transformer_family_runs_the_same_systems_as_transformers(work):
    proc = run_recipe("en-fr", work, "--family", "transformer", "--systems", "base", "fact_bias")
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = work["out"] / "en-fr" / "runs"
    results = json.load(open(runs / "results.json"))
    assert results["family"] == "transformer"
    for row in results["systems"]:  # sacrebleu's signature, not the score's text
        assert row["signature"].startswith("nrefs:1|") and "|tok:none|" in row["signature"], row["signature"]
    assert [r["system"] for r in results["systems"]] == ["base", "fact_bias"]
    for system, arch in (("base", "transformer_base"), ("fact_bias", "transformer_fact_bias")):
        state = torch.load(runs / system / "adam" / "checkpoint_best.pt", weights_only=True)
        assert vars(state["cfg"]["model"])["_name"] == arch  # an argparse model, as fairseq's transformer
        assert not (runs / system / "sgd").exists()  # one stage
        assert len(lines(runs / system / "test.hyp")) == 4
    assert "--lr-scheduler inverse_sqrt" in (runs / "fact_bias" / "adam.log").read_text().splitlines()[0]


# -- raw text in, raw text out (docs/sated.md) ---------------------------------------------------------------

#: the fixture's dev sentences as a user types them: prepare.py's tokenization makes them the lines of dev.en
RAW_DEV = ["I am happy.", "Thank you.", "It's my idea."]
DOCS = "docs/sated.md"
#: the paths docs/sated.md's commands name, and the speaker they translate as
DOC_DATA, DOC_MODEL, DOC_OLD_MODEL = "data/en-fr/bin", "runs/en-fr/fact_bias/sgd/checkpoint_best.pt", \
    "old/checkpoint_best.pt"
SPEAKER = "talk_3"


def detokenize(line: str) -> str:
    return MosesDetokenizer(lang="fr").detokenize(line.split())


def raw_text(line: str) -> str:
    """What the recipe's models give for ``line`` (one sentence in the model's tokens): detokenized, its first
    letter capitalized."""
    text = detokenize(line)
    return text[:1].upper() + text[1:]


@pytest.fixture(scope="module")
def raw_model(prepared, once):
    """A tiny model trained through the test helpers on the data prepare.py made, with what it recorded (once for
    all test workers)."""
    data = os.path.join(prepared[0], "bin")
    save = once("sated-raw-model", lambda folder: run_here("train", train_args(
        data, folder, "lstm_fact_bias", "--max-epoch", "60", "--lr", "0.02", "--no-epoch-checkpoints")))
    return {"data": data, "checkpoint": os.path.join(save, "checkpoint_best.pt"),
            "text": os.path.join(prepared[0], "text")}


@pytest.fixture(scope="module")
def unrecorded(raw_model, tmp_path_factory):
    """The same model without the record: as a checkpoint trained before the record existed."""
    state = torch.load(raw_model["checkpoint"], weights_only=True)
    del state["task_state"]["preprocessing"]
    path = str(tmp_path_factory.mktemp("unrecorded") / "checkpoint_best.pt")
    torch.save(state, path)
    return path


def interactive_lines(model, sentences, *extra, checkpoint=None):
    """fairseq-interactive's S-, H- and D- texts (the score left out) of ``sentences`` as talk_3 (its main in this
    process: the documented command lines below run as processes)."""
    proc = run_here("interactive", [model["data"], "--user-dir", USER_DIR, "--task", "speaker_translation", "--path",
                               checkpoint or model["checkpoint"], "--source-lang", "en", "--target-lang", "fr",
                               "--beam", "5", "--speaker", SPEAKER, *extra], stdin="".join(s + "\n" for s in sentences))
    return {kind: [line.split("\t")[-1] for line in proc.stdout.splitlines() if line.startswith(kind + "-")]
            for kind in "SHD"}


def test_prepare_records_its_preprocessing_with_the_data(prepared, tmp_path):
    out, stdout = prepared
    expected = {"tokenizer": {"name": "moses_lowercase", "source_lang": "en", "target_lang": "fr", "recase": True},
                "bpe": None}  # the release is lowercase: no truecasing model to learn, sentence starts recased
    assert json.load(open(os.path.join(out, "bin", "preprocessing.json"))) == expected
    assert json.load(open(os.path.join(out, "prepare.json")))["preprocessing"] == expected
    assert f"recorded in {out}/bin/preprocessing.json" in stdout
    # --preprocessing none: text tokenized some other way, nothing recorded
    proc = prepare("--input", os.path.join(FIXTURE, "en-fr"), "--src", "en", "--tgt", "fr", "--preprocessing", "none",
                   "--out", str(tmp_path / "other"))
    assert proc.returncode == 0, proc.stderr
    assert json.load(open(tmp_path / "other" / "bin" / "preprocessing.json")) == {"tokenizer": None, "bpe": None}
    proc = prepare("--input", os.path.join(FIXTURE, "en-fr"), "--src", "en", "--tgt", "fr", "--preprocessing", "none",
                   "--raw", "--out", str(tmp_path / "raw"))
    assert proc.returncode == 2 and "--raw tokenizes the text with moses_lowercase" in proc.stderr
    assert not (tmp_path / "raw").exists()


def test_the_checkpoint_keeps_the_preprocessing_of_its_data(raw_model):
    record = torch.load(raw_model["checkpoint"], weights_only=True)["task_state"]["preprocessing"]
    assert record["tokenizer"] == {"name": "moses_lowercase", "options": {"source_lang": "en", "target_lang": "fr",
                                                                          "recase": True, "truecase_model": None},
                                   "sha256": {}}
    assert record["bpe"] is None and record["source"] == os.path.join(raw_model["data"], "preprocessing.json")


def test_fairseq_interactive_reads_raw_text_as_the_data_was_made_and_detokenizes(raw_model):
    tokenized = lines(os.path.join(raw_model["text"], "valid.en"))
    raw = interactive_lines(raw_model, RAW_DEV)
    assert raw["S"] == tokenized  # the dev sentences' tokens, from their raw form
    before = interactive_lines(raw_model, tokenized, "--preprocessing", "none")  # the model's tokens, as before
    assert before["S"] == tokenized and raw["H"] == before["H"] and before["D"] == before["H"]
    assert raw["D"] == [raw_text(h) for h in raw["H"]]
    assert not any("&apos;" in d or d.endswith(" .") for d in raw["D"])


def test_fairseq_generate_keeps_the_models_tokens_in_h_lines_and_detokenizes_the_others(raw_model):
    proc = run_here("generate", [raw_model["data"], "--user-dir", USER_DIR, "--task", "speaker_translation", "--path",
                                 raw_model["checkpoint"], "--gen-subset", "valid", "--beam", "5"])

    def texts(kind):  # sentence id -> the line's text
        return {int(line.split("\t")[0][2:]): line.split("\t")[-1] for line in proc.stdout.splitlines()
                if line.startswith(kind + "-")}

    references = lines(os.path.join(raw_model["text"], "valid.fr"))
    assert texts("T") == {i: raw_text(r) for i, r in enumerate(references)}
    hypotheses = texts("H")
    vocabulary = {line.split()[0] for line in lines(os.path.join(raw_model["data"], "dict.fr.txt"))}
    assert len(hypotheses) == 3 and all(set(h.split()) <= vocabulary for h in hypotheses.values())
    assert texts("D") == {i: raw_text(h) for i, h in hypotheses.items()}


def test_an_explicit_tokenizer_wins_over_the_checkpoints(raw_model):
    assert interactive_lines(raw_model, ["It's my idea."], "--tokenizer", "space")["S"] == ["<unk> my <unk>"]


def test_a_checkpoint_without_a_record_reads_as_before_and_takes_the_tokenizer_by_hand(raw_model, unrecorded):
    assert interactive_lines(raw_model, ["It's my idea."], checkpoint=unrecorded)["S"] == ["<unk> my <unk>"]
    named = interactive_lines(raw_model, RAW_DEV, "--tokenizer", "moses_lowercase", "--recase", checkpoint=unrecorded)
    assert named == interactive_lines(raw_model, RAW_DEV)
    lowercase = interactive_lines(raw_model, RAW_DEV, "--tokenizer", "moses_lowercase", checkpoint=unrecorded)
    assert lowercase["D"] == [detokenize(h) for h in named["H"]]  # the tokenizer's own default: no recasing


def test_speaker_translator_and_the_service_take_raw_text(raw_model):
    from fastapi.testclient import TestClient

    from fairseq_speaker.service.app import create_app, parse_args
    from fairseq_speaker.serving import SpeakerTranslator

    tokenized = lines(os.path.join(raw_model["text"], "valid.en"))
    plain = SpeakerTranslator.from_pretrained(raw_model["checkpoint"], data=raw_model["data"], preprocessing="none")
    expected = [raw_text(t) for t in plain.translate(tokenized, speakers=SPEAKER)]
    args, overrides, limits = parse_args([raw_model["checkpoint"], "--data", raw_model["data"]])
    translator = SpeakerTranslator.from_pretrained(raw_model["checkpoint"], data=raw_model["data"], **overrides)
    assert translator.translate(RAW_DEV, speakers=SPEAKER) == expected
    with TestClient(create_app(translator, None, token=None, limits=limits, batching=args.batching)) as client:
        answer = client.post("/translate", json={"sentences": RAW_DEV, "speaker": SPEAKER})
    assert answer.status_code == 200, answer.text
    assert [t["text"] for t in answer.json()["translations"]] == expected
    assert parse_args([raw_model["checkpoint"], "--data", raw_model["data"], "--preprocessing", "none"])[1][
        "preprocessing"] == "none"
    # onboarding pairs are raw too: the translation tokenized with French rules, as prepare.py did
    source, target = translator.encode_pairs(["It's my idea."], ["C'est mon idée."])[0]
    task = translator.task
    assert task.source_dictionary.string(source) == "it &apos;s my idea ."
    assert task.target_dictionary.string(target) == "c&apos; est mon idée ."


def test_the_recipe_ends_with_a_raw_text_command_that_works(toy_run, prepared):
    *_, stdout = toy_run
    last = stdout.strip().splitlines()[-1]
    assert last.startswith("raw text in, raw text out (docs/sated.md): echo \"It's a good idea.\" | "
                           "fairseq-interactive ")
    command = last.split(": ", 1)[1].replace("SPEAKER", SPEAKER)
    proc = subprocess.run(["bash", "-c", command], env=dict(ENV, PATH=BIN + os.pathsep + os.environ["PATH"]),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "S-0\tit &apos;s a good idea ." in proc.stdout.splitlines()
    assert "D-0\t" in proc.stdout and "&apos;" not in proc.stdout.split("D-0\t")[1].splitlines()[0]


def doc_section() -> str:
    return documents.read(DOCS).split("## Raw text in, raw text out\n", 1)[1].split("\n## ", 1)[0]


def doc_commands(section: str):
    """The command lines of the section's code, whole (with what they pipe in)."""
    return [line for line in documents.code_lines(section)
            if line.split(" ")[0] in ("printf", "echo", "fairseq-interactive", "fairseq-speaker-serve")]


def doc_shell(command: str, model, checkpoint=None) -> subprocess.CompletedProcess:
    command = (command.replace(DOC_DATA, model["data"]).replace(DOC_MODEL, model["checkpoint"])
               .replace(DOC_OLD_MODEL, checkpoint or DOC_OLD_MODEL))
    return subprocess.run(["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(ENV, USER_DIR=USER_DIR, PATH=BIN + os.pathsep + os.environ["PATH"]))


def _scores_rounded(line: str) -> str:
    """A line of fairseq's output with its scores to 4 decimals: the model is trained by the tests, and its scores'
    last digits follow the machine's floating-point sums (6e-7 apart between two machines of the same code)."""
    return re.sub(r"-?\d+\.\d{5,}", lambda m: f"{float(m.group()):.4f}", line)


def test_the_documented_round_trip_runs_as_the_page_shows(raw_model, unrecorded):
    section = doc_section()
    commands = doc_commands(section)
    assert len(commands) == 3, commands
    first = doc_shell(commands[0], raw_model)
    assert first.returncode == 0, first.stderr[-3000:]
    shown = [_scores_rounded(line) for line in documents.code_lines(section) if re.match(r"[SHD]-\d\t", line)]
    printed = first.stdout.splitlines()
    assert shown and all(line in map(_scores_rounded, printed) for line in shown), (shown, printed)
    assert lines(os.path.join(raw_model["text"], "valid.en")) == [l.split("\t")[1] for l in printed if l[:2] == "S-"]

    old = doc_shell(commands[2], raw_model, checkpoint=unrecorded)  # the older checkpoint, tokenizer named
    assert old.returncode == 0, old.stderr[-3000:]
    assert "S-0\tit &apos;s my idea ." in old.stdout.splitlines()

    from fairseq_speaker.service.app import parse_args

    serve = shlex.split(commands[1].replace(DOC_DATA, raw_model["data"]).replace(DOC_MODEL, raw_model["checkpoint"]))
    assert serve[0] == "fairseq-speaker-serve" and parse_args(serve[1:])[0].data == raw_model["data"]


def test_the_documented_python_translates_raw_text(raw_model):
    code = re.findall(r"```python\n(.*?)```", doc_section(), re.S)
    assert len(code) == 1
    code = code[0].replace(DOC_DATA, raw_model["data"]).replace(DOC_MODEL, raw_model["checkpoint"])
    namespace = {}
    exec(compile(code, DOCS, "exec"), namespace)  # as a reader runs it, in this process
    translations = namespace["translations"]
    assert len(translations) == 2 and not any("&apos;" in t for t in translations)


@pytest.mark.slow  # the recipe's other runs; its first run, resume refusals and raw text stay in the default run
def test_a_checkpoint_whose_bpe_codes_are_gone_stops_with_one_message(raw_model, tmp_path):
    """The record names a file the model cannot be used without: interactive stops before reading any input."""
    data = tmp_path / "bin"
    shutil.copytree(raw_model["data"], data)
    (data / "codes.txt").write_text("#version: 0.2\ni t\n")
    (data / "preprocessing.json").write_text(json.dumps({"bpe": {"name": "subword_nmt", "bpe_codes": "codes.txt"}}))
    save = tmp_path / "ckpt"
    run_here("train", train_args(str(data), str(save), "lstm_base", "--max-epoch", "1"))  # no subword_nmt to train
    os.remove(data / "codes.txt")
    checkpoint = str(save / "checkpoint_best.pt")
    proc = run("interactive", [str(data), "--user-dir", USER_DIR, "--task", "speaker_translation", "--path", checkpoint,
                               "--speaker", SPEAKER], stdin="it &apos;s my idea .\n", check=False)
    assert proc.returncode == 2
    assert_user_error(proc)
    assert proc.stderr.strip().splitlines()[-1] == (
        f"error: {checkpoint}: the text preprocessing saved with the model needs the file codes.txt (--bpe subword_nmt "
        f"--bpe-codes), which is missing: not at {data}/codes.txt, where it was at training, nor in "
        f"{data}. Put that file back in one of these places, or give --bpe yourself (it wins over the "
        f"checkpoint's), or --preprocessing none (preprocessing=\"none\") for input already in the model's tokens")
    assert "S-0" not in proc.stdout
    # what it says to do works
    proc = run_here("interactive", [str(data), "--user-dir", USER_DIR, "--task", "speaker_translation", "--path",
                                    checkpoint, "--speaker", SPEAKER, "--preprocessing", "none"],
                    stdin="it &apos;s my idea .\n")
    assert "S-0\tit &apos;s my idea ." in proc.stdout.splitlines()


def test_adapt_reads_raw_text_with_the_checkpoints_preprocessing(raw_model, unrecorded, tmp_path):
    """--raw-text: raw adaptation files are tokenized as the training data was (Moses with its escapes, then
    lowercasing, done here by sacremoses itself), so the speaker fitted is the one fitted on the model's tokens;
    a checkpoint without the record refuses it, saying what to give instead (the command's main in this process)."""
    from sacremoses import MosesTokenizer

    raw = {"en": ["It's my idea.", "I am happy.", "Is it yours?"], "fr": ["C'est mon idée.", "Je suis heureuse.",
                                                                          "Est-ce le tien ?"]}
    tokens = {lang: [MosesTokenizer(lang=lang).tokenize(s, return_str=True, escape=True).lower() for s in text]
              for lang, text in raw.items()}
    assert tokens["en"][0] == "it &apos;s my idea ."
    rows = {}
    for kind, text, extra in (("raw", raw, ["--raw-text"]), ("tokens", tokens, [])):
        prefix = tmp_path / kind
        for lang, sentences in text.items():
            (tmp_path / f"{kind}.{lang}").write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
        (tmp_path / f"{kind}.spk").write_text("new_talk\n" * 3)
        save = str(tmp_path / f"{kind}.pt")
        call_main("fairseq-speaker-adapt", [raw_model["data"], "--path", raw_model["checkpoint"], "--adapt-prefix",
                                            str(prefix), "--save", save, "--source-lang", "en", "--target-lang", "fr",
                                            "--max-unknown-rate", "1", *extra])
        rows[kind] = torch.load(save, weights_only=False)["model"]["decoder.speaker_bias.speaker_weights"]
    assert torch.equal(rows["raw"], rows["tokens"])
    refused = call_main("fairseq-speaker-adapt", [raw_model["data"], "--path", unrecorded, "--adapt-prefix",
                                                  str(tmp_path / "raw"), "--save", str(tmp_path / "x.pt"),
                                                  "--source-lang", "en", "--target-lang", "fr", "--raw-text"],
                        check=False)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "--raw-text, but the checkpoint records no preprocessing" in refused.stderr.strip().splitlines()[-1]
    assert not os.path.exists(tmp_path / "x.pt")
