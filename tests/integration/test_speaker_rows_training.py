"""Row-sparse updates of the full speaker table through fairseq-train (its main, in this process): logged,
checkpointed, resumed."""

import os

import torch

from tests.cli import run_here, train_args

TABLE = "decoder.speaker_bias.weight"


def _table_state(checkpoint: str):
    """The checkpoint and the optimizer state of the speaker table (the one entry shaped like it)."""
    state = torch.load(checkpoint, weights_only=True)
    shape = tuple(state["model"][TABLE].shape)
    entries = [v for v in state["last_optimizer_state"]["state"].values() if tuple(v["exp_avg"].shape) == shape]
    assert len(entries) == 1
    return state, entries[0]


def test_fairseq_train_updates_only_the_rows_of_each_batchs_speakers_and_resumes(toy, tmp_path):
    save = str(tmp_path / "sparse")
    first = run_here("train", train_args(toy["bin"], save, "lstm_full_bias", "--batch-size", "4", "--max-update", "5"))
    assert "row-sparse adam updates (only the rows of each batch's speakers)" in first.log
    state, table = _table_state(os.path.join(save, "checkpoint_last.pt"))
    steps = table["row_step"].round().long()
    assert table["step"] == 5 and int(steps.max()) <= 5
    # at most 4 speakers a batch: each row counts the updates its speaker was in, which adds up to fewer than 5 x 4
    assert 5 <= int(steps.sum()) <= 5 * 4 and int(steps.min()) < 5
    weight = state["model"][TABLE]
    assert torch.count_nonzero(weight[steps == 0]) == 0  # never seen: still the initial zeros
    assert bool((weight[steps > 0].abs().sum(1) > 0).all())
    assert table["lr_scale"] == 0.0  # a new run: --speaker-lr-scale auto, recorded for its resumption
    # before the validation, the log says how far the speakers moved
    assert "speaker table weight (8, " in first.log and "of the 8 speakers moved, by" in first.log

    resumed = run_here("train", train_args(toy["bin"], save, "lstm_full_bias", "--batch-size", "4", "--max-update",
                                           "8", "--restore-file", os.path.join(save, "checkpoint_last.pt")))
    assert "row-sparse adam updates" in resumed.log
    _, after = _table_state(os.path.join(save, "checkpoint_last.pt"))
    assert after["step"] == 8
    assert bool((after["row_step"].round().long() >= steps).all()) and int(after["row_step"].sum()) > int(steps.sum())


def test_dense_updates_on_request(toy, tmp_path):
    save = str(tmp_path / "dense")
    out = run_here("train", train_args(toy["bin"], save, "lstm_full_bias", "--batch-size", "4", "--max-update", "3",
                                       "--speaker-dense-updates"))
    assert "row-sparse" not in out.stdout + out.log
    _, table = _table_state(os.path.join(save, "checkpoint_last.pt"))
    # the dense step, scaled by --speaker-lr-scale (auto): the state counts the table's updates and each row's
    counts = table["row_step"].round().long()
    assert table["step"] == 3 and table["table_step"] == 3 and table["lr_scale"] == 0.0
    assert int(counts.max()) <= 3 and int(counts.sum()) >= 3

    # resumed row by row, each row goes on from its own count
    resumed = run_here("train", train_args(toy["bin"], save, "lstm_full_bias", "--batch-size", "4", "--max-update",
                                           "5", "--restore-file", os.path.join(save, "checkpoint_last.pt")))
    assert "row-sparse adam updates" in resumed.log
    _, after = _table_state(os.path.join(save, "checkpoint_last.pt"))
    steps = after["row_step"].round().long()
    assert after["step"] == 5 and bool((steps >= counts).all()) and int((steps - counts).max()) <= 2
    assert int((steps - counts).sum()) > 0


def test_row_sparse_sgd_trains_exactly_as_dense_sgd_through_fairseq_train(toy, tmp_path):
    """Plain SGD leaves a row without gradient where it is, so the row-sparse and the dense update are the
    same update: through the real trainer (gradients divided by the batch's tokens, accumulated over
    --update-freq, clipped) the two runs must end with the same parameters."""
    models = {}
    for mode, extra in (("sparse", []), ("dense", ["--speaker-dense-updates"])):
        save = str(tmp_path / mode)
        args = train_args(toy["bin"], save, "lstm_full_bias", "--batch-size", "6", "--update-freq", "2",
                          "--max-update", "6", "--dropout", "0", "--lstm-dropout", "0", "--target-word-dropout", "0",
                          "--clip-norm", "0.5", *extra)
        args[args.index("--optimizer") + 1] = "sgd"
        args[args.index("--lr") + 1] = "0.5"
        out = run_here("train", args)
        assert ("row-sparse sgd updates" in out.stdout + out.log) == (mode == "sparse")
        models[mode] = torch.load(os.path.join(save, "checkpoint_last.pt"), weights_only=True)["model"]
    assert torch.count_nonzero(models["sparse"][TABLE]) > 0
    for name, value in models["dense"].items():
        if torch.is_tensor(value) and value.is_floating_point():
            assert torch.allclose(models["sparse"][name], value, atol=1e-6), name
