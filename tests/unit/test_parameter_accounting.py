"""Parameter accounting, pinned against the paper's figures (section 3 and its parameter counts)."""

import os
import re

import pytest
import torch

from fairseq_speaker.analysis.checkpoint_model import load_checkpoint_model
from fairseq_speaker.analysis.meta_model import CountingDictionary, sized_dictionary
from fairseq_speaker.analysis.parameter_accounting import main
from fairseq_speaker.analysis.parameter_counts import accounting_of, compare_variants, count_parameters
from fairseq_speaker.checkpoints import read_checkpoint
from fairseq_speaker.models import get_family
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY, StateSites
from tests.helpers import TINY_MODELS, TINY_VARIANT_OPTIONS, build_bias, make_model, make_task

V = 40000


def lstm(inputs, hidden):  # PyTorch keeps two bias vectors per LSTM
    return 4 * hidden * (inputs + hidden) + 2 * 4 * hidden


def expected_base(emb=512, enc=512, dec=512, att=256, vocab=V):
    enc_out = 2 * enc
    return (
        2 * vocab * emb  # E_S and E_T (the softmax is tied to E_T)
        + 2 * lstm(emb, enc)  # bidirectional encoder
        + enc_out * dec + dec  # decoder initial state
        + lstm(emb + enc_out, dec)  # decoder with input feeding
        + enc_out * att + att + dec * att + att  # MLP attention
        + (dec + enc_out + emb) * emb + emb  # o_t of eq. 6
        + vocab  # b_T
    )


def test_base_model_by_component():
    acc = count_parameters(V, V, 1887, "lstm_base")
    assert acc.speaker == 0
    assert acc.base == acc.total == expected_base()
    assert acc.components["target embeddings E_T (= softmax)"] == V * 512
    assert sum(acc.components.values()) == acc.total


def test_the_papers_47m_model_and_its_per_speaker_cost():
    """~47M parameters and ~0.09% per full_bias speaker: the paper's count has 256 units per encoder direction."""
    acc = count_parameters(V, V, 1887, "lstm_full_bias", ["--encoder-hidden-size", "256"])
    assert acc.base == expected_base(enc=256)
    assert abs(acc.base - 47e6) / 47e6 < 0.005
    assert acc.speaker_bias.per_speaker == V
    assert round(100 * V / acc.base, 2) == 0.09
    # with 512 units per direction (the authors' code and our default) the model is 9% larger
    default = count_parameters(V, V, 1887, "lstm_base").base
    assert 51.3e6 < default < 51.4e6


@pytest.mark.parametrize("speakers,saving", [(1670, 99.38), (1887, 99.45), (1922, 99.45)])
def test_fact_bias_saves_the_papers_share_of_speaker_parameters(speakers, saving):
    fact = count_parameters(V, V, speakers, "lstm_fact_bias", ["--speaker-rank", "10"])
    full = count_parameters(V, V, speakers, "lstm_full_bias")
    assert fact.speaker == 10 * (speakers + V) and full.speaker == speakers * V
    assert round(100 * (1 - fact.speaker / full.speaker), 2) == saving
    assert fact.base == full.base
    costs = {c.name: c for c in compare_variants(V, speakers, "lstm_base", ["--speaker-rank", "10"])}
    assert round(100 * (1 - costs["fact"].total / costs["full"].total), 2) == saving


@pytest.mark.parametrize("arch", ["lstm_fact_bias", "lstm_speaker", "transformer_fact_bias", "transformer_speaker"])
def test_a_vocabulary_counted_without_its_words_sizes_the_model_as_one_spelt_out(arch):
    """The accounting sizes the vocabulary with CountingDictionary (no word held); a dictionary of as many real
    entries gives the same counts, component by component."""
    counted = count_parameters(3001, 2999, 7, arch)
    spelt = count_parameters(sized_dictionary(3001), sized_dictionary(2999), 7, arch)
    assert len(CountingDictionary(2999)) == len(sized_dictionary(2999)) == 2999
    assert counted.components == spelt.components and counted.total == spelt.total > 0


def test_forty_million_words_are_counted_as_arithmetic():
    """fairseq-speaker-params spelt out every word of the vocabulary first: 40 million took minutes and gigabytes."""
    fact = count_parameters(V, 40_000_000, 5, "lstm_fact_bias", ["--speaker-rank", "10"])
    assert fact.speaker == 10 * (5 + 40_000_000)


def flags(options):
    return [a for k, v in options.items() for a in (f"--{k.replace('_', '-')}", str(v))]


def nested_examples(bias, workdir, source_dictionary):
    """The options the examples of a variant and of the variants nested in it set."""
    return {k for _, v in bias.named_variants() for k in type(v).example_options(workdir, source_dictionary)}


def test_every_registered_variant_is_compared_from_its_contract(tmp_path):
    task = make_task(num_speakers=4, num_words=8)  # target vocabulary: 4 special + 11 words = 15
    tiny = get_family("lstm").scales["tiny"]  # a variant acting on the state is sized by the decoder's sites
    costs = {c.name.split(" ")[0]: c for c in compare_variants(
        15, 4, "lstm_base", flags(TINY_VARIANT_OPTIONS) + get_family("lstm").scale_args("tiny"))}
    assert set(costs) == set(SPEAKER_BIAS_REGISTRY)
    for name, cost in costs.items():
        # a real instance, from the variant's example where it needs one, in the LSTM decoder's sites
        bias = build_bias(name, task, sites=StateSites(input_dim=tiny.embed, layer_dims=(tiny.hidden,)))
        assert cost.per_speaker == bias.parameters_per_speaker(), name
        assert cost.shared == sum(p.numel() for p in bias.shared_parameters().values()), name
        assert cost.total == sum(p.numel() for p in bias.parameters()), name
        assert cost.combination == (len(list(bias.named_variants())) > 1), name
        assert set(cost.examples) == nested_examples(bias, str(tmp_path), task.source_dictionary), name


def test_the_models_own_sum_is_accounted_and_compared(tmp_path):
    task = make_task(num_speakers=4, num_words=8)
    model_args = ["--speaker-bias", "fact+topic", *flags(TINY_VARIANT_OPTIONS)]
    bias = build_bias("fact+topic", task)
    own = compare_variants(15, 4, "transformer_base", model_args)[-1]
    assert own.name == "fact+topic" and own.combination
    assert set(own.examples) == nested_examples(bias, str(tmp_path), task.source_dictionary)
    assert (own.per_speaker, own.total) == (bias.parameters_per_speaker(), sum(p.numel() for p in bias.parameters()))
    acc = count_parameters(len(task.source_dictionary), 15, 4, "transformer_base", model_args)
    assert acc.speaker == own.total and acc.speaker_bias.examples.keys() == own.examples.keys()


def test_with_data_every_variant_takes_files_made_for_its_dictionaries(tmp_path, capsys):
    """Options given on the command line win over the examples, and a variant that checks a file against
    the data's dictionaries (a topic model against the source dictionary) gets the real ones."""
    task = make_task(num_speakers=4, num_words=8)
    task.source_dictionary.add_symbol("bonjour")  # unlike a dictionary made up from its size
    task.source_dictionary.save(str(tmp_path / "dict.en.txt"))
    task.target_dictionary.save(str(tmp_path / "dict.fr.txt"))
    task.speaker_dictionary.save(str(tmp_path / "dict.spk.txt"))
    for name, cls in SPEAKER_BIAS_REGISTRY.items():
        given = cls.example_options(str(tmp_path), task.source_dictionary)
        main(["--data", str(tmp_path), "--source-lang", "en", "--target-lang", "fr", "--arch", "lstm_base",
              "--speaker-bias", name, *flags({**TINY_VARIANT_OPTIONS, **given})])
        out = capsys.readouterr().out
        assert out.startswith(f"lstm_base (speaker bias '{name}')") and "from the variant's small example" not in out
        assert "every variant for 4 speakers and V = 15," in out


def test_an_unknown_variant_ends_in_one_message(capsys):
    with pytest.raises(SystemExit):
        main(["--src-vocab", "16", "--tgt-vocab", "15", "--speakers", "4", "--speaker-bias", "nonesuch"])
    assert "unknown --speaker-bias 'nonesuch'; registered variants:" in capsys.readouterr().err


def test_a_transformer_preset_is_the_model_the_helpers_build():
    task = make_task(num_speakers=4, num_words=8)
    model = make_model("fact", task=task, family="transformer")
    acc = count_parameters(len(task.source_dictionary), len(task.target_dictionary), 4, "transformer_fact_bias",
                           flags({**TINY_MODELS["transformer"], **TINY_VARIANT_OPTIONS}))
    assert acc.total == sum(p.numel() for p in model.parameters())
    assert acc.speaker == sum(p.numel() for p in model.speaker_bias.parameters())
    assert sum(acc.components.values()) == acc.total


def test_a_transformer_is_accounted_with_its_tied_embeddings_once():
    sizes = ["--encoder-layers", "2", "--decoder-layers", "2", "--encoder-embed-dim", "64", "--decoder-embed-dim", "64",
             "--encoder-ffn-embed-dim", "128", "--decoder-ffn-embed-dim", "128", "--speaker-rank", "5"]
    untied = count_parameters(1000, 1200, 50, "transformer_fact_bias", sizes)
    tied = count_parameters(1000, 1200, 50, "transformer_fact_bias", sizes + ["--share-decoder-input-output-embed"])
    assert tied.speaker == untied.speaker == 5 * (50 + 1200)
    assert untied.total - tied.total == 1200 * 64  # the output layer is the target embeddings: counted once
    assert untied.components["decoder.output_projection"] == 1200 * 64
    assert "decoder.output_projection" not in tied.components
    for acc in (tied, untied):
        assert sum(acc.components.values()) == acc.total


def test_command_line(capsys):
    main(["--src-vocab", "40000", "--tgt-vocab", "40000", "--speakers", "1670", "--arch", "lstm_full_bias",
          "--encoder-hidden-size", "256", "--speaker-rank", "10"])
    out = capsys.readouterr().out
    assert re.search(rf"speaker-agnostic part \(base model\) +{expected_base(enc=256):,}\n", out)
    assert "one more speaker, for V = 40,000 target words: 40,000 parameters = 160,000 bytes (0.08504%" in out
    for name in SPEAKER_BIAS_REGISTRY:
        assert f"\n  {name}" in out
    rows = {m[1]: (int(m[2].replace(",", "")), float(m[3]))
            for m in re.finditer(r"\n  (\S+) +[\d,]+ +[\d,]+ +([\d,]+) +(-?[\d.]+)%", out)}
    assert rows["full"][0] == 66_800_000 and rows["fact"][0] == 416_700
    # the paper's 99.38% for 1,670 speakers: fact against full
    assert f"{100 * (1 - rows['fact'][0] / rows['full'][0]):.2f}" == "99.38"
    # savings are against the largest variant listed not made of others (other tests may register larger ones)
    combinations = {c.name.split(" ")[0] for c in compare_variants(40000, 1670, "lstm_full_bias") if c.combination}
    largest = max(total for name, (total, _) in rows.items() if name not in combinations)
    for total, saves in rows.values():
        assert abs(saves - 100 * (largest - total) / largest) < 0.01
    main(["--src-vocab", "1000", "--tgt-vocab", "1000", "--speakers", "10", "--arch", "transformer_base",
          "--speaker-bias", "proj", "--speaker-embed-dim", "7", "--encoder-layers", "1"])
    assert "transformer_base (speaker bias 'proj')" in capsys.readouterr().out


def test_counting_allocates_nothing():
    before = torch.zeros(1).device  # the meta device is used inside; nothing to free afterwards
    acc = count_parameters(V, V, 100000, "lstm_full_bias")
    assert acc.speaker == 100000 * V and before.type == "cpu"


CHECKPOINTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "checkpoints")


def saved_parameters(path):
    """The parameters a checkpoint holds, each tensor once (a tied table is stored under two names); fairseq's
    buffers (the Transformer's ``version``, its sinusoids' ``_float_tensor``) are not parameters."""
    state = read_checkpoint(path)
    tensors = {v.data_ptr(): v.numel() for k, v in state["model"].items() if isinstance(v, torch.Tensor)
               and not k.endswith((".version", "._float_tensor"))}
    return sum(tensors.values()), state


@pytest.mark.parametrize("name", ["0.4.0/lstm_fact_adapted", "0.4.0/transformer_full_bias", "0.4.0/lstm_spk_token",
                                  "0.1.0/lstm_full_bias"])
def test_a_checkpoint_is_counted_as_saved(name):
    path = os.path.join(CHECKPOINTS, f"{name}.pt")
    loaded = load_checkpoint_model(path)
    acc = accounting_of(loaded.built, loaded.arch)
    total, state = saved_parameters(path)
    assert acc.total == total
    names = state["task_state"]["speaker_dictionary"]["names"]
    assert acc.speaker_bias.num_speakers == loaded.num_speakers == len(names)  # onboarded speakers included
    rows = {k: v for k, v in state["model"].items() if k.startswith("decoder.speaker_bias.") and
            isinstance(v, torch.Tensor) and v.dim() and v.shape[0] == len(names)}
    assert acc.speaker_bias.per_speaker == sum(v[0].numel() for v in rows.values())  # the speaker rows' sizes
    assert acc.speaker == sum(v.numel() for k, v in state["model"].items() if k.startswith("decoder.speaker_bias.")
                              and isinstance(v, torch.Tensor))


def test_the_command_reads_a_checkpoint_and_refuses_sizes_beside_it(capsys):
    path = os.path.join(CHECKPOINTS, "0.4.0", "lstm_fact_adapted.pt")
    main(["--path", path])
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: lstm_fact_bias, speaker bias 'fact'; 7 speakers, source vocabulary 64")
    assert f"lstm_fact_bias (speaker bias 'fact'): {saved_parameters(path)[0]:,} parameters" in out
    assert "optimizer: adam" in out
    for extra in (["--arch", "lstm_base"], ["--encoder-layers", "2"], ["--tgt-vocab", "100"]):
        with pytest.raises(SystemExit) as e:
            main(["--path", path, *extra])
        assert e.value.code == 2
        assert f"drop {extra[0]}" in capsys.readouterr().err


def test_a_table_sized_by_a_file_that_is_gone_is_counted_at_its_saved_size():
    """topic's topic-word table has K rows from its LDA model, whose file (named in the options) is not here."""
    loaded = load_checkpoint_model(os.path.join(CHECKPOINTS, "0.4.0", "transformer_fact_topic.pt"))
    acc = accounting_of(loaded.built, loaded.arch)
    assert acc.speaker_bias.per_speaker == 4  # fact's rank
    assert acc.speaker_bias.shared == 88 * 4 + 3 * 88  # fact's shared biases, topic's 3 topics over V = 88
