"""speaker_lstm: the bias on the logits, incremental decoding, beam search with speakers, presets."""

import argparse

import pytest
import torch
from fairseq import options
from fairseq.sequence_generator import SequenceGenerator

import fairseq_speaker  # noqa: F401  (registers the task, model and criterion)
from fairseq_speaker.models import speaker_lstm
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY
from tests.helpers import make_model, make_task, random_batch

VARIANTS = sorted(SPEAKER_BIAS_REGISTRY)


def forward(model, src, speakers, prev):
    lengths = src.ne(model.encoder.padding_idx).sum(1)
    return model(src, lengths, prev, speakers=speakers)


def test_bias_is_added_to_the_logits_and_none_gives_them_unchanged():
    task = make_task(num_speakers=4)
    full = make_model("full", task=task)
    none = make_model("none", task=task, randomize_bias=False)
    missing, unexpected = none.load_state_dict(full.state_dict(), strict=False)
    assert missing == [] and unexpected == ["decoder.speaker_bias.weight"]

    src = random_batch(task.source_dictionary, [5, 3, 4])
    prev = random_batch(task.target_dictionary, [4, 4, 4], left_pad=False)
    speakers = torch.tensor([2, 0, 2])
    with torch.no_grad():
        biased, extra = forward(full, src, speakers, prev)
        plain, plain_extra = forward(none, src, speakers, prev)
    assert plain_extra["speaker_bias"] is None
    rows = full.speaker_bias.weight[speakers]  # B x V
    assert torch.allclose(biased - plain, rows.unsqueeze(1).expand_as(plain), atol=1e-5)
    assert torch.equal(extra["speaker_bias"], rows)

    # with every speaker's row at zero the full model is exactly the baseline
    with torch.no_grad():
        full.speaker_bias.weight.zero_()
        zeroed, _ = forward(full, src, speakers, prev)
    assert torch.equal(zeroed, plain)


@pytest.mark.parametrize("name", VARIANTS)
def test_incremental_decoding_matches_teacher_forcing(name):
    task = make_task(num_speakers=4)
    model = make_model(name, task=task)
    src = random_batch(task.source_dictionary, [6, 2, 4])
    prev = random_batch(task.target_dictionary, [7, 7, 7], left_pad=False)
    speakers = torch.tensor([3, 1, 0])
    with torch.no_grad():
        logits, _ = forward(model, src, speakers, prev)
        expected = model.get_normalized_probs((logits, None), log_probs=True)
        encoder_out = model.encoder(src, src.ne(1).sum(1), speakers=speakers)
        state = {}
        steps = []
        for t in range(prev.size(1)):
            out = model.decoder(prev[:, : t + 1], encoder_out, incremental_state=state)
            steps.append(model.get_normalized_probs(out, log_probs=True))
    assert torch.allclose(torch.cat(steps, dim=1), expected, atol=1e-5)


def test_reorder_encoder_out_moves_the_speakers_with_the_sentences():
    task = make_task()
    model = make_model("fact", task=task)
    src = random_batch(task.source_dictionary, [3, 5])
    out = model.encoder(src, src.ne(1).sum(1), speakers=torch.tensor([1, 3]))
    reordered = model.encoder.reorder_encoder_out(out, torch.tensor([1, 1, 0]))
    assert reordered["speakers"].tolist() == [3, 3, 1]
    assert torch.equal(reordered["encoder_out"][:, 2], out["encoder_out"][:, 0])
    assert torch.equal(reordered["encoder_last"][0], out["encoder_last"][1])


def _generate(model, task, src, speakers):
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=5, max_len_b=8)
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(1).sum(1), "speakers": speakers}}
    with torch.no_grad():
        return [hypos[0] for hypos in generator.generate([model], sample)]


@pytest.mark.parametrize("name", ["full", "fact"])
def test_batched_beam_search_decodes_each_sentence_as_alone(name):
    task = make_task(num_speakers=4)
    model = make_model(name, task=task)
    # speaker 2 ends sentences early: finished sentences leave the batch, and the
    # cached biases of the others must follow them
    eos = task.target_dictionary.eos()
    with torch.no_grad():
        if name == "full":
            model.speaker_bias.weight[2, eos] += 30.0
        else:
            model.speaker_bias.shared_biases[eos, 0] += 30.0
            model.speaker_bias.speaker_weights[:, 0] = 0.0
            model.speaker_bias.speaker_weights[2, 0] = 1.0
    src = random_batch(task.source_dictionary, [5, 5, 3, 6, 5])
    src[1] = src[0]  # the same sentence, said by two speakers
    speakers = torch.tensor([0, 1, 2, 3, 2])
    batched = _generate(model, task, src, speakers)
    alone = []
    for i in range(len(src)):
        row = src[i][src[i].ne(1)].unsqueeze(0)
        alone.append(_generate(model, task, row, speakers[i : i + 1])[0])
    lengths = [len(h["tokens"]) for h in batched]
    assert min(lengths) < max(lengths)  # some sentences finished before others
    for b, a in zip(batched, alone):
        assert b["tokens"].tolist() == a["tokens"].tolist()
        assert float(b["score"]) == pytest.approx(float(a["score"]), abs=1e-4)
    # the speaker decides: one sentence, two speakers, two translations
    assert batched[0]["tokens"].tolist() != batched[1]["tokens"].tolist()


def test_speaker_bias_is_computed_once_per_batch_during_beam_search():
    task = make_task(num_speakers=4)
    model = make_model("fact", task=task)
    calls = []
    model.speaker_bias.register_forward_hook(lambda module, inputs, output: calls.append(inputs[0].numel()))
    src = random_batch(task.source_dictionary, [4, 6, 5])
    _generate(model, task, src, torch.tensor([0, 1, 2]))
    assert calls == [3 * 5]  # one call, for every hypothesis of the three sentences at the first step


@pytest.mark.parametrize("name,extra", [("none", 0), ("full", 4 * 15), ("fact", 3 * (4 + 15))])
def test_speaker_parameters_are_the_only_difference_between_variants(name, extra):
    task = make_task(num_speakers=4, num_words=8)  # target vocabulary: 4 special + 11 words
    assert len(task.target_dictionary) == 15

    def count(model):
        return sum(p.numel() for p in model.parameters())

    assert count(make_model(name, task=task)) - count(make_model("none", task=task)) == extra


def test_training_mode_changes_only_through_dropout():
    task = make_task()
    model = make_model("full", task=task, dropout=0.5)
    src = random_batch(task.source_dictionary, [4, 4])
    prev = random_batch(task.target_dictionary, [5, 5], left_pad=False)
    speakers = torch.tensor([0, 1])
    with torch.no_grad():
        model.eval()
        a, _ = forward(model, src, speakers, prev)
        b, _ = forward(model, src, speakers, prev)
        model.train()
        c, _ = forward(model, src, speakers, prev)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_paper_defaults_of_every_preset():
    paper = dict(encoder_embed_dim=512, encoder_hidden_size=512, decoder_embed_dim=512,
                 decoder_hidden_size=512, attention_dim=256, dropout=0.4, speaker_rank=10,
                 lstm_dropout=0.4, target_word_dropout=0.1)
    for arch, bias in [("lstm_base", "none"), ("lstm_full_bias", "full"), ("lstm_fact_bias", "fact")]:
        args = argparse.Namespace()
        getattr(speaker_lstm, arch)(args)
        assert args.speaker_bias == bias
        for key, value in paper.items():
            assert getattr(args, key) == value, (arch, key)


def test_command_line_flags_override_the_preset():
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [
        "data-bin", "--task", "speaker_translation", "--arch", "lstm_fact_bias",
        "--speaker-rank", "4", "--encoder-hidden-size", "32", "--attention-dim", "16", "--dropout", "0.2",
    ])
    assert (args.speaker_bias, args.speaker_rank, args.encoder_hidden_size) == ("fact", 4, 32)
    assert (args.attention_dim, args.dropout, args.decoder_hidden_size) == (16, 0.2, 512)


def test_unknown_variant_is_rejected_with_the_registered_names():
    with pytest.raises(ValueError, match="registered variants: fact, full, none"):
        make_model("spk_vector")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_forward_beam_search_and_training(dtype):
    """fp16-safe: no dtype mismatch anywhere (logits, bias, attention, mean speaker), finite outputs."""
    task = make_task()
    model = make_model("fact", task=task).to(dtype)
    src = random_batch(task.source_dictionary, [5, 3])
    prev = random_batch(task.target_dictionary, [4, 4], left_pad=False)
    logits, extra = forward(model, src, torch.tensor([0, 1]), prev)
    assert logits.dtype == dtype and extra["speaker_bias"].dtype == dtype
    assert torch.isfinite(model.get_normalized_probs((logits, None), log_probs=True)).all()
    hypos = _generate(model, task, src, torch.tensor([0, -1]))  # a known and an unseen speaker
    assert all(torch.isfinite(h["positional_scores"]).all() for h in hypos)
    model.train()
    logits, _ = forward(model, src, torch.tensor([0, 1]), prev)
    logits.float().logsumexp(-1).sum().backward()
    assert model.speaker_bias.speaker_weights.grad.dtype == dtype
