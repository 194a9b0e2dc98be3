"""Every speaker model family, every variant: the bias on the logits, incremental decoding, beam search, presets."""

import argparse

import pytest
import torch
from fairseq import options
from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY
from fairseq.sequence_generator import SequenceGenerator

import fairseq_speaker  # noqa: F401  (registers the task, models and criterion)
from fairseq_speaker.models import FAMILY_REGISTRY, PRESET_VARIANTS, preset_variant, speaker_presets
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY
from tests.helpers import FAMILIES, build_bias, make_model, make_task, random_batch

VARIANTS = sorted(SPEAKER_BIAS_REGISTRY) + ["fact+topic", "fact+hyper_lhuc"]
#: the variants with parameters of their own per speaker (a sum: if one of its parts has), as built
SPEAKER_VARIANTS = [v for v in VARIANTS if build_bias(v, make_task()).speaker_parameters()]


def forward(model, src, speakers, prev):
    lengths = src.ne(1).sum(1)
    return model(src, lengths, prev, speakers=speakers)


def batch(task):
    src = random_batch(task.source_dictionary, [5, 3, 4])
    prev = random_batch(task.target_dictionary, [4, 4, 4], left_pad=False)
    return src, prev


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", VARIANTS)
def test_the_bias_is_added_to_the_logits_of_the_same_network(family, name):
    task = make_task(num_speakers=4)
    biased = make_model(name, task=task, family=family)
    plain = make_model("none", task=task, family=family)
    missing, _ = plain.load_state_dict(biased.state_dict(), strict=False)
    assert missing == []
    src, prev = batch(task)
    speakers = torch.tensor([2, 0, 2])
    with torch.no_grad():
        logits, extra = forward(biased, src, speakers, prev)
        blind, reference_extra = forward(plain, src, speakers, prev)
        # a variant acting on the state: the same network with the speakers' state applied
        state = extra.get("speaker_state")
        assert (state is not None) == biased.speaker_bias.acts_on_state
        if state is not None:
            plain.decoder.prepare_speaker_state()
        with plain.decoder.applying_speaker_state(state):
            reference, _ = forward(plain, src, speakers, prev)
    assert reference_extra["speaker_bias"] is None and "speaker_state" not in reference_extra
    if state is not None:
        assert not torch.allclose(reference, blind, atol=1e-3)  # the state changed the network's output
    bias = extra["speaker_bias"]
    if bias is None:
        assert torch.equal(logits, reference)
        return
    assert bias.shape == (3, len(task.target_dictionary))
    assert torch.allclose(logits - reference, bias.unsqueeze(1).expand_as(logits), atol=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", VARIANTS)
def test_incremental_decoding_matches_teacher_forcing(family, name):
    task = make_task(num_speakers=4)
    model = make_model(name, task=task, family=family)
    src = random_batch(task.source_dictionary, [6, 2, 4])
    prev = random_batch(task.target_dictionary, [7, 7, 7], left_pad=False)
    speakers = torch.tensor([3, 1, -1])
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


@pytest.mark.parametrize("family", FAMILIES)
def test_reorder_encoder_out_moves_the_speakers_and_sources_with_the_sentences(family):
    task = make_task()
    model = make_model("fact", task=task, family=family)
    src = random_batch(task.source_dictionary, [3, 5])
    out = model.encoder(src, src.ne(1).sum(1), speakers=torch.tensor([1, 3]))
    reordered = model.encoder.reorder_encoder_out(out, torch.tensor([1, 1, 0]))
    assert reordered["speakers"][0].tolist() == [3, 3, 1]
    assert torch.equal(reordered["source_tokens"][0][2], src[0])
    states = reordered["encoder_out"]
    states = states[0] if isinstance(states, list) else states
    if "sentence_index" in reordered:  # the LSTM keeps the sentences' states and an index into them
        assert reordered["sentence_index"].tolist() == [1, 1, 0] and torch.equal(states, out["encoder_out"])
        states = states.index_select(1, reordered["sentence_index"])
        # reordered again: the index follows, as the states would
        again = model.encoder.reorder_encoder_out(reordered, torch.tensor([2, 0]))
        assert again["sentence_index"].tolist() == [0, 1] and again["speakers"][0].tolist() == [1, 3]
    original = out["encoder_out"][0] if isinstance(out["encoder_out"], list) else out["encoder_out"]
    assert torch.equal(states[:, 2], original[:, 0])


def _generate(model, task, src, speakers, beam=5):
    generator = SequenceGenerator([model], task.target_dictionary, beam_size=beam, max_len_b=8)
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(1).sum(1), "speakers": speakers}}
    with torch.no_grad():
        return [hypos[0] for hypos in generator.generate([model], sample)]


def _favour_eos(model, task, speaker: int) -> None:
    """Make one speaker's bias (whatever the variant) strongly favour ending the sentence; for a variant without
    a bias (it acts on the decoder's state), the decoder's logits of that speaker's hypotheses, as the encoder
    output (reordered with the beam) names them."""
    eos = task.target_dictionary.eos()

    def hook(module, inputs, output):
        boost = torch.zeros_like(output)
        boost[inputs[0] == speaker, eos] = 30.0
        return output + boost

    if model.speaker_bias.acts_on_output:
        model.speaker_bias.register_forward_hook(hook)
        return
    decoder_forward = model.decoder.forward  # fairseq's generator calls decoder.forward itself: no module hook

    def forward(prev_output_tokens, encoder_out=None, **kwargs):
        logits, extra = decoder_forward(prev_output_tokens, encoder_out=encoder_out, **kwargs)
        logits[encoder_out["speakers"][0] == speaker, :, eos] += 30.0
        return logits, extra

    model.decoder.forward = forward


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", SPEAKER_VARIANTS)
def test_batched_beam_search_decodes_each_sentence_as_alone(family, name):
    task = make_task(num_speakers=4)
    model = make_model(name, task=task, family=family)
    # speaker 2 ends sentences early: finished sentences leave the batch, and the
    # cached biases of the others must follow them
    _favour_eos(model, task, speaker=2)
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
    # the speaker decides: one sentence, two speakers, two translations (or, where a random model's strongest
    # word wins for both, two scores)
    assert batched[0]["tokens"].tolist() != batched[1]["tokens"].tolist() or not torch.allclose(
        batched[0]["positional_scores"], batched[1]["positional_scores"], atol=1e-3)


@pytest.mark.parametrize("family", FAMILIES)
def test_the_speaker_bias_is_computed_once_per_batch_during_beam_search(family):
    task = make_task(num_speakers=4)
    model = make_model("fact", task=task, family=family)
    calls = []
    model.speaker_bias.register_forward_hook(lambda module, inputs, output: calls.append(inputs[0].numel()))
    src = random_batch(task.source_dictionary, [4, 6, 5])
    _generate(model, task, src, torch.tensor([0, 1, 2]))
    assert calls == [3 * 5]  # one call, for every hypothesis of the three sentences at the first step


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", VARIANTS)
def test_a_speaker_model_called_without_speakers_says_so(family, name):
    task = make_task()
    src, prev = batch(task)
    model = make_model(name, task=task, family=family)
    if model.speaker_bias.needs_speakers:
        with pytest.raises(ValueError, match="called without speakers: use --task speaker_translation"):
            forward(model, src, None, prev)
        return
    # a model whose bias needs no speakers runs without them
    logits, extra = forward(model, src, None, prev)
    assert logits.shape == (3, 4, len(task.target_dictionary))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", VARIANTS)
def test_the_speaker_bias_parameters_are_the_only_difference_between_variants(family, name):
    task = make_task(num_speakers=4, num_words=8)

    def count(module):
        return sum(p.numel() for p in module.parameters())

    model = make_model(name, task=task, family=family)
    assert count(model) - count(make_model("none", task=task, family=family)) == count(model.speaker_bias)


@pytest.mark.parametrize("family", FAMILIES)
def test_training_mode_changes_only_through_dropout(family):
    task = make_task()
    model = make_model("full", task=task, family=family, dropout=0.5)
    src, prev = batch(task)
    speakers = torch.tensor([0, 1, 2])
    with torch.no_grad():
        model.eval()
        a, _ = forward(model, src, speakers, prev)
        b, _ = forward(model, src, speakers, prev)
        model.train()
        c, _ = forward(model, src, speakers, prev)
    assert torch.equal(a, b)
    assert not torch.allclose(a, c)


def test_paper_defaults_of_every_lstm_preset():
    paper = dict(encoder_embed_dim=512, encoder_hidden_size=512, decoder_embed_dim=512,
                 decoder_hidden_size=512, attention_dim=256, dropout=0.4, speaker_rank=10,
                 lstm_dropout=0.4, target_word_dropout=0.1, speaker_l2=0.0)
    for suffix, bias in PRESET_VARIANTS.items():
        args = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[f"lstm_{suffix}"](args)
        assert args.speaker_bias == bias
        for key, value in paper.items():
            assert getattr(args, key) == value, (suffix, key)


def test_transformer_presets_are_fairseqs_transformer_with_a_speaker_bias():
    for suffix, bias in PRESET_VARIANTS.items():
        args = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[f"transformer_{suffix}"](args)
        reference = argparse.Namespace()
        ARCH_CONFIG_REGISTRY["transformer"](reference)
        assert args.speaker_bias == bias
        assert {k: v for k, v in vars(args).items() if k in vars(reference)} == vars(reference)


def test_every_family_has_every_preset_and_each_builds_the_familys_model():
    assert {"lstm", "transformer"} <= set(FAMILY_REGISTRY)
    for family in FAMILY_REGISTRY.values():
        for suffix, variant in PRESET_VARIANTS.items():
            arch = f"{family.name}_{suffix}"
            assert arch in speaker_presets() and ARCH_MODEL_NAME_REGISTRY[arch] == family.model
            assert preset_variant(arch) == variant


@pytest.mark.parametrize("arch", ["lstm_fact_bias", "transformer_fact_bias"])
def test_command_line_flags_override_the_preset(arch):
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "data-bin", "--task", "speaker_translation", "--arch", arch,
        "--speaker-rank", "4", "--encoder-embed-dim", "32", "--dropout", "0.2",
    ])
    assert (args.speaker_bias, args.speaker_rank, args.encoder_embed_dim, args.dropout) == ("fact", 4, 32, 0.2)


@pytest.mark.parametrize("arch", speaker_presets())
@pytest.mark.parametrize("name", VARIANTS)
def test_any_variant_on_any_preset(arch, name):
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "data-bin", "--task", "speaker_translation", "--arch", arch, "--speaker-bias", name])
    assert args.speaker_bias == name


def test_iwslt_sizes_are_flags_away():
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "data-bin", "--task", "speaker_translation", "--arch", "transformer_full_bias",
        "--encoder-ffn-embed-dim", "1024", "--decoder-ffn-embed-dim", "1024",
        "--encoder-attention-heads", "4", "--decoder-attention-heads", "4"])
    reference = argparse.Namespace()
    ARCH_CONFIG_REGISTRY["transformer_iwslt_de_en"](reference)
    for key in ("encoder_ffn_embed_dim", "decoder_ffn_embed_dim", "encoder_attention_heads",
                "decoder_attention_heads", "encoder_embed_dim", "encoder_layers", "decoder_layers"):
        assert getattr(args, key) == getattr(reference, key), key


@pytest.mark.parametrize("family", FAMILIES)
def test_unknown_variant_is_rejected_with_the_registered_names(family):
    with pytest.raises(ValueError, match="registered variants: .*fact"):
        make_model("spk_vector", family=family)


def test_adaptive_softmax_is_refused_by_the_transformer():
    with pytest.raises(ValueError, match="adaptive-softmax-cutoff is not supported"):
        make_model("full", family="transformer", adaptive_softmax_cutoff="5")


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", ["fact", "fact+hyper_lhuc"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_forward_beam_search_and_training(family, name, dtype):
    """fp16-safe: no dtype mismatch anywhere (logits, bias, state, attention, mean speaker), finite outputs."""
    task = make_task()
    model = make_model(name, task=task, family=family).to(dtype)
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
    assert all(p.grad is not None and p.grad.dtype == dtype for p in model.speaker_bias.speaker_parameters().values())


class _LargeOutputs(torch.utils._python_dispatch.TorchDispatchMode):
    """Records every operator output with at least ``numel`` elements in memory of its own (not a view
    of an input, not written in place)."""

    def __init__(self, numel: int):
        super().__init__()
        self.numel, self.ops = numel, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        inputs = {t.untyped_storage().data_ptr() for t in torch.utils._pytree.tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor)}
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor) and t.numel() >= self.numel and not func._schema.is_mutable \
                    and t.untyped_storage().data_ptr() not in inputs:
                self.ops.append(str(func))
        return out


def _decoding_steps(model, src, speakers, steps=3, reorder=None):
    encoder_out = model.encoder(src, src.ne(1).sum(1), speakers=speakers)
    state, prev = {}, torch.full((len(src), 1), 2)
    outputs = []
    for _ in range(steps):
        outputs.append(model.decoder(prev, encoder_out, incremental_state=state)[0])
        if reorder is not None:
            model.decoder.reorder_incremental_state_scripting(state, reorder)
            encoder_out = model.encoder.reorder_encoder_out(encoder_out, reorder)
        prev = torch.cat([prev, outputs[-1].argmax(-1)], dim=1)
    return state, encoder_out, prev, outputs


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", VARIANTS)
def test_a_generation_step_allocates_nothing_of_vocabulary_size_beyond_the_plain_decoder(family, name):
    task = make_task(num_speakers=4, num_words=300)
    biased = make_model(name, task=task, family=family)
    plain = make_model("none", task=task, family=family)
    plain.load_state_dict(biased.state_dict(), strict=False)
    src = random_batch(task.source_dictionary, [5, 3, 4, 4])
    speakers = torch.tensor([1, 0, 3, 1])
    counts = []
    for model in (biased, plain):
        model.eval()
        with torch.no_grad():
            state, encoder_out, prev, _ = _decoding_steps(model, src, speakers, reorder=torch.tensor([1, 1, 0, 3]))
            with _LargeOutputs(len(task.target_dictionary)) as mode:
                model.decoder(prev, encoder_out, incremental_state=state)
                model.decoder.reorder_incremental_state_scripting(state, torch.tensor([2, 0, 1, 1]))
        counts.append(mode.ops)
    assert len(counts[0]) == len(counts[1]) >= 1, counts


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", SPEAKER_VARIANTS)
@pytest.mark.parametrize("onednn", [True, False], ids=["onednn-product", "blas-addmm"])
def test_the_fused_generation_step_equals_adding_the_bias(family, name, onednn, monkeypatch, fast_path_switch):
    """A step's logits with the bias rows fused (oneDNN's product plus the gathered rows on CPU, the rows
    and the BLAS's in-place addmm_ elsewhere) equal the output layer's logits plus the bias."""
    fast_path_switch(onednn)
    task = make_task(num_speakers=4)
    model = make_model(name, task=task, family=family).eval()
    src = random_batch(task.source_dictionary, [5, 5, 3, 6])
    speakers = torch.tensor([0, 1, 2, -1])
    with torch.no_grad():
        fused = _decoding_steps(model, src, speakers, steps=4, reorder=torch.tensor([3, 0, 0, 2]))[3]
        beam = _generate(model, task, src, speakers)
        monkeypatch.setattr(type(model.decoder), "output_weight_and_bias", lambda self: None)
        plain = _decoding_steps(model, src, speakers, steps=4, reorder=torch.tensor([3, 0, 0, 2]))[3]
        plain_beam = _generate(model, task, src, speakers)
    for a, b in zip(fused, plain):
        assert torch.allclose(a, b, atol=1e-5)
    assert [h["tokens"].tolist() for h in beam] == [h["tokens"].tolist() for h in plain_beam]


@pytest.mark.parametrize("name", ["none", "full", "fact", "hyper_lhuc", "fact+hyper_lhuc"])
def test_decoding_through_onednn_gives_the_plain_steps_and_beams(name, fast_path_switch):
    """A generation step of the LSTM multiplies through oneDNN (the cell's products, the attention's query,
    the output layer and the speaker rows' fused step): the same step logits and beams as PyTorch's own
    nn.LSTMCell and products."""
    task = make_task(num_speakers=4)
    model = make_model(name, task=task, family="lstm").eval()
    if model.speaker_bias.speaker_parameters():
        _favour_eos(model, task, speaker=2)  # sentences leave the beam on the way
    src = random_batch(task.source_dictionary, [5, 5, 3, 6, 4])
    speakers = torch.tensor([0, 1, 2, 3, 2])
    runs = []
    for enabled in (True, False):
        fast_path_switch(enabled)
        with torch.no_grad():
            steps = _decoding_steps(model, src, speakers, steps=4, reorder=torch.tensor([3, 0, 0, 2, 4]))[3]
        runs.append((steps, _generate(model, task, src, speakers)))
    (fast_steps, fast_beams), (plain_steps, plain_beams) = runs
    for a, b in zip(fast_steps, plain_steps):
        assert torch.allclose(a, b, atol=1e-5)
    for a, b in zip(fast_beams, plain_beams):
        assert a["tokens"].tolist() == b["tokens"].tolist()
        assert torch.allclose(a["positional_scores"], b["positional_scores"], atol=1e-5)


def test_the_decoder_cell_through_onednn_is_nn_lstm_cell():
    """:meth:`AttentionalLSTMDecoder._cell` against the nn.LSTMCell whose weights it uses: states and
    gradients."""
    task = make_task(num_speakers=4)
    decoder = make_model("none", task=task, family="lstm").decoder
    cell = decoder.cell
    x = torch.randn(6, cell.input_size, requires_grad=True)
    h = torch.randn(6, cell.hidden_size, requires_grad=True)
    c = torch.randn(6, cell.hidden_size, requires_grad=True)
    results = []
    for step in (decoder._cell, lambda x, h, c: cell(x, (h, c))):
        decoder.zero_grad()
        new_h, new_c = step(x, h, c)
        (new_h.sum() * 2 + (new_c * new_c).sum()).backward()
        grads = [t.grad.clone() for t in (x, h, c, cell.weight_ih, cell.weight_hh, cell.bias_ih)]
        for t in (x, h, c):
            t.grad = None
        results.append(([new_h.detach(), new_c.detach()], grads))
    for a, b in zip(results[0][0] + results[0][1], results[1][0] + results[1][1]):
        assert torch.allclose(a, b, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", SPEAKER_VARIANTS)
def test_beam_search_reading_each_sentences_encoder_states_once_equals_copying_them_per_hypothesis(
        name, monkeypatch):
    """The LSTM's beam search keeps the encoder states of each sentence and attends from all of its
    hypotheses at once; copying the states for every hypothesis (a group per hypothesis) is the plain way."""
    from fairseq_speaker.modules import attentional_lstm

    task = make_task(num_speakers=4)
    model = make_model(name, task=task, family="lstm").eval()
    _favour_eos(model, task, speaker=2)  # sentences leave the batch: the groups change on the way
    src = random_batch(task.source_dictionary, [5, 5, 3, 6, 5])
    speakers = torch.tensor([0, 1, 2, 3, 2])
    groups = []
    monkeypatch.setattr(attentional_lstm, "_groups", _recording(attentional_lstm._groups, groups))
    grouped = _generate(model, task, src, speakers)
    assert groups and all(len(g) < 25 for g in groups) and len({len(g) for g in groups}) > 1
    monkeypatch.setattr(attentional_lstm, "_groups", lambda index: index)
    plain = _generate(model, task, src, speakers)
    for a, b in zip(grouped, plain):
        assert a["tokens"].tolist() == b["tokens"].tolist()
        assert torch.allclose(a["positional_scores"], b["positional_scores"], atol=1e-5)
        assert torch.allclose(a["attention"], b["attention"], atol=1e-6)


def _recording(function, calls):
    def recorded(*args):
        result = function(*args)
        calls.append(result.tolist())
        return result
    return recorded


@pytest.mark.parametrize("name", ["fact", "fact+hyper_lhuc"])
@pytest.mark.parametrize("dropout", [0.0, 0.4])
def test_the_fast_lstm_training_path_gives_the_plain_losses_and_gradients(dropout, name, fast_path_switch):
    """Teacher forcing arranges the recurrence for speed (hoisted word gates, one product per weight
    gradient, oneDNN's products, tanh from sigmoid); with the same dropout masks it must give what
    nn.LSTMCell, PyTorch's own products and tanh and autograd give step by step (a speaker state too: its
    offset in the hoisted word gates, its scale inside the recurrence)."""
    task = make_task(num_speakers=4)
    model = make_model(name, task=task, lstm_dropout=dropout, dropout=dropout, target_word_dropout=0.1)
    src = random_batch(task.source_dictionary, [6, 3, 5, 4])
    prev = random_batch(task.target_dictionary, [5, 7, 2, 6], left_pad=False)
    speakers = torch.tensor([0, 3, 1, -1])
    runs = []
    for plain in (False, True):
        fast_path_switch(not plain)
        model.train()
        model.zero_grad()
        torch.manual_seed(5)
        logits, _ = forward(model, src, speakers, prev)
        loss = torch.log_softmax(logits, -1).gather(2, prev.unsqueeze(2)).sum()
        loss.backward()
        runs.append((loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}))
    (fast_loss, fast), (plain_loss, plain) = runs
    assert torch.allclose(fast_loss, plain_loss, rtol=1e-5)
    assert fast.keys() == plain.keys() and "decoder.cell.weight_hh" in fast and "encoder.lstm.weight_hh_l0" in fast
    assert all(key in fast for key in model.speaker_bias.state_dict(prefix="decoder.speaker_bias.")
               if not key.endswith("_extra_state"))  # the state's parameters get gradients on both paths
    for name in fast:
        assert torch.allclose(fast[name], plain[name], atol=1e-5, rtol=1e-4), name


def test_each_family_has_a_recommended_preset_beside_the_papers():
    """``{family}_speaker``: fact+hyper_lhuc on a decoder that takes a speaker state (the LSTM, the Transformer),
    the paper's fact otherwise; the paper's presets keep the paper's variants."""
    from fairseq_speaker.models.presets import RECOMMENDED

    for family in FAMILY_REGISTRY.values():
        arch = f"{family.name}_{RECOMMENDED}"
        assert arch in family.presets and arch in speaker_presets()
        assert ARCH_MODEL_NAME_REGISTRY[arch] == family.model
        expected = "fact+hyper_lhuc" if family.takes_speaker_state else "fact"
        assert preset_variant(arch) == family.recommended_variant == expected
        args = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[arch](args)
        assert args.speaker_bias == expected
        given = argparse.Namespace(speaker_bias="fact")  # --speaker-bias still wins
        ARCH_CONFIG_REGISTRY[arch](given)
        assert given.speaker_bias == "fact"
    assert FAMILY_REGISTRY["lstm"].recommended_variant == FAMILY_REGISTRY["transformer"].recommended_variant == (
        "fact+hyper_lhuc")
    assert RECOMMENDED not in PRESET_VARIANTS  # not one of the paper's


def test_the_attentions_layers_without_a_bias_hold_no_bias_entry():
    """fairseq's trainer takes the ``None`` bias entries of two layers for one parameter shared by both and logs
    "detected shared parameter" on every run: the layers of the MLP attention without a bias have no such entry
    (torch's ``_parameters``, read here because no public listing shows ``None`` entries)."""
    from fairseq_speaker.modules.mlp_attention import MLPAttention

    attention = MLPAttention(key_dim=4, query_dim=5, attention_dim=3)
    for layer in (attention.query_proj, attention.score):
        assert layer.bias is None and "bias" not in layer._parameters
    assert "bias" in attention.key_proj._parameters
    assert attention.query_proj(torch.ones(2, 5)).shape == (2, 3)
