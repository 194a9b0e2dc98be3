"""Bad input on every surface, as a careless user or an unlucky operator would give it: each case ends in
one message that names the option or file and what to do, with the exit status it should have, and never
in a Python traceback. Organized by surface: a new command or option gets its rows here when it is written.

Exit status: 2 for a command line its parser refuses (argparse's convention, also ours), 1 for input
refused once read (a file, a checkpoint, a combination of options fairseq's parser accepts).
"""

import os

import pytest

from fairseq_speaker.analysis import parameter_accounting
from fairseq_speaker.benchmarks import training as benchmark
from fairseq_speaker.onboarding import adapt, evaluate
from fairseq_speaker.service import app as serve
from tests.cli import assert_user_error, run, train_args

#: the commands' entry points, run in this process (the real command line of one case each is run below)
MAINS = {"fairseq-speaker-benchmark": benchmark.main, "fairseq-speaker-params": parameter_accounting.main,
         "fairseq-speaker-adapt": adapt.main, "fairseq-speaker-onboarding-eval": evaluate.main,
         "fairseq-speaker-serve": serve.main}
#: the options every adapt / onboarding-eval row starts with (the checks come before any file is opened)
ADAPT = ["data", "--path", "model.pt", "--adapt-prefix", "new/adapt", "--save", "out.pt"]
EVAL = ["data", "--path", "model.pt", "--heldout-prefix", "raw/heldout", "--out", "eval"]
#: the serve rows are refused before the checkpoint is opened (the HTTP refusals: tests/integration/test_service.py)
SERVE = ["model.pt", "--data", "data"]

#: surface -> (arguments, exit status, text the last line of standard error contains)
COMMAND_PROBES = {
    "fairseq-speaker-benchmark": [
        (["--batch", "0"], 2, "--batch must be at least 1, got 0"),
        (["--sentences", "0"], 2, "--sentences must be at least 1, got 0"),
        (["--updates", "0"], 2, "--updates must be at least 1"),
        (["--repeats", "-1"], 2, "--repeats must be at least 1"),
        (["--threads", "0"], 2, "--threads must be at least 1"),
        (["--vocab", "3"], 2, "--vocab must be at least 8"),
        (["--speakers", "10", "-4"], 2, "--speakers must be at least 1, got -4"),
        (["--sizes", "512", "0", "256"], 2, "--sizes must be positive"),
        (["--min-len", "9", "--max-len", "3"], 2, "--max-len 3 is shorter than --min-len 9"),
        (["--batch", "64", "--sentences", "10"], 2, "--batch 64 is more than the corpus's --sentences 10"),
        (["--configs", "lstm_nonsense"], 2, "--configs lstm_nonsense: not an arch of a speaker model family"),
        (["--fp16"], 2, "--fp16 is timed on a GPU: add --gpu"),
        (["--bf16"], 2, "--bf16 is timed on a GPU: add --gpu"),
        (["--gen-batch", "0", "--generate"], 2, "--gen-batch must be at least 1"),
        (["--paired", "--plain"], 1, "use one or the other"),
    ],
    "fairseq-speaker-adapt": [
        ([*ADAPT, "--adapt-l2", "nan"], 2, "--adapt-l2 must be a number >= 0 (got nan)"),
        ([*ADAPT, "--adapt-l2", "-1"], 2, "--adapt-l2 must be a number >= 0 (got -1.0)"),
        ([*ADAPT, "--adapt-max-iter", "0"], 2, "--adapt-max-iter >= 1 (got 0)"),
        ([*ADAPT, "--max-unknown-rate", "1.5"], 2, "--max-unknown-rate is a share of words, from 0 to 1"),
    ],
    "fairseq-speaker-onboarding-eval": [
        ([*EVAL, "--adapt-l2", "nan"], 2, "--adapt-l2 at least 0"),
        ([*EVAL, "--beam", "0"], 2, "--beam, --batch-size and --adapt-max-iter must be at least 1"),
    ],
    "fairseq-speaker-serve": [
        ([*SERVE, "--port", "0"], 2, "--port must be between 1 and 65535, got 0"),
        ([*SERVE, "--max-sentences", "0"], 2, "--max-sentences must be at least 1, got 0"),
        ([*SERVE, "--max-speaker-pairs", "-2"], 2, "--max-speaker-pairs must be at least 1, got -2"),
        ([*SERVE, "--beam", "0"], 2, "--beam must be at least 1, got 0"),
        ([*SERVE, "--token-file", "token", "--token-env", "TOKEN", "--store", "s.db"], 2, "not both"),
        ([*SERVE, "--token-env", "TOKEN"], 2, "a token enables onboarding: give --store FILE too"),
        ([*SERVE, "--bpe", "subword_nmt"], 2, "--bpe-codes is required with this --tokenizer/--bpe"),
        ([*SERVE, "--store", "s.db", "--token-file", "no/such/token"], 1, "--token-file no/such/token: cannot be read"),
        ([*SERVE, "--store", "s.db", "--token-env", "FAIRSEQ_SPEAKER_UNSET_VARIABLE"], 1,
         "the token is empty (is the variable set?)"),
        (["model.pt", "--data", "no/such/data"], 1, "data directory not found: no/such/data"),
    ],
    "fairseq-speaker-params": [
        (["--tgt-vocab", "40000", "--speakers", "-5"], 2, "--speakers must not be negative, got -5"),
        (["--tgt-vocab", "-3", "--speakers", "5"], 2, "--tgt-vocab must be at least 5"),
        (["--tgt-vocab", "40000", "--src-vocab", "0", "--speakers", "5"], 2, "--src-vocab must be at least 5"),
        (["--speakers", "5"], 2, "give --data, or --tgt-vocab and --speakers"),
        (["--data", "/nonexistent/data-bin"], 2, "--data /nonexistent/data-bin: no such folder"),
    ],
}


def _cases():
    return [(command, args, status, message) for command, rows in COMMAND_PROBES.items()
            for args, status, message in rows]


@pytest.mark.parametrize("command,args,status,message", _cases(),
                         ids=lambda x: " ".join(x) if isinstance(x, list) else str(x))
def test_a_bad_command_line_ends_in_one_message(command, args, status, message, capsys):
    with pytest.raises(SystemExit) as exit_:  # any other exception would be a traceback
        MAINS[command](args)
    err = capsys.readouterr().err
    code = exit_.value.code
    if isinstance(code, str):  # sys.exit("message"): printed by Python, status 1
        err, code = err + code, 1
    assert code == status, err[-2000:]
    assert message in err.strip().splitlines()[-1], err[-2000:]


@pytest.mark.parametrize("command", sorted(COMMAND_PROBES))
def test_the_real_command_line_ends_likewise(command):
    args, status, message = COMMAND_PROBES[command][0]
    proc = run(command, args, check=False)
    assert proc.returncode == status and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert message in proc.stderr.strip().splitlines()[-1]


def test_params_counts_speakers_by_arithmetic(capsys):
    """A hundred million speakers are counted, not listed (the table is never built)."""
    parameter_accounting.main(["--tgt-vocab", "40000", "--speakers", "100000000"])
    assert "1,051,768,512 parameters" in capsys.readouterr().out  # 51,768,512 + 10^8 x 10 weights (fact, r = 10)


@pytest.mark.parametrize("value", ["0", "fast"])  # every other refused value: tests/unit/test_speaker_rows.py
def test_fairseq_train_refuses_a_bad_speaker_lr_scale(toy, tmp_path, value):
    proc = run("train", train_args(toy["bin"], str(tmp_path / "ckpt"), "lstm_fact_bias", "--speaker-lr-scale", value),
               check=False)
    assert proc.returncode == 1
    assert_user_error(proc)
    assert f"--speaker-lr-scale {value!r}: give 'auto'" in proc.stderr
    assert not os.path.exists(tmp_path / "ckpt" / "checkpoint_last.pt")


def test_interactive_refuses_speakers_per_line_with_constraints(toy, trained):
    """Both read the tab-separated fields of a line: fairseq would translate the speaker's label."""
    proc = run("interactive", [toy["bin"], "--user-dir", os.path.dirname(__import__("fairseq_speaker").__file__),
                               "--task", "speaker_translation", "--path", trained("lstm_fact_bias"),
                               "--speaker-per-line", "--constraints"], stdin="spk000\ti am tired .\n", check=False)
    assert proc.returncode == 1
    assert_user_error(proc)
    assert "--speaker-per-line and --constraints both read tab-separated fields" in proc.stderr


@pytest.mark.parametrize("flag", ["--fp16", "--bf16", "--memory-efficient-fp16"])
def test_half_precision_without_a_gpu_is_refused(toy, tmp_path, flag):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU: half precision is allowed there")
    proc = run("train", train_args(toy["bin"], str(tmp_path / "ckpt"), "lstm_fact_bias", flag), check=False)
    assert proc.returncode == 1
    assert_user_error(proc)
    assert "fairseq trains in half precision on a CUDA GPU only" in proc.stderr


def test_a_torch_file_that_is_no_checkpoint_is_refused_by_fairseqs_commands(toy, tmp_path):
    import torch

    path = str(tmp_path / "weights.pt")
    torch.save({"weights": torch.zeros(2)}, path)
    proc = run("generate", [toy["bin"], "--user-dir", os.path.dirname(__import__("fairseq_speaker").__file__),
                            "--task", "speaker_translation", "--path", path], check=False)
    assert proc.returncode == 1
    assert_user_error(proc)
    assert "weights.pt: not a fairseq checkpoint" in proc.stderr


def test_resuming_a_save_dir_with_another_arch_says_so(toy, trained, tmp_path):
    import shutil

    save = tmp_path / "ckpt"
    save.mkdir()
    shutil.copy(trained("lstm_full_bias"), save / "checkpoint_last.pt")
    proc = run("train", train_args(toy["bin"], str(save), "lstm_fact_bias", "--max-epoch", "3"), check=False)
    assert proc.returncode == 1
    assert_user_error(proc)
    assert "the checkpoint's parameters do not fit this model" in proc.stderr and "--save-dir" in proc.stderr
