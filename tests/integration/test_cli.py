"""The README's flow through the real fairseq command lines, on tiny data. The checks of what a command computes
run its main in this process (tests/cli.py's run_here); its exit status and messages, its process."""

import os
import re
import subprocess
import sys

import pytest
import torch

from fairseq_speaker.commands import system_args
from fairseq_speaker.data import SpeakerDictionary
from fairseq_speaker.generate_output import read_generate_output
from fairseq_speaker.models import preset_variant
from tests.cli import (
    SIZES,
    TINY,
    TINY_VARIANTS,
    USER_DIR,
    assert_user_error,
    copy_data,
    doctored_checkpoint,
    family,
    generate_args,
    hydra_train_here,
    run,
    run_here,
    train_args,
)



def hypotheses(proc):
    return read_generate_output(proc.stdout)


@pytest.mark.parametrize("arch", ["lstm_base", "lstm_full_bias", "lstm_fact_bias"])
def test_train_then_generate_every_test_sentence(toy, trained, arch):
    checkpoint = trained(arch)
    state = torch.load(checkpoint, weights_only=True)  # the plugin's allow-list is in force here
    assert state["cfg"]["model"]["_name"] == arch
    assert len(state["task_state"]["speaker_dictionary"]["names"]) == 8
    proc = run("generate", generate_args(toy["bin"], checkpoint, "--speaker-file",
                                         os.path.join(toy["raw"], "test.spk")))
    assert len(hypotheses(proc)) == SIZES["test"]
    assert f"Translated {SIZES['test']} sentences" in proc.stderr


def test_tensorboard_logs_are_written_and_nothing_asks_to_install_tensorboardx(toy, tmp_path):
    logdir = tmp_path / "tb"
    proc = run("train", train_args(toy["bin"], str(tmp_path / "ckpt"), "lstm_fact_bias", "--max-epoch", "1",
                                   "--tensorboard-logdir", str(logdir)))
    assert "tensorboardX" not in proc.stdout + proc.stderr
    assert list((logdir / "train").glob("events.out.tfevents.*")) and list((logdir / "valid").glob("events.*"))


def test_checkpoints_need_the_allow_list_and_get_nothing_more(trained):
    """With --eval-bleu a checkpoint holds numpy values, which plain torch.load refuses."""
    checkpoint = trained("lstm_fact_bias")
    plain = subprocess.run([sys.executable, "-c", f"import torch; torch.load({checkpoint!r})"],
                           stderr=subprocess.PIPE, text=True)
    assert plain.returncode != 0 and "Weights only load failed" in plain.stderr
    import fairseq_speaker.checkpoints as allow

    # only numpy's data types and reconstructors and argparse.Namespace; that code in a checkpoint is refused
    # by every command is tested in test_malicious_checkpoints.py
    modules = {(g[0] if isinstance(g, tuple) else g).__module__.split(".")[0] for g in allow.checkpoint_globals()}
    assert modules <= {"numpy", "argparse"}, modules


@pytest.fixture(scope="module")
def speaker_words(toy, trained, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("doctored") / "checkpoint.pt")
    boosts = {"spk000": "chien", "spk001": "voiture"}
    doctored_checkpoint(trained("lstm_full_bias"), path, boosts, os.path.join(toy["bin"], "dict.fr.txt"))
    return path, boosts


def test_generate_translates_each_sentence_as_its_speaker(toy, speaker_words, tmp_path):
    checkpoint, boosts = speaker_words
    # the checkpoint carries the speaker dictionary: the data directory needs neither
    # dict.spk.txt nor the training labels at generation time
    data = copy_data(toy, tmp_path)
    os.remove(os.path.join(data, "train.spk"))
    speakers = ["spk000" if i % 3 else "spk001" for i in range(SIZES["test"])]
    spk_file = tmp_path / "alternating.spk"
    spk_file.write_text("\n".join(speakers) + "\n")
    proc = run_here("generate", generate_args(data, checkpoint, "--speaker-file", str(spk_file)))
    hyps = hypotheses(proc)
    assert len(hyps) == SIZES["test"]
    for speaker, hyp in zip(speakers, hyps):
        assert hyp.split()[0] == boosts[speaker], (speaker, hyp)


def test_beam_stop_unbeaten_never_returns_a_worse_translation(toy, trained, tmp_path):
    """fairseq-generate --beam-stop unbeaten: each sentence's best score at least fairseq's rule's (its search is
    fairseq's, kept going), and the same translation where fairseq's was already unbeaten; the n-best lists keep their
    size. A value that is not a rule is refused by fairseq's parser, naming the choices."""
    checkpoint = trained("lstm_fact_bias")

    def scored(*extra):
        proc = run_here("generate", generate_args(toy["bin"], checkpoint, "--nbest", "3", *extra))
        rows = [line.split("\t") for line in proc.stdout.splitlines() if line.startswith("H-")]
        best = {}
        for key, score, text in rows:
            best.setdefault(int(key[2:]), (float(score), text))  # the first of each sentence: its best
        return best, len(rows)

    plain, plain_rows = scored()
    unbeaten, unbeaten_rows = scored("--beam-stop", "unbeaten")
    assert plain_rows == unbeaten_rows == 3 * SIZES["test"]
    for i, (score, text) in plain.items():
        assert unbeaten[i][0] >= score - 1e-4, (i, unbeaten[i], (score, text))
        if unbeaten[i][0] <= score + 1e-4:
            assert unbeaten[i][1] == text
    proc = run("generate", generate_args(toy["bin"], checkpoint, "--beam-stop", "never"), check=False)
    assert proc.returncode != 0 and "unbeaten" in proc.stderr and "Traceback" not in proc.stderr


def test_unknown_speaker_policy_none_gives_no_bias(toy, speaker_words, tmp_path):
    checkpoint, _ = speaker_words
    spk_file = tmp_path / "strangers.spk"
    spk_file.write_text("nobody\n" * SIZES["test"])
    proc = run_here("generate", generate_args(toy["bin"], checkpoint, "--speaker-file", str(spk_file),
                                              "--unknown-speaker", "none"))
    assert "37 of 37 sentences have speakers unseen in training" in proc.log
    assert not any(h.split()[:1] in (["chien"], ["voiture"]) for h in hypotheses(proc))


def test_unknown_speaker_policy_fail(toy, speaker_words, tmp_path):
    checkpoint, _ = speaker_words
    spk_file = tmp_path / "test.spk"
    spk_file.write_text("spk000\n" * 5 + "nobody\n" + "spk000\n" * (SIZES["test"] - 6))
    proc = run("generate", generate_args(toy["bin"], checkpoint, "--speaker-file", str(spk_file),
                                         "--unknown-speaker", "fail"), check=False)
    assert proc.returncode != 0
    assert re.search(rf"{re.escape(str(spk_file))}:6: speaker 'nobody' is not among the model's 8 speakers", proc.stderr)
    assert "--unknown-speaker mean" in proc.stderr
    assert_user_error(proc)


def test_interactive_with_one_speaker_and_with_a_speaker_per_line(toy, speaker_words):
    checkpoint, boosts = speaker_words
    common = generate_args(toy["bin"], checkpoint, "--source-lang", "en", "--target-lang", "fr")
    proc = run_here("interactive", [*common, "--speaker", "spk001"], stdin="i am tired .\nyou have the car .\n")
    hyps = hypotheses(proc)
    assert len(hyps) == 2 and all(h.split()[0] == "voiture" for h in hyps)

    lines = ["spk000\ti am tired .", "spk001\ti am tired .", "spk000\tyou want the key ."] * 3
    proc = run_here("interactive", [*common, "--speaker-per-line", "--buffer-size", "4"],
                    stdin="\n".join(lines) + "\n")
    hyps = hypotheses(proc)
    assert [h.split()[0] for h in hyps] == [boosts[line.split("\t")[0]] for line in lines]

    # a malformed line is reported by its input line number and skipped; the session goes on
    proc = run_here("interactive", [*common, "--speaker-per-line", "--buffer-size", "2"],
                    stdin="spk000\ti am tired .\nno tab here\nspk001\ti am tired .\nab\rc\tyou have the car .\n"
                    "spk000\tyou have the car .\n")
    assert ("<input>:2: expected 'SPEAKER<TAB>sentence' (--speaker-per-line), got 'no tab here'; line skipped"
            in proc.log)
    assert "<input>:4: speaker label 'ab\\rc' contains '\\r'" in proc.log
    firsts = [line.split("\t")[2].split()[0] for line in proc.stdout.splitlines() if line.startswith("H-")]
    assert firsts == ["chien", "voiture", "chien"]

    # an unknown speaker: a warning naming the input line (the mean speaker), or with fail an error
    proc = run_here("interactive", [*common, "--speaker-per-line"],
                    stdin="spk000\ti am tired .\nspk0001\ti am tired .\n")
    assert "<input>:2: speaker 'spk0001' is not among the model's 8 speakers" in proc.log
    proc = run("interactive", [*common, "--speaker", "spk0001", "--buffer-size", "1"],
               stdin="i am tired .\ni am tired .\n", check=False)
    assert "<input>:1: speaker 'spk0001'" in proc.stderr and "<input>:2: speaker 'spk0001'" in proc.stderr
    proc = run("interactive", [*common, "--speaker-per-line", "--unknown-speaker", "fail", "--buffer-size", "2"],
               stdin="spk000\ti am tired .\nspk001\ti am tired .\nspk000\ti am tired .\nnobody\tx .\n", check=False)
    assert proc.returncode != 0 and "<input>:4: speaker 'nobody' is not among the model's 8 speakers" in proc.stderr
    assert_user_error(proc)

    proc = run("interactive", common, stdin="i am tired .\n", check=False)
    assert proc.returncode != 0 and "pass --speaker NAME, or --speaker-per-line" in proc.stderr


@pytest.mark.parametrize("config,system", [
    ("lstm_base", "lstm_base"), ("lstm_spk_token", "lstm_base+spk_token"),
    ("lstm_full_bias", "lstm_full_bias"), ("lstm_fact_bias", "lstm_fact_bias"),
    ("transformer_base", "transformer_base"), ("transformer_full_bias", "transformer_full_bias"),
    ("transformer_fact_bias", "transformer_fact_bias"),
])
def test_hydra_train_with_each_packaged_config(toy, tmp_path, config, system):
    """A packaged config trains the system it is named after: its preset's variant, the speaker token or not. One
    config runs fairseq-hydra-train's process, the others its composition and training in this process."""
    bias, token = preset_variant(system_args(system)[1]), system.endswith("+spk_token")
    config_dir = os.path.join(USER_DIR, "config")
    tiny = TINY[family(system)] + TINY_VARIANTS
    # ++ sets a key whether or not the config file lists it
    overrides = [f"task.data={toy['bin']}", f"common.user_dir={USER_DIR}", f"checkpoint.save_dir={tmp_path}/ckpt",
                 "optimization.max_epoch=1",
                 *[f"++model.{flag[2:].replace('-', '_')}={value}" for flag, value in zip(tiny[::2], tiny[1::2])]]
    if config == "lstm_fact_bias":
        proc = subprocess.run(
            [os.path.join(os.path.dirname(sys.executable), "fairseq-hydra-train"),
             "--config-dir", config_dir, "--config-name", config, *overrides, f"hydra.run.dir={tmp_path}/hydra"],
            env=dict(os.environ, OMP_NUM_THREADS="1"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
    else:
        hydra_train_here(config_dir, config, overrides)
    state = torch.load(os.path.join(tmp_path, "ckpt", "checkpoint_last.pt"), weights_only=True)
    model = state["cfg"]["model"]
    assert (model["speaker_bias"], state["cfg"]["task"]["speaker_token"]) == (bias, token)
    assert state["task_state"].get("speaker_token", False) == token
    if family(system) == "lstm":  # the paper's settings, shared by the four systems
        assert (model["encoder_hidden_size"], model["lstm_dropout"], model["target_word_dropout"]) == (8, 0.4, 0.1)
        assert state["cfg"]["lr_scheduler"]["_name"] == "restart_from_best"
        assert state["cfg"]["dataset"]["batch_size"] == 32
    else:
        assert (model["encoder_embed_dim"], model["encoder_layers"], model["dropout"]) == (16, 1, 0.3)
        assert model["share_decoder_input_output_embed"] is True
        assert state["cfg"]["lr_scheduler"]["_name"] == "inverse_sqrt"
    if bias == "fact":
        assert state["model"]["decoder.speaker_bias.speaker_weights"].shape == (8, 3)


def test_sated_speaker_suffix(toy, tmp_path):
    data = copy_data(toy, tmp_path)
    for split in SIZES:
        os.rename(os.path.join(data, f"{split}.spk"), os.path.join(data, f"{split}.usr"))
    proc = run_here("train", train_args(data, str(tmp_path / "ckpt"), "lstm_full_bias", "--max-epoch", "1",
                                        "--speaker-suffix", "usr"))
    assert f"speaker dictionary: 8 speakers, saved to {data}/dict.spk.txt" in proc.stdout + proc.log
    assert os.path.exists(os.path.join(data, "dict.spk.txt"))


# -- bad input: a clear message naming file and line, nothing half-written -------------------------


def failed_training(data, tmp_path, training_labels_ok=False):
    """Train on broken data: it must fail, write no checkpoint, and write the speaker
    dictionary only when the training labels themselves are sound (then all of it)."""
    save_dir = tmp_path / "ckpt"
    proc = run("train", train_args(data, str(save_dir), "lstm_fact_bias"), check=False)
    assert proc.returncode != 0
    assert_user_error(proc)
    assert not (save_dir.exists() and list(save_dir.glob("*.pt")))
    dict_path = os.path.join(data, "dict.spk.txt")
    if training_labels_ok:
        labels = open(os.path.join(data, "train.spk")).read().split()
        assert SpeakerDictionary.load(dict_path) == SpeakerDictionary.from_labels(labels)
    else:
        assert not os.path.exists(dict_path)
    return proc.stderr


def test_speaker_file_shorter_than_the_text(toy, tmp_path):
    data = copy_data(toy, tmp_path)
    path = os.path.join(data, "train.spk")
    labels = open(path).read().splitlines()
    with open(path, "w") as f:
        f.write("\n".join(labels[:-3]) + "\n")
    err = failed_training(data, tmp_path)
    assert f"{path}: 157 speaker labels but the text has 160 sentences" in err


def test_missing_speaker_file_says_which_path_was_expected(toy, tmp_path):
    data = copy_data(toy, tmp_path)
    os.remove(os.path.join(data, "valid.spk"))
    err = failed_training(data, tmp_path, training_labels_ok=True)
    assert f"speaker file not found: expected {os.path.join(data, 'valid.spk')}" in err
    assert "cp raw/valid.spk" in err


def test_empty_speaker_label(toy, tmp_path):
    data = copy_data(toy, tmp_path)
    path = os.path.join(data, "train.spk")
    labels = open(path).read().splitlines()
    labels[41] = "   "
    with open(path, "w") as f:
        f.write("\n".join(labels) + "\n")
    err = failed_training(data, tmp_path)
    assert f"{path}:42: empty speaker label" in err


def test_stale_speaker_dictionary(toy, tmp_path):
    data = copy_data(toy, tmp_path)
    with open(os.path.join(data, "dict.spk.txt"), "w") as f:
        f.write("spk000\t20\nspk001\t20\n")
    proc = run("train", train_args(data, str(tmp_path / "ckpt"), "lstm_fact_bias"), check=False)
    assert proc.returncode != 0
    assert re.search(r"train.spk:\d+: speaker 'spk00[2-7]' is not among the model's 2 speakers", proc.stderr)
    assert "delete" in proc.stderr and "dict.spk.txt to rebuild it" in proc.stderr
    assert "--unknown-speaker" not in proc.stderr  # a policy of translation, not of training
    assert_user_error(proc)


def test_restart_from_best_in_fairseq_train(toy, tmp_path):
    """An absurd learning rate makes validation worse: the schedule goes back and halves it."""
    save_dir = tmp_path / "ckpt"
    args = train_args(toy["bin"], str(save_dir), "lstm_base", "--max-epoch", "4")
    args[args.index("--lr") + 1] = "3.0"
    run_here("train", [*args, "--lr-scheduler", "restart_from_best", "--lr-shrink", "0.5"])
    state = torch.load(save_dir / "checkpoint_last.pt", weights_only=True)
    schedule = state["optimizer_history"][-1]["lr_scheduler_state"]
    assert schedule["restarts"] >= 1
    assert schedule["lr"] == 3.0 * 0.5 ** schedule["restarts"]


@pytest.mark.slow  # the default run's time; its neighbours cover the same path
def test_restart_from_best_resumes_as_if_uninterrupted(toy, tmp_path):
    """fairseq saves an epoch's checkpoint before the schedule sees its validation loss; a run stopped
    and resumed at an epoch end takes the same decisions (lr, restarts, parameters) as one that ran
    through."""
    def args(save_dir, epochs):
        # with the presets' dropout, and batches of 40 (4 an epoch): a resumed run repeats an uninterrupted
        # one to rounding (test_resume.py)
        a = train_args(toy["bin"], str(save_dir), "lstm_base", "--max-epoch", str(epochs),
                       "--lr-scheduler", "restart_from_best", "--lr-shrink", "0.5", "--batch-size", "40")
        a[a.index("--lr") + 1] = "3.0"  # validation gets worse: plateaus and restarts
        return a

    run_here("train", args(tmp_path / "through", 3))
    # the same run, stopped after epoch 2, whose validation is worse (a restart), and resumed by a new process
    run_here("train", args(tmp_path / "resumed", 2))
    run("train", args(tmp_path / "resumed", 3))
    through = torch.load(tmp_path / "through" / "checkpoint_last.pt", weights_only=True)
    resumed = torch.load(tmp_path / "resumed" / "checkpoint_last.pt", weights_only=True)
    schedules = [s["optimizer_history"][-1]["lr_scheduler_state"] for s in (through, resumed)]
    assert schedules[0]["restarts"] >= 1  # the case this is about
    for key in ("lr", "restarts", "best"):
        assert schedules[0][key] == schedules[1][key], key
    for name, value in through["model"].items():
        if torch.is_tensor(value) and value.is_floating_point():
            assert torch.allclose(value, resumed["model"][name], rtol=1e-2, atol=1e-2), name  # lr 3.0: rounding grows
