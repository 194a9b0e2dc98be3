"""fairseq-speaker-benchmark at toy sizes: every configuration measured, the JSON complete, the impossible skipped.
The default tier's runs call the command's main in this process (its paired rounds are processes of their own)."""

import json
import re

import pytest

from tests.cli import call_main, run

TINY = ["--sizes", "8", "8", "8", "--vocab", "40", "--sentences", "120", "--warmup", "1", "--updates", "2",
        "--repeats", "1"]
#: with --generate (the benchmark refuses them without: nothing would read them)
GENERATE = ["--generate", "--gen-sentences", "8", "--gen-batch", "4", "--gen-len", "4"]


@pytest.mark.slow  # trains each configuration for real; the arithmetic and refusals stay in the default run
def test_benchmark_measures_ours_beside_stock_fairseq_and_skips_what_cannot_fit(tmp_path):
    out = tmp_path / "bench.json"
    proc = run("fairseq-speaker-benchmark", [*TINY, "--configs", "lstm_full_bias", "stock_lstm", *GENERATE,
                                             "--speakers", "4", "1000000000", "--json", str(out)])
    figures = json.loads(out.read_text())
    assert figures["peak_flop_per_second"][0] > 1e8
    rows = {(r["mode"], r["config"], r["speakers"]): r for r in figures["rows"]}
    # stock fairseq has no speakers: measured once; the billion-speaker full table cannot fit in memory
    assert set(rows) == {(m, c, s) for m in ("train", "generate") for c, s in
                         [("lstm_full_bias", 4), ("lstm_full_bias", 1000000000), ("stock_lstm", 4)]}
    for key in [("train", "lstm_full_bias", 4), ("train", "stock_lstm", 4)]:
        row = rows[key]
        assert not row["errors"] and row["median"] > 0 and row["flop_per_token"] > 0 and 0 < row["peak_fraction"]
    for key in [("generate", "lstm_full_bias", 4), ("generate", "stock_lstm", 4)]:
        assert not rows[key]["errors"] and rows[key]["median"] > 0
    skipped = rows[("train", "lstm_full_bias", 1000000000)]
    assert not skipped["runs"] and "GB in training" in skipped["errors"][0]
    assert "vs stock" in proc.stdout and "skipped: its speaker table needs" in proc.stdout


@pytest.mark.slow  # times plain and fast runs (20 s); test_fast_paths checks their outputs agree in the default run
def test_plain_runs_count_the_same_arithmetic_as_the_fast_ones(tmp_path):
    """--plain runs our configurations again with PyTorch's own products and fairseq's own loss: the same
    FLOP per token must be counted on both paths (oneDNN's products are counted by their own formula)."""
    out = tmp_path / "bench.json"
    run("fairseq-speaker-benchmark", [*TINY, "--configs", "lstm_base", "stock_lstm", "--plain", "--json", str(out)])
    rows = {r["config"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"lstm_base", "lstm_base:plain", "stock_lstm"}
    assert all(not r["errors"] and r["median"] > 0 for r in rows.values())
    assert rows["lstm_base"]["flop_per_token"] == rows["lstm_base:plain"]["flop_per_token"] > 0


def test_ratios_are_paired_within_rounds_and_rounds_rotate():
    """A ratio is the median of the per-round ratios (a slow drift of the machine cancels), failed runs
    leave their round out, and every configuration takes every place of a round in turn."""
    from fairseq_speaker.benchmarks.training_configs import reference_of
    from fairseq_speaker.benchmarks.training_tables import paired_ratio
    from fairseq_speaker.benchmarks.training_workers import rotated

    # the machine slows down over the rounds: medians of the runs would mislead, paired ratios do not
    base = [100.0, 80.0, 60.0]
    fact = [99.0, 79.2, 59.4]
    assert abs(paired_ratio(fact, base) - 0.99) < 1e-12
    assert paired_ratio([None, 50.0, 90.0], [100.0, 100.0, 100.0]) == 0.7
    assert paired_ratio([None], [100.0]) is None
    assert reference_of("lstm_fact_bias") == "lstm_base" and reference_of("stock_lstm") is None
    assert reference_of("transformer_full_bias:plain") == "transformer_base:plain"
    orders = [rotated(3, r) for r in range(3)]
    assert orders == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
    assert rotated(0, 2) == []


@pytest.mark.slow  # several rounds of every configuration
def test_paired_rounds_measure_every_configuration_in_one_process_and_refuse_plain(tmp_path):
    """--paired runs the configurations of a mode in one process per round, taking turns: every row has a
    figure per round, and the ratios to base and stock are filled; --plain cannot share that process."""
    out = tmp_path / "bench.json"
    proc = run("fairseq-speaker-benchmark", [*TINY, "--repeats", "2", "--paired", *GENERATE, "--configs",
                                             "lstm_base", "lstm_fact_bias", "stock_lstm", "--json", str(out)])
    assert "paired round(s)" in proc.stdout and proc.stderr.count("(paired)") == 4  # 2 rounds x 2 modes
    # the models are built in a rotating order: in one process the first built runs faster
    assert "[1/2] train lstm_base, lstm_fact_bias, stock_lstm (paired)" in proc.stderr
    assert "[2/2] train lstm_fact_bias, stock_lstm, lstm_base (paired)" in proc.stderr
    rows = {(r["mode"], r["config"]): r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {(m, c) for m in ("train", "generate") for c in ("lstm_base", "lstm_fact_bias", "stock_lstm")}
    for (mode, config), row in rows.items():
        assert not row["errors"] and len(row["runs"]) == 2 and all(v > 0 for v in row["by_round"]), (mode, config)
        assert row["vs_stock"] > 0
    assert rows[("train", "lstm_base")]["vs_base"] == 1.0 and rows[("train", "lstm_fact_bias")]["vs_base"] > 0
    assert rows[("train", "stock_lstm")]["vs_base"] is None
    assert rows[("train", "lstm_fact_bias")]["flop_per_token"] > 0

    refused = run("fairseq-speaker-benchmark", [*TINY, "--paired", "--plain"], check=False)
    assert refused.returncode != 0 and "--paired" in refused.stderr and "Traceback" not in refused.stderr


@pytest.mark.slow  # a paired benchmark of two configurations (20 s)
def test_a_preset_with_another_variant_is_measured_paired_beside_the_preset(tmp_path):
    """ARCH:VARIANT (the demo's systems) reaches the model in both families: the preset's network with the
    variant's parameters, r (S + H + D) more for hyper_lhuc (r = 10 numbers per speaker, W of H x r and U of
    D x r), compared with the network without speakers and with --versus; the table is wide enough for its name."""
    out = tmp_path / "bench.json"
    configs = ["lstm_fact_bias", "lstm_base:fact", "lstm_base:fact+hyper_lhuc",
               "transformer_fact_bias", "transformer_base:fact+hyper_lhuc"]
    proc = run("fairseq-speaker-benchmark", [*TINY, "--layers", "2", "--speakers", "4", "--paired", *GENERATE,
                                             "--configs", *configs, "--versus", "lstm_fact_bias", "--json", str(out)])
    rows = {(r["mode"], r["config"]): r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {(m, c) for m in ("train", "generate") for c in configs}
    assert all(not r["errors"] and r["median"] > 0 for r in rows.values())
    parameters = {c: rows[("train", c)]["runs"][0]["parameters"] for c in configs}
    assert parameters == {c: rows[("generate", c)]["runs"][0]["parameters"] for c in configs}  # the same models
    assert parameters["lstm_base:fact"] == parameters["lstm_fact_bias"]
    r, speakers, embed, hidden, layers = 10, 4, 8, 8, 2
    assert parameters["lstm_base:fact+hyper_lhuc"] - parameters["lstm_fact_bias"] == r * (speakers + hidden + embed)
    assert (parameters["transformer_base:fact+hyper_lhuc"] - parameters["transformer_fact_bias"]
            == r * (speakers + layers * embed + embed))
    # no lstm_base or transformer_base in the run: nothing to compare with, in either mode
    assert rows[("train", "lstm_base:fact+hyper_lhuc")]["vs_base"] is None
    for mode in ("train", "generate"):
        assert rows[(mode, "lstm_fact_bias")]["vs_versus"] == 1.0
        ratios = [rows[(mode, c)]["vs_versus"] for c in configs]
        assert all(r > 0 for r in ratios) and len(set(ratios)) > 1  # each row's own ratio
    assert proc.stdout.count(" vs lstm_fact_bias ") == 2  # a column in both tables
    assert "  lstm_base:fact+hyper_lhuc " in proc.stdout and "  transformer_base:fact+hyper_lhuc " in proc.stdout


def test_the_reference_of_a_variant_is_the_network_without_speakers_and_bad_configs_are_refused():
    from fairseq_speaker.benchmarks.training_configs import check_config, memory_estimate, reference_of, split_config
    from fairseq_speaker.errors import UserError

    assert split_config("transformer_base:fact+hyper_lhuc") == ("transformer_base", "fact+hyper_lhuc")
    assert split_config("lstm_fact_bias") == ("lstm_fact_bias", None)
    assert reference_of("transformer_base:fact+hyper_lhuc") == "transformer_base"
    assert reference_of("lstm_fact_bias:fact+hyper_lhuc:plain") == "lstm_base:plain"
    check_config("lstm_base:fact+hyper_lhuc")
    # the speaker rows in training (weights, gradient, Adam's two moments: 4 x 4 bytes a number) of the variant
    # given, a state variant's as wide as the decoder measured: lhuc, one amplitude per unit of the LSTM's h_t
    assert memory_estimate("lstm_base:lhuc", 40, 1000, [8, 16, 8], 1) == 16 * 16 * 1000
    assert memory_estimate("lstm_base:fact+hyper_lhuc", 40, 1000, [8, 16, 8], 1) == 16 * (10 + 10) * 1000
    assert memory_estimate("lstm_fact_bias", 40, 1000, [8, 16, 8], 1) == 16 * 10 * 1000
    assert memory_estimate("stock_lstm", 40, 1000, [8, 16, 8], 1) == 0
    check_config("stock_transformer")
    for config, message in [("lstm_base:nope", "unknown --speaker-bias 'nope'"),
                            ("stock_lstm:fact", "a stock fairseq model has no speaker variant"),
                            ("transformer_base:topic", "--speaker-bias topic needs --topic-model FILE"),
                            ("lstm_base+spk_token", "drop +spk_token")]:
        with pytest.raises(UserError, match=re.escape(f"--configs {config}: ") + ".*" + re.escape(message)):
            check_config(config)


@pytest.mark.slow  # the default run's time; its neighbours cover the same path
def test_a_configuration_at_another_speaker_lr_scale_is_trained_with_it_and_measured_beside_the_default(tmp_path):
    """``CONFIG@lr-scale=X``: the same model trained with ``--speaker-lr-scale X``, paired with the default (the
    cost of ``auto`` against the shared rate, #25's figure)."""
    from fairseq_speaker.benchmarks.training_configs import model_args, reference_of, split_config

    assert split_config("lstm_base:fact@lr-scale=1") == ("lstm_base", "fact")
    assert reference_of("lstm_fact_bias@lr-scale=1") == "lstm_base"
    flags = model_args("lstm_fact_bias@lr-scale=1", [8, 8, 8], 1)
    assert flags[flags.index("--speaker-lr-scale") + 1] == "1" and "--speaker-lr-scale" not in model_args(
        "lstm_fact_bias", [8, 8, 8], 1)
    out = tmp_path / "bench.json"
    configs = ["lstm_fact_bias", "lstm_fact_bias@lr-scale=1"]
    proc = call_main("fairseq-speaker-benchmark", [*TINY, "--speakers", "4", "--paired", "--configs", *configs,
                                                   "--versus", "lstm_fact_bias@lr-scale=1", "--json", str(out)])
    rows = {r["config"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == set(configs) and all(not r["errors"] and r["median"] > 0 for r in rows.values())
    assert rows["lstm_fact_bias@lr-scale=1"]["vs_versus"] == 1.0 and rows["lstm_fact_bias"]["vs_versus"] > 0
    assert " lstm_fact_bias@lr-scale=1 " in proc.stdout


@pytest.mark.slow  # the default run's time; its neighbours cover the same path
def test_a_configuration_with_its_speakers_words_translates_with_them_beside_the_same_model_without(tmp_path):
    """``CONFIG@words``: the same model translating with a memory of each speaker's words (their sentences' target
    words in the synthetic corpus), paired with the model without it; generation only."""
    from fairseq_speaker.benchmarks.training_configs import check_config, model_args, split_config
    from fairseq_speaker.benchmarks.training_workers import _remember_words, _setup
    from fairseq_speaker.errors import UserError
    from fairseq_speaker.modules.speaker_words import speaker_words_of

    assert split_config("transformer_base:fact+hyper_lhuc@words") == ("transformer_base", "fact+hyper_lhuc")
    assert model_args("lstm_fact_bias@words", [8, 8, 8], 1) == model_args("lstm_fact_bias", [8, 8, 8], 1)
    for config, message in [("stock_lstm@words", "no speakers whose words to remember"),
                            ("lstm_base@words", "lstm_base has none")]:
        with pytest.raises(UserError, match=re.escape(f"--configs {config}: ") + ".*" + re.escape(message)):
            check_config(config)

    spec = {"vocab": 40, "speakers": 4, "sentences": 30, "min_len": 2, "max_len": 5, "seed": 1, "sizes": [8, 8, 8],
            "layers": 1, "config": "lstm_fact_bias@words", "extra": [], "user_dir": None, "batch": 4,
            "gen_len": 4, "gen_batch": 4, "gpu": False, "fp16": False, "bf16": False}
    _, cfg, task, dataset = _setup(spec, str(tmp_path), generation=True)
    model = task.build_model(cfg.model)
    _remember_words(model, task, dataset)
    words = speaker_words_of(model)
    d = task.target_dictionary
    for speaker in range(4):  # by hand: the distinct words of the speaker's targets, padding and the like left out
        said = {int(w) for i in range(len(dataset)) if int(dataset.speakers[i]) == speaker
                for w in dataset[i]["target"]} - {d.pad(), d.bos(), d.unk()}
        assert set(words.words_of(speaker).tolist()) == said and said

    out = tmp_path / "bench.json"
    configs = ["lstm_fact_bias", "lstm_fact_bias@words"]
    proc = call_main("fairseq-speaker-benchmark", [*TINY, "--speakers", "4", "--paired", "--no-train", *GENERATE,
                                                   "--configs", *configs, "--versus", "lstm_fact_bias", "--json",
                                                   str(out)])
    rows = {r["config"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == set(configs) and all(not r["errors"] and r["median"] > 0 for r in rows.values())
    assert rows["lstm_fact_bias@words"]["vs_versus"] > 0 and " lstm_fact_bias@words " in proc.stdout
    refused = call_main("fairseq-speaker-benchmark", [*TINY, "--configs", "lstm_fact_bias@words"], check=False)
    assert refused.returncode == 2 and "act in generation only" in refused.stderr
