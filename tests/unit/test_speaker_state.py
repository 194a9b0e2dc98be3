"""Speakers in the decoder's state: a variant's input offset and layer scales, in every family that takes them.

The contract tests of every variant (tests/unit/test_speaker_bias.py, tests/unit/test_model.py) cover the
state variants as they cover the others; here are the properties of the state itself: starting as the
speaker-blind model, a speaker's rows acting on that speaker alone, composition with an output variant,
beam reordering, and the Transformer's hooks leaving the encoder alone.
"""

import argparse
import contextlib
import copy

import pytest
import torch
from fairseq.sequence_generator import SequenceGenerator

import fairseq_speaker  # noqa: F401  (registers the task, models and criterion)
from fairseq_speaker.data import MEAN_SPEAKER, NO_SPEAKER
from fairseq_speaker.errors import UserError
from fairseq_speaker.models import FAMILY_REGISTRY, SpeakerTransformerDecoder
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY, SpeakerState, build_speaker_bias
from tests.helpers import FAMILIES, build_bias, make_model, make_task, random_batch, randomize, variant_options

#: every registered variant that acts on the decoder's state
STATE_VARIANTS = sorted(name for name, cls in SPEAKER_BIAS_REGISTRY.items() if cls.acts_on_state is True)


def forward(model, src, speakers, prev):
    return model(src, src.ne(1).sum(1), prev, speakers=speakers)


def batch(task, lengths=(5, 3, 4, 6)):
    src = random_batch(task.source_dictionary, list(lengths))
    prev = random_batch(task.target_dictionary, [6] * len(lengths), left_pad=False)
    return src, prev


def blind_twin(model, task, family):
    """The speaker-blind model (``none``) with ``model``'s network."""
    plain = make_model("none", task=task, family=family)
    missing, _ = plain.load_state_dict(model.state_dict(), strict=False)
    assert missing == []
    return plain


def test_the_state_variants_of_the_issue_are_registered_and_every_package_family_takes_them():
    assert {"lhuc", "hyper_lhuc", "input"} <= set(STATE_VARIANTS)
    assert all(FAMILY_REGISTRY[family].takes_speaker_state for family in FAMILIES)


# -- the state on its own ------------------------------------------------------------------------------


def test_states_compose_offsets_adding_and_scales_multiplying():
    a = SpeakerState(torch.tensor([[1.0, 2.0]]), (torch.tensor([[2.0]]), None))
    b = SpeakerState(torch.tensor([[0.5, 0.5]]), (torch.tensor([[3.0]]), torch.tensor([[0.5, 4.0]])))
    both = SpeakerState.compose(a, b)
    assert both.input_offset.tolist() == [[1.5, 2.5]]
    assert both.layer_scale(0).tolist() == [[6.0]] and both.layer_scale(1).tolist() == [[0.5, 4.0]]
    scales_only = SpeakerState(layer_scales=(torch.tensor([[2.0]]),))
    assert SpeakerState.compose(scales_only, a).input_offset.tolist() == [[1.0, 2.0]]
    assert SpeakerState.compose(None, a) is a and SpeakerState.compose(a, None) is a
    assert SpeakerState.compose(None, None) is None


def test_a_state_keeps_its_rows_for_the_beam_and_gives_unseen_rows_another_or_none():
    state = SpeakerState(torch.arange(6.0).reshape(3, 2), (torch.tensor([[2.0], [3.0], [4.0]]),))
    beam = state.index_select(torch.tensor([2, 2, 0]))
    assert beam.input_offset.tolist() == [[4.0, 5.0], [4.0, 5.0], [0.0, 1.0]]
    assert beam.layer_scale(0).tolist() == [[4.0], [4.0], [2.0]]
    mean = SpeakerState(torch.tensor([[9.0, 9.0]]), (torch.tensor([[7.0]]),))
    mixed = state.where(torch.tensor([False, True, False]), mean).where(torch.tensor([True, False, False]), None)
    assert mixed.input_offset.tolist() == [[0.0, 0.0], [9.0, 9.0], [4.0, 5.0]]
    assert mixed.layer_scale(0).tolist() == [[1.0], [7.0], [4.0]]
    assert mixed.deviation().tolist() == [0.0, 81 + 81 + 36, 16 + 25 + 9]


@pytest.mark.parametrize("name", STATE_VARIANTS)
def test_the_mean_speaker_of_a_state_variant_is_the_speaker_of_the_mean_rows(name):
    """LHUC's scale 2 sigmoid(a) is not linear: the mean speaker is the one whose rows are the mean rows (where a
    new speaker starts), its scale 2 sigmoid(mean a), not the mean of the scales."""
    task = make_task(num_speakers=5)
    bias = build_bias(name, task)
    unseen = bias.speaker_state(torch.tensor([MEAN_SPEAKER]))
    every = bias.speaker_state(torch.arange(5))
    rows = {key: value.mean(0, keepdim=True) for key, value in bias.speaker_parameters().items()}
    expected = bias.state_of_rows(rows)
    for got, want in zip(unseen.tensors(), expected.tensors()):
        assert torch.allclose(got, want, atol=1e-6)
    if unseen.layer_scales is not None:  # and so not the mean of the speakers' scales
        assert not torch.allclose(unseen.layer_scale(0), every.layer_scale(0).mean(0, keepdim=True), atol=1e-4)
    none = bias.speaker_state(torch.tensor([NO_SPEAKER]))
    assert all(torch.count_nonzero(t) == 0 for t in [none.input_offset] if t is not None)
    assert all(torch.equal(s, torch.ones_like(s)) for s in (none.layer_scales or ()))


# -- in the models ------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", STATE_VARIANTS)
def test_a_state_variant_as_initialized_is_exactly_the_speaker_blind_model(family, name):
    task = make_task(num_speakers=4)
    model = make_model(name, task=task, family=family, randomize_bias=False)
    plain = blind_twin(model, task, family)
    src, prev = batch(task)
    speakers = torch.tensor([0, 3, MEAN_SPEAKER, 1])
    with torch.no_grad():
        logits, extra = forward(model, src, speakers, prev)
        reference, _ = forward(plain, src, speakers, prev)
        assert extra["speaker_state"] is not None  # there is a state, and it changes nothing
        assert torch.equal(logits, reference)
        encoder_out = model.encoder(src, src.ne(1).sum(1), speakers=speakers)
        reference_out = plain.encoder(src, src.ne(1).sum(1), speakers=speakers)
        state, plain_state = {}, {}
        for t in range(prev.size(1)):
            step = model.decoder(prev[:, : t + 1], encoder_out, incremental_state=state)[0]
            plain_step = plain.decoder(prev[:, : t + 1], reference_out, incremental_state=plain_state)[0]
            assert torch.equal(step, plain_step)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", STATE_VARIANTS)
def test_changing_one_speakers_rows_changes_that_speakers_translations_only(family, name):
    task = make_task(num_speakers=4)
    model = make_model(name, task=task, family=family)  # shared matrices random too: the rows matter
    src, prev = batch(task)
    speakers = torch.tensor([0, 1, 2, 1])
    with torch.no_grad():
        before, _ = forward(model, src, speakers, prev)
        rows = {key: value + torch.randn_like(value) for key, value in model.speaker_bias.export_speakers([1]).items()}
        model.speaker_bias.import_speakers([1], rows)
        after, _ = forward(model, src, speakers, prev)
    changed = [not torch.equal(a, b) for a, b in zip(before, after)]
    assert changed == [False, True, False, True]


@pytest.mark.parametrize("family", FAMILIES)
def test_fact_plus_hyper_lhuc_is_facts_bias_on_the_logits_of_the_network_in_hyper_lhucs_state(family):
    task = make_task(num_speakers=4)
    both = make_model("fact+hyper_lhuc", task=task, family=family)
    state_only = make_model("hyper_lhuc", task=task, family=family)
    part = "decoder.speaker_bias.parts.hyper_lhuc."
    weights = {key.replace(part, "decoder.speaker_bias."): value for key, value in both.state_dict().items()
               if not key.startswith("decoder.speaker_bias.") or key.startswith(part)}
    state_only.load_state_dict(weights, strict=True)
    src, prev = batch(task)
    speakers = torch.tensor([2, 0, MEAN_SPEAKER, NO_SPEAKER])
    with torch.no_grad():
        logits, extra = forward(both, src, speakers, prev)
        reference, reference_extra = forward(state_only, src, speakers, prev)
        fact_bias = both.speaker_bias.parts["fact"](speakers)
    assert reference_extra["speaker_bias"] is None
    assert torch.allclose(extra["speaker_bias"], fact_bias)
    for a, b in zip(extra["speaker_state"].tensors(), reference_extra["speaker_state"].tensors()):
        assert torch.equal(a, b)
    assert torch.allclose(logits, reference + fact_bias.unsqueeze(1), atol=1e-5)


def test_two_state_variants_add_their_offsets_and_multiply_their_scales():
    task = make_task(num_speakers=4)
    bias = build_bias("lhuc+hyper_lhuc", task)
    speakers = torch.tensor([0, 3, MEAN_SPEAKER])
    state = bias.speaker_state(speakers)
    lhuc = bias.parts["lhuc"].speaker_state(speakers)
    hyper = bias.parts["hyper_lhuc"].speaker_state(speakers)
    assert torch.equal(state.input_offset, hyper.input_offset)  # lhuc has none
    for layer, scale in enumerate(state.layer_scales):
        assert torch.allclose(scale, lhuc.layer_scale(layer) * hyper.layer_scale(layer))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", ["hyper_lhuc", "fact+hyper_lhuc"])
def test_each_hypothesis_keeps_its_speakers_state_when_the_beam_reorders(family, name):
    """Incremental decoding with the hypotheses reordered between steps as beam search does (within each
    sentence's beam; a finished sentence's beam leaves the batch) gives the teacher-forced logits of the
    reordered hypotheses: the cached state follows the beam."""
    task = make_task(num_speakers=4)
    model = make_model(name, task=task, family=family)
    beams = torch.tensor([0, 0, 1, 1, 2, 2])  # three sentences, a beam of two
    src = random_batch(task.source_dictionary, [5, 3, 4])[beams]
    prev = random_batch(task.target_dictionary, [6] * 6, left_pad=False)
    speakers = torch.tensor([0, 3, 1])[beams]
    order = torch.tensor([1, 0, 5, 4])  # sentence 1 done; the others' hypotheses swap
    with torch.no_grad():
        expected, _ = forward(model, src[order], speakers[order], prev[order])
        encoder_out = model.encoder(src, src.ne(1).sum(1), speakers=speakers)
        state, steps = {}, []
        for t in range(prev.size(1)):
            tokens = prev[:, : t + 1] if t < 2 else prev[order, : t + 1]
            steps.append(model.decoder(tokens, encoder_out, incremental_state=state)[0])
            if t == 1:  # the beam reorders after the second step
                model.decoder.reorder_incremental_state_scripting(state, order)
                encoder_out = model.encoder.reorder_encoder_out(encoder_out, order)
    reordered = torch.cat([s.index_select(0, order) for s in steps[:2]] + steps[2:], dim=1)
    assert torch.allclose(reordered, expected, atol=1e-5)


def _shared_embeddings_model(name):
    task = make_task(num_speakers=4)
    task.source_dictionary = task.target_dictionary  # one dictionary: --share-all-embeddings
    return task, make_model(name, task=task, family="transformer", share_all_embeddings=True)


def test_with_shared_embeddings_the_transformers_hooks_leave_the_encoder_alone():
    task, model = _shared_embeddings_model("input")
    _, plain = _shared_embeddings_model("none")
    plain.load_state_dict(model.state_dict(), strict=False)
    assert model.encoder.embed_tokens is model.decoder.embed_tokens  # one module, hooked for the decoder
    src = random_batch(task.source_dictionary, [5, 3, 4])
    prev = random_batch(task.target_dictionary, [4, 4, 4], left_pad=False)
    speakers = torch.tensor([0, 1, 2])
    encoded, plain_encoded = [], []  # what the encoder's first layer reads: the source embeddings (and positions)
    model.encoder.layers[0].register_forward_hook(lambda module, inputs, output: encoded.append(inputs[0]))
    plain.encoder.layers[0].register_forward_hook(lambda module, inputs, output: plain_encoded.append(inputs[0]))
    with torch.no_grad():
        logits, _ = forward(model, src, speakers, prev)  # the decoder runs with the state...
        forward(model, src, speakers, prev)  # ...and then the encoder again
        reference, _ = forward(plain, src, speakers, prev)
        sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(1).sum(1), "speakers": speakers}}
        hypotheses = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=5).generate(
            [model], sample)
    assert len(encoded) == 3 and len(hypotheses) == 3
    for out in encoded:
        assert torch.equal(out, plain_encoded[0])
    assert not torch.allclose(logits, reference, atol=1e-3)  # while the decoder's inputs were moved


def test_a_copy_of_a_model_applies_its_own_state():
    """A copied model (fairseq's EMA deep-copies it) has hooks of its own, reading its own decoder's state."""
    task = make_task(num_speakers=4)
    model = make_model("hyper_lhuc", task=task, family="transformer")
    twin = copy.deepcopy(model)
    src, prev = batch(task)
    speakers = torch.tensor([0, 1, 2, 3])
    with torch.no_grad():
        before, _ = forward(model, src, speakers, prev)
        randomize(model.speaker_bias)  # the original changes, the copy must not
        assert torch.equal(forward(twin, src, speakers, prev)[0], before)
        assert not torch.allclose(forward(model, src, speakers, prev)[0], before)


def test_a_decoder_that_does_not_say_where_a_state_acts_refuses_a_state_variant(monkeypatch):
    monkeypatch.setattr(SpeakerTransformerDecoder, "speaker_state_sites", lambda self: None)
    with pytest.raises(UserError, match="--speaker-bias lhuc acts on the decoder's state.*speaker_state_sites"):
        make_model("lhuc", family="transformer")
    make_model("fact", family="transformer")  # variants on the logits need no sites


@pytest.mark.parametrize("family", FAMILIES)
def test_a_state_variants_parameters_exist_before_a_checkpoint_is_loaded(family):
    task = make_task(num_speakers=4)
    trained = make_model("fact+hyper_lhuc", task=task, family=family)
    fresh = make_model("fact+hyper_lhuc", task=task, family=family, randomize_bias=False)
    fresh.load_state_dict(trained.state_dict(), strict=True)
    src, prev = batch(task)
    speakers = torch.tensor([0, 1, MEAN_SPEAKER, 3])
    with torch.no_grad():
        assert torch.equal(forward(fresh, src, speakers, prev)[0], forward(trained, src, speakers, prev)[0])


@pytest.mark.parametrize("name", ["hyper_lhuc", "fact+hyper_lhuc"])
def test_a_state_variant_built_alone_takes_its_sites_from_the_checkpoint(name):
    """Inspection rebuilds a checkpoint's variant without its decoder: the sizes of its state come with the
    parameters (the variant's extra state), and it gives the model's states."""
    task = make_task(num_speakers=4)
    model = make_model(name, task=task, family="transformer")
    prefix = "decoder.speaker_bias."
    saved = {key[len(prefix):]: value for key, value in model.state_dict().items() if key.startswith(prefix)}
    alone = build_speaker_bias(name, argparse.Namespace(**variant_options(name, task)), task.speaker_dictionary,
                               task.target_dictionary)
    assert alone.sites is None
    alone.load_state_dict(saved, strict=True)
    assert alone.sites == model.decoder.speaker_state_sites()
    speakers = torch.tensor([0, 2, MEAN_SPEAKER])
    for a, b in zip(alone.speaker_state(speakers).tensors(), model.speaker_bias.speaker_state(speakers).tensors()):
        assert torch.equal(a, b)


# -- onboarding: fitting a speaker's rows through the frozen decoder ------------------------------------


def _pairs(task, n=6, seed=3):
    generator = torch.Generator().manual_seed(seed)
    src = random_batch(task.source_dictionary, [5, 4, 6, 3, 5, 4][:n], left_pad=False, generator=generator)
    tgt = random_batch(task.target_dictionary, [4, 6, 3, 5, 4, 6][:n], left_pad=False, generator=generator)
    return [(s[s.ne(1)], t[t.ne(1)]) for s, t in zip(src, tgt)]


def _model_nll(model, task, pairs, speaker):
    """The summed loss of the target words as the model computes them for ``speaker``."""
    from fairseq.data import LanguagePairDataset

    dataset = LanguagePairDataset([s for s, _ in pairs], [len(s) for s, _ in pairs], task.source_dictionary,
                                  [t for _, t in pairs], [len(t) for _, t in pairs], task.target_dictionary,
                                  shuffle=False)
    batch = dataset.collater([dataset[i] for i in range(len(pairs))])
    net = batch["net_input"]
    with torch.no_grad():
        logits, _ = model(net["src_tokens"], net["src_lengths"], net["prev_output_tokens"],
                          speakers=torch.full((len(pairs),), speaker))
    lprobs = torch.log_softmax(logits.float(), dim=-1)
    keep = batch["target"].ne(task.target_dictionary.pad())
    return float(-lprobs.gather(2, batch["target"].unsqueeze(2)).squeeze(2)[keep].sum())


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", ["hyper_lhuc", "fact+hyper_lhuc"])
def test_the_loss_through_the_decoder_with_a_speakers_rows_is_the_models_loss(family, name):
    from fairseq_speaker.onboarding.fit_loss import scored_nll
    from fairseq_speaker.onboarding.scoring import decoder_batches

    task = make_task(num_speakers=4)
    model = make_model(name, task=task, family=family)
    pairs = _pairs(task)
    batches = decoder_batches(model, pairs, task.source_dictionary, task.target_dictionary, batch_size=4)
    assert [b.num_sentences for b in batches] == [4, 2]
    bias = model.speaker_bias
    for speaker in (1, 3):
        params = {**bias.shared_parameters(), **bias.export_speakers([speaker])}
        with torch.no_grad():
            got = sum(float(scored_nll(bias, params, b)) for b in batches)
        assert got == pytest.approx(_model_nll(model, task, pairs, speaker), rel=1e-5)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", ["lhuc", "fact+hyper_lhuc", "proj+input"])
def test_the_fast_loss_through_the_decoder_gives_the_plain_paths_loss_and_gradient(family, name):
    """The fit's fast path (the output layer on the real target positions only, the speaker's output bias folded
    into the output layer's, the loss from the logits in one buffer) against the plain one (the decoder's logits
    for every position, log_softmax, gather): the same loss and the same gradient for the speaker's rows, on
    sentences of different lengths (padding) in two batches; and switching the fast paths off does take the plain
    path (the plain path's padded logits are seen)."""
    from fairseq_speaker import fast_paths
    from fairseq_speaker.onboarding.fit_loss import decoder_nll
    from fairseq_speaker.onboarding.scoring import decoder_batches

    task = make_task(num_speakers=4)
    model = make_model(name, task=task, family=family).double()  # the two paths sum in other orders: compared in
    bias = model.speaker_bias                                     # float64, a float32 rounding is not a difference
    batches = decoder_batches(model, _pairs(task), task.source_dictionary, task.target_dictionary, batch_size=4)
    assert all(b.output_names is not None for b in batches)
    assert any(b.target.eq(b.pad).any() for b in batches)  # there is padding to leave out

    def loss_and_grads(fast: bool):
        rows = {k: v.detach().clone().requires_grad_(True) for k, v in bias.export_speakers([2]).items()}
        params = {**{k: v.detach() for k, v in bias.shared_parameters().items()}, **rows}
        with (contextlib.nullcontext() if fast else fast_paths.plain()):
            loss = sum(decoder_nll(bias, params, b) for b in batches)
        loss.backward()
        return float(loss), {k: v.grad.clone() for k, v in rows.items()}

    fast_loss, fast_grads = loss_and_grads(True)
    plain_loss, plain_grads = loss_and_grads(False)
    assert fast_loss == pytest.approx(plain_loss, rel=1e-5)
    assert fast_loss == pytest.approx(_model_nll(model, task, _pairs(task), 2), rel=1e-5)
    for key, grad in plain_grads.items():
        assert grad.abs().max() > 0
        assert torch.allclose(fast_grads[key], grad, rtol=1e-4, atol=1e-6), key
    assert all(p.grad is None for p in model.parameters())  # the network got no gradient on either path


@pytest.mark.parametrize("family", FAMILIES)
def test_a_state_variants_speaker_is_fitted_through_the_frozen_decoder(family):
    """From the mean speaker, L-BFGS on a speaker's rows through the decoder lowers the loss of their sentences
    towards what the model gives the speaker who said them; the network gets no gradient."""
    from fairseq_speaker.onboarding.fit import fit_speakers
    from fairseq_speaker.onboarding.fit_options import FitOptions
    from fairseq_speaker.onboarding.scoring import decoder_batches

    task = make_task(num_speakers=4)
    model = make_model("hyper_lhuc", task=task, family=family)
    bias = model.speaker_bias
    pairs = _pairs(task)
    batches = decoder_batches(model, pairs, task.source_dictionary, task.target_dictionary)
    rows, shared, report = fit_speakers(bias, [batches], FitOptions(l2=0.0, max_iter=30))
    assert report.loss_after < report.loss_before
    assert all(p.grad is None for p in model.parameters())
    assert set(rows[0]) == set(bias.speaker_parameters()) and rows[0]["speaker_codes"].shape == (1, 3)
    model.speaker_bias.import_speakers([2], rows[0])
    fitted = _model_nll(model, task, pairs, 2) / report.tokens
    assert fitted == pytest.approx(report.loss_after, rel=1e-4)  # the fitted rows give the model this loss
    assert fitted < _model_nll(model, task, pairs, MEAN_SPEAKER) / report.tokens


def _remembering(task, said):
    """A memory of the speakers' words (``said``: row -> token id lists), as fairseq-speaker-words makes it."""
    from fairseq_speaker.modules.speaker_words import SpeakerWords

    d = task.target_dictionary
    words = SpeakerWords(len(d), ignored=(d.pad(), d.bos(), d.unk()))
    words.resize(len(task.speaker_dictionary))
    for row, tokens in said.items():
        words.set_words(row, tokens)
    return words


@pytest.mark.parametrize("family", FAMILIES)
def test_a_new_speakers_fit_through_the_decoder_starts_from_the_known_speakers_whose_words_are_most_like_theirs(
        family):
    """In a model that remembers its speakers' words, the fit of a new speaker starts from the weighted mean rows of
    the speakers who said the words most like theirs, among those the model had when the adapter was made; it
    ends where the fit from the mean speaker ends (the objective is the same)."""
    from fairseq_speaker.modules.speaker_words import attach, speaker_words_of
    from fairseq_speaker.onboarding.adapter import SpeakerAdapter
    from fairseq_speaker.onboarding.fit import fit_speakers
    from fairseq_speaker.onboarding.fit_options import FitOptions

    task = make_task(num_speakers=4, num_words=40)
    task.cfg = argparse.Namespace()  # the data's padding: fairseq's defaults
    model = make_model("fact+hyper_lhuc", task=task, family=family)
    pairs = _pairs(task)
    targets = [t for _, t in pairs]
    said = {int(w) for t in targets for w in t}
    stranger = [w for w in range(task.target_dictionary.nspecial, len(task.target_dictionary)) if w not in said][:4]
    assert stranger  # words the new speaker never said
    plain = copy.deepcopy(model)  # no memory of words: fitted here from the mean speaker
    attach(model, _remembering(task, {1: targets, 2: targets, 3: [torch.tensor(stranger)]}))
    adapter = SpeakerAdapter(model, task, FitOptions(max_iter=200))
    rows = model.speaker_bias.export_speakers([1, 2])
    start = adapter.neighbours_start(adapter.chunks(pairs))  # 1 and 2 said the same words; 3 none of them
    for name, value in rows.items():
        assert torch.allclose(start[name], value.mean(0, keepdim=True), atol=1e-6), name
    assert any(not torch.allclose(start[name], adapter.mean_speaker[name]) for name in rows)
    assert adapter.start_and_prior(adapter.chunks(pairs))[0] is not adapter.mean_speaker

    chunks = adapter.chunks(pairs)
    start, prior = adapter.start_and_prior(chunks)
    _, _, report = fit_speakers(model.speaker_bias, [chunks], adapter.options, init=[start], prior=[prior])
    mean = SpeakerAdapter(plain, task, FitOptions(max_iter=200))
    _, _, from_mean = fit_speakers(plain.speaker_bias, [chunks], mean.options, init=[mean.mean_speaker],
                                   prior=[mean.mean_speaker])
    assert report.loss_before != pytest.approx(from_mean.loss_before, rel=1e-3)  # another start ...
    assert report.loss_after == pytest.approx(from_mean.loss_after, rel=1e-3)  # ... the same end

    # a speaker who said exactly these words too, added after the adapter was made (as add_speakers adds one):
    # not a neighbour
    model.speaker_bias.grow(1, "mean", names=["newcomer"])
    model.speaker_bias.import_speakers([4], {k: v[:1] + 1.0 for k, v in rows.items()})
    speaker_words_of(model).set_words(4, targets)
    again = adapter.neighbours_start(adapter.chunks(pairs))
    assert speaker_words_of(model)._index is None  # nor is the memory's index built again for it (0.6 s at 100,000)
    for name, value in rows.items():
        assert torch.allclose(again[name], value.mean(0, keepdim=True), atol=1e-6), name
    # nobody known said any of a speaker's words: the mean speaker
    assert adapter.neighbours_start(adapter.chunks([(pairs[0][0], torch.tensor(stranger[:1] + [2]))])) is not None
    lonely = [w for w in range(task.target_dictionary.nspecial, len(task.target_dictionary))
              if w not in said and w not in stranger][:2]
    assert len(lonely) == 2
    assert adapter.neighbours_start(adapter.chunks([(pairs[0][0], torch.tensor(lonely))])) is None


@pytest.mark.parametrize("family", FAMILIES)
def test_without_words_a_new_speakers_fit_starts_from_the_known_speakers_whose_output_bias_makes_their_words_likely(
        family, monkeypatch):
    """Without a memory of words, the fit through the decoder starts from the known speakers weighted by how
    probable their output bias makes the new speaker's target words (likely_start's equation, computed here by
    hand); a speaker whose bias favours exactly those words takes nearly all the weight; the speakers added after
    the adapter was made are no one's start; the fit ends where the fit from the mean speaker ends; a variant with
    no output bias of its speakers' own starts from the mean."""
    from fairseq_speaker.onboarding import fit_starts
    from fairseq_speaker.onboarding.adapter import SpeakerAdapter
    from fairseq_speaker.onboarding.fit import fit_speakers
    from fairseq_speaker.onboarding.fit_options import FitOptions

    task = make_task(num_speakers=4, num_words=40)
    task.cfg = argparse.Namespace()
    d = task.target_dictionary
    for w in range(d.nspecial, len(d)):
        d.count[w] = 1 + w % 5  # the target words' frequencies in training
    model = make_model("full+hyper_lhuc", task=task, family=family)
    pairs = _pairs(task)
    adapter = SpeakerAdapter(model, task, FitOptions(max_iter=200))
    chunks = adapter.chunks(pairs)

    def by_hand(ids):
        bias = model.speaker_bias.lookup(torch.tensor(ids)).detach().double()
        centre = bias.mean(0)
        u = torch.tensor(d.count, dtype=torch.float64)
        u[:d.nspecial] = 0
        u /= u.sum()
        targets = torch.cat([t for _, t in pairs])
        scores = (bias - centre)[:, targets].sum(1) - len(targets) * torch.logsumexp(bias - centre + u.log(), dim=1)
        weights = torch.softmax(scores, 0)
        rows = model.speaker_bias.export_speakers(ids)
        return {name: torch.tensordot(weights, value.double(), dims=1).unsqueeze(0) for name, value in rows.items()}

    start = adapter.likely_start(chunks)
    assert adapter.start_and_prior(chunks)[0].keys() == start.keys()
    for name, value in by_hand([0, 1, 2, 3]).items():
        assert torch.allclose(start[name].double(), value, atol=1e-5), name

    table = dict(model.speaker_bias.speaker_parameters())
    name = "parts.full.weight"
    with torch.no_grad():
        targets = torch.cat([t for _, t in pairs])
        table[name][2, targets] += 6.0  # speaker 2 says exactly these words
    favoured = SpeakerAdapter(model, task, FitOptions(max_iter=200))
    start = favoured.likely_start(chunks)
    rows = model.speaker_bias.export_speakers([2])
    for key, value in rows.items():
        assert torch.allclose(start[key], value, atol=1e-2), key

    _, _, report = fit_speakers(model.speaker_bias, [chunks], favoured.options, init=[start],
                                prior=[favoured.mean_speaker])
    _, _, from_mean = fit_speakers(model.speaker_bias, [chunks], favoured.options, init=[favoured.mean_speaker],
                                   prior=[favoured.mean_speaker])
    assert report.loss_before != pytest.approx(from_mean.loss_before, rel=1e-3)  # another start ...
    assert report.loss_after == pytest.approx(from_mean.loss_after, rel=1e-3)  # ... the same end

    # a speaker added after the adapter was made, whose bias favours the words more still: not a start
    model.speaker_bias.grow(1, "mean", names=["newcomer"])
    with torch.no_grad():
        table = dict(model.speaker_bias.speaker_parameters())
        table[name][4] = table[name][2] + 6.0
    again = favoured.likely_start(chunks)
    for key, value in rows.items():
        assert torch.allclose(again[key], value, atol=1e-2), key

    # an adapter of a copy of the model (the service's fits) takes the candidates made once, not a pass of its own
    copied = SpeakerAdapter(copy.deepcopy(model), task, FitOptions(max_iter=200))
    copied.share_starts(favoured)
    assert copied._likely is favoured._likely

    # at most LIKELY_CANDIDATES known speakers are read, evenly spaced: here 0 and 2 of 4
    monkeypatch.setattr(fit_starts, "LIKELY_CANDIDATES", 2)
    fresh = SpeakerAdapter(make_model("full+hyper_lhuc", task=make_task(num_speakers=4, num_words=40), family=family),
                           task, FitOptions(max_iter=200))
    model = fresh.model
    for name, value in by_hand([0, 2]).items():
        assert torch.allclose(fresh.likely_start(fresh.chunks(pairs))[name].double(), value, atol=1e-5), name

    state_only = SpeakerAdapter(make_model("hyper_lhuc", task=task, family=family), task)
    assert state_only.through_decoder and state_only.likely_start(state_only.chunks(pairs)) is None
    assert state_only.start_and_prior(state_only.chunks(pairs))[0] is state_only.mean_speaker


def test_a_variant_on_the_logits_starts_from_the_mean_speaker_whatever_the_words():
    from fairseq_speaker.modules.speaker_words import attach
    from fairseq_speaker.onboarding.adapter import SpeakerAdapter

    task = make_task(num_speakers=4)
    task.cfg = argparse.Namespace()
    model = make_model("fact", task=task)
    pairs = _pairs(task)
    attach(model, _remembering(task, {1: [t for _, t in pairs]}))
    adapter = SpeakerAdapter(model, task)
    assert not adapter.through_decoder
    assert adapter.start_and_prior(adapter.chunks(pairs))[0] is adapter.mean_speaker


@pytest.mark.parametrize("family", FAMILIES)
def test_a_checkpoint_of_fewer_speakers_loads_by_name_and_a_new_speaker_gets_the_mean_state(family):
    trained = make_model("fact+hyper_lhuc", task=make_task(num_speakers=4), family=family)
    more = make_model("fact+hyper_lhuc", task=make_task(num_speakers=5), family=family, randomize_bias=False)
    more.load_state_dict(trained.state_dict(), strict=True)  # spk0..spk3 by name, spk4 new
    speakers = torch.tensor([0, 3, MEAN_SPEAKER])
    with torch.no_grad():
        known = trained.speaker_bias.speaker_state(speakers)
        grown = more.speaker_bias.speaker_state(torch.tensor([0, 3, 4]))
    for a, b in zip(known.tensors(), grown.tensors()):
        assert torch.allclose(a, b, atol=1e-6)
