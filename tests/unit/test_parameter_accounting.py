"""Parameter accounting, pinned against the paper's figures (section 3 and its parameter counts)."""

import re

import pytest
import torch

from fairseq_speaker.analysis.parameter_accounting import compare_variants, count_parameters, main
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY
from tests.helpers import make_model, make_task

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


def test_every_registered_variant_is_compared_from_its_contract():
    costs = {c.name.split(" ")[0]: c for c in compare_variants(15, 4, "lstm_base", ["--speaker-rank", "3"])}
    assert set(costs) == set(SPEAKER_BIAS_REGISTRY) - {"sum"}  # a combinator costs its parts
    task = make_task(num_speakers=4, num_words=8)  # target vocabulary: 4 special + 11 words = 15
    for name in ("full", "fact", "proj", "simplex"):
        bias = make_model(name, task=task, speaker_rank=3, speaker_embed_dim=10).speaker_bias
        assert costs[name].total == sum(p.numel() for p in bias.parameters()), name
        assert costs[name].per_speaker == bias.parameters_per_speaker()


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
          "--encoder-hidden-size", "256"])
    out = capsys.readouterr().out
    assert re.search(rf"speaker-agnostic part \(base model\) +{expected_base(enc=256):,}\n", out)
    assert "one more speaker, for V = 40,000 target words: 40,000 parameters = 160,000 bytes (0.08504%" in out
    for name in set(SPEAKER_BIAS_REGISTRY) - {"sum"}:
        assert f"\n  {name}" in out
    main(["--src-vocab", "1000", "--tgt-vocab", "1000", "--speakers", "10", "--arch", "transformer_base",
          "--speaker-bias", "proj", "--speaker-embed-dim", "7", "--encoder-layers", "1"])
    assert "transformer_base (speaker bias 'proj')" in capsys.readouterr().out


def test_counting_allocates_nothing():
    before = torch.zeros(1).device  # the meta device is used inside; nothing to free afterwards
    acc = count_parameters(V, V, 100000, "lstm_full_bias")
    assert acc.speaker == 100000 * V and before.type == "cpu"
