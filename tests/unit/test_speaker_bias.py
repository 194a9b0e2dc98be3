"""The variant contract, checked for every registered variant (and for one defined right here).

Nothing below names a variant to know what it owns: the tests ask the contract
(speaker parameters, growth, export, regularizers, inspection). A variant
registered anywhere is tested here the moment it is imported.
"""

import argparse
import copy
import dataclasses
import os
import sys
from dataclasses import dataclass, field

import pytest
import torch
from fairseq import options
from fairseq.models import MODEL_REGISTRY
from torch import nn

import fairseq_speaker.modules.speaker_bias as variants_package
from fairseq_speaker.data import MEAN_SPEAKER, NO_SPEAKER
from fairseq_speaker.models import PRESET_VARIANTS, SpeakerLSTMModel, get_family
from fairseq_speaker.modules.speaker_bias import (
    SPEAKER_BIAS_REGISTRY,
    SpeakerBias,
    SpeakerBiasConfig,
    build_speaker_bias,
    parse_variant_name,
    register_speaker_bias,
    unregister_speaker_bias,
)
from tests.helpers import (
    FAMILIES,
    TINY_STATE_SITES,
    build_bias,
    expected_parameters,
    make_task,
    random_batch,
    variant_options,
)

# the out-of-tree example registers its variant from a package of its own: tested like the others
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "examples", "custom_variant"))
import sparse_speaker_bias  # noqa: E402,F401


@dataclass
class OffsetConfig(SpeakerBiasConfig):
    offset_init: float = field(default=0.0, metadata={"help": "test_offset: start of the shared offset"})


@register_speaker_bias("test_offset", dataclass=OffsetConfig)
class OffsetSpeakerBias(SpeakerBias):
    """A variant defined in a test module: a shared offset plus a vocabulary-sized row per speaker.

    Parameters: V * (S + 1)
    """

    speaker_parameter_names = ("rows",)

    def __init__(self, cfg, num_speakers, vocab_size):
        super().__init__(cfg, num_speakers, vocab_size)
        self.offset = nn.Parameter(torch.full((vocab_size,), cfg.offset_init))
        self.rows = nn.Parameter(torch.zeros(num_speakers, vocab_size))

    def lookup(self, speakers, encoder_out=None):
        return self.rows.index_select(0, speakers) + self.offset


S, V = 7, 11
#: every registered variant, and sums of two (the combinator's usual form; a bias and a state)
VARIANTS = sorted(SPEAKER_BIAS_REGISTRY) + ["fact+full", "fact+hyper_lhuc"]


def task():
    return make_task(num_speakers=S, num_words=V - 4 - 3)


@pytest.fixture
def source():
    """An encoder output holding only what every encoder output holds for the variants: the source."""
    t = task()
    return {"source_tokens": [random_batch(t.source_dictionary, [5, 3, 6, 4])]}


def build(name, randomize=True, **overrides):
    return build_bias(name, task(), randomize_parameters=randomize, **overrides)


def speaker_dependent(name):
    return build(name, randomize=False).speaker_parameters() != {}


SPEAKER_VARIANTS = [name for name in VARIANTS if speaker_dependent(name)]


# -- registration and options ------------------------------------------------------------------------


def test_every_variant_class_of_the_package_is_registered_and_so_are_other_packages():
    package = variants_package.__name__
    defined = {cls for name, module in list(sys.modules.items()) if name.startswith(package + ".")
               for cls in vars(module).values() if isinstance(cls, type) and issubclass(cls, SpeakerBias)
               and cls is not SpeakerBias and cls.__module__ == name}
    assert defined and defined <= set(SPEAKER_BIAS_REGISTRY.values())
    assert set(PRESET_VARIANTS.values()) <= set(SPEAKER_BIAS_REGISTRY)  # the paper's, which the presets choose
    assert {"test_offset", "sparse_full"} <= set(SPEAKER_BIAS_REGISTRY)  # from this module and from an example


def _flag_value(f):
    if f.type in (int, float):
        return f.type(f.default or 0) + f.type(2)
    return "fact+full" if f.name == "sum_parts" else "x"


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("name", sorted(SPEAKER_BIAS_REGISTRY))
def test_options_are_flags_of_every_speaker_model(name, family):
    cls = SPEAKER_BIAS_REGISTRY[name]
    arch = get_family(family).presets[0]
    argv = ["data", "--task", "speaker_translation", "--arch", arch, "--speaker-bias", name]
    expected = {}
    for f in dataclasses.fields(cls.config_class):
        if f.name.startswith("_"):
            continue
        if f.type is bool:  # a switch: the flag turns the default around
            expected[f.name] = not f.default
            argv.append("--" + f.name.replace("_", "-"))
            continue
        expected[f.name] = _flag_value(f)
        argv += ["--" + f.name.replace("_", "-"), str(expected[f.name])]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    assert args.speaker_bias == name
    for key, value in expected.items():
        assert getattr(args, key) == value, key
    # and they are model options: the family's model has them (a dataclass model: in hydra's schema)
    model = MODEL_REGISTRY[get_family(family).model]
    assert set(expected) <= {f.name for f in dataclasses.fields(model.speaker_options())}


def test_registration_refuses_clashing_or_malformed_variants():
    taken = sorted(SPEAKER_BIAS_REGISTRY)[0]
    with pytest.raises(ValueError, match=f"speaker bias {taken!r} is already registered"):
        register_speaker_bias(taken)(type("Again", (SpeakerBias,), {}))
    with pytest.raises(ValueError, match="must subclass SpeakerBias"):
        register_speaker_bias("not_a_bias")(object)
    with pytest.raises(ValueError, match="letters, digits"):
        register_speaker_bias("a+b")

    @dataclass
    class Clash(SpeakerBiasConfig):
        speaker_rank: float = 0.5  # fact's option, declared differently

    with pytest.raises(ValueError, match="option 'speaker_rank' is already declared differently"):
        register_speaker_bias("test_clash", dataclass=Clash)(type("ClashBias", (SpeakerBias,), {}))

    @dataclass
    class ModelClash(SpeakerBiasConfig):
        dropout: float = 0.5  # an option of the models

    with pytest.raises(ValueError, match="option 'dropout' is already an option of model"):
        register_speaker_bias("test_model_clash", dataclass=ModelClash)(type("B", (SpeakerBias,), {}))
    assert "test_clash" not in SPEAKER_BIAS_REGISTRY and "test_model_clash" not in SPEAKER_BIAS_REGISTRY


def test_unknown_names_list_the_registered_variants():
    with pytest.raises(ValueError, match=r"registered variants: .*fact.*full.*none"):
        parse_variant_name("nope")
    with pytest.raises(ValueError, match="registered variants"):
        parse_variant_name("fact+nope")
    with pytest.raises(ValueError, match="names a variant twice"):
        parse_variant_name("fact+fact")


def test_a_variant_registered_later_is_a_model_option_at_once():
    @dataclass
    class LateConfig(SpeakerBiasConfig):
        late_option: int = 3

    register_speaker_bias("test_late", dataclass=LateConfig)(type("Late", (SpeakerBias,), {}))
    try:
        assert "late_option" in {f.name for f in dataclasses.fields(SpeakerLSTMModel.speaker_options())}
        args = options.parse_args_and_arch(options.get_training_parser(), [
            "data", "--task", "speaker_translation", "--arch", "lstm_base", "--late-option", "5"])
        assert args.late_option == 5
    finally:
        unregister_speaker_bias("test_late")
    assert "late_option" not in {f.name for f in dataclasses.fields(SpeakerLSTMModel.speaker_options())}


# -- what a variant does: its bias and its state -----------------------------------------------------


def effect(bias, speakers, encoder_out=None):
    """What the variant does for each speaker, one row each ``[B, n]``: its bias, its state's input offset and
    its layer scales minus 1, side by side (zero: nothing, the speaker-blind model); None if it does nothing."""
    out = bias(speakers, encoder_out)
    state = state_effect(bias.speaker_state(speakers, encoder_out))
    parts = [t for t in (out, state) if t is not None]
    return torch.cat(parts, dim=1) if parts else None


def state_effect(state):
    """A speaker state as one row per sentence: its input offset and its layer scales minus 1 (None: no state)."""
    if state is None:
        return None
    parts = [] if state.input_offset is None else [state.input_offset]
    parts += [scale - 1.0 for scale in (state.layer_scales or ()) if scale is not None]
    return torch.cat(parts, dim=1)


def mean_speaker_effect(bias):
    """The effect of a speaker added as the mean speaker (growth): what ``MEAN_SPEAKER`` must get."""
    grown = copy.deepcopy(bias)
    grown.grow(1, init="mean")
    with torch.no_grad():
        return effect(grown, torch.tensor([S]))


@pytest.mark.parametrize("name", VARIANTS)
def test_parameter_count_is_the_docstring_formula(name):
    bias = build(name)
    assert sum(p.numel() for p in bias.parameters()) == expected_parameters(bias)


@pytest.mark.parametrize("name", VARIANTS)
def test_output_shape_and_one_bias_per_speaker(name, source):
    bias = build(name)
    speakers = torch.tensor([0, 3, 3, 6])
    out, state = bias(speakers, source), bias.speaker_state(speakers, source)
    assert (state is not None) == bias.acts_on_state
    if not bias.acts_on_output:
        assert out is None
    if out is None and state is None:
        assert not bias.speaker_parameters() and not bias.reads_source
        return
    if out is not None:
        assert out.shape == (4, V)
    if state is not None:  # the sizes the decoder's sites gave
        sites = TINY_STATE_SITES
        assert state.input_offset is None or state.input_offset.shape == (4, sites.input_dim)
        assert state.layer_scales is None or [s.shape for s in state.layer_scales] == [
            (4, d) for d in sites.layer_dims]
    out = effect(bias, speakers, source)
    if not bias.reads_source:
        assert torch.equal(out[1], out[2])  # the same speaker, the same bias
    if bias.speaker_parameters():
        alone = effect(bias, speakers, None) if bias.reads_source else out
        assert torch.equal(alone[1], alone[2])
        assert not torch.allclose(alone[0], alone[1])  # different speakers, different biases


@pytest.mark.parametrize("name", VARIANTS)
def test_source_changes_the_bias_only_of_variants_that_read_it(name, source):
    bias = build(name)
    speakers = torch.tensor([1, 1, 1, 1])
    other = {"source_tokens": [source["source_tokens"][0].flip(0)]}
    a, b = effect(bias, speakers, source), effect(bias, speakers, other)
    if a is None:
        return
    if bias.reads_source:
        assert not torch.allclose(a, b)
        assert torch.allclose(a.flip(0), b, atol=1e-5)  # the bias follows its sentence
    else:
        assert torch.equal(a, b)


@pytest.mark.parametrize("name", SPEAKER_VARIANTS)
def test_every_speaker_starts_alike(name):
    """Training starts from a speaker-agnostic model: before training, all speakers' biases (and states) are
    equal; a variant acting on the state starts as no state at all (the speaker-blind model)."""
    bias = build(name, randomize=False)
    out = effect(bias, torch.arange(S))
    assert torch.allclose(out, out[:1].expand_as(out), atol=1e-6)
    state = state_effect(bias.speaker_state(torch.arange(S)))
    assert state is None or torch.count_nonzero(state) == 0


@pytest.mark.parametrize("name", SPEAKER_VARIANTS)
def test_unseen_speakers_get_the_mean_speaker_or_nothing(name):
    bias = build(name)
    every = effect(bias, torch.arange(S))
    out = effect(bias, torch.tensor([2, MEAN_SPEAKER, NO_SPEAKER]))
    assert torch.allclose(out[0], every[2])
    # the mean speaker is the one a new speaker starts as (growth): for a bias, the mean of the biases
    assert torch.allclose(out[1], mean_speaker_effect(bias)[0], atol=1e-5)
    biases = bias(torch.arange(S))
    if biases is not None:
        assert torch.allclose(bias(torch.tensor([MEAN_SPEAKER]))[0], biases.mean(0), atol=1e-5)
        assert torch.allclose(bias.mean_bias(), SpeakerBias.mean_bias(bias), atol=1e-5)  # closed form = average
    assert torch.count_nonzero(out[2]) == 0  # no bias, no offset, a scale of 1


@pytest.mark.parametrize("name", SPEAKER_VARIANTS)
def test_the_bias_at_given_words_is_the_columns_of_the_whole_bias(name):
    """lookup_words (onboarding's scoring of the known speakers at a new speaker's words) gives the columns of
    lookup, whether by the default or by a variant's own form (fact's rank-r product, full's table, a sum's parts)."""
    bias = build(name)
    assert not bias.reads_source  # (a variant reading the source is never scored at words: likely_start skips it)
    speakers, words = torch.tensor([3, 0, 2]), torch.tensor([5, 1, 5, 7])
    whole = bias.lookup(speakers)
    at_words = bias.lookup_words(speakers, words)
    if whole is None:
        assert at_words is None
    else:
        assert torch.allclose(at_words, whole[:, words], atol=1e-6)


@pytest.mark.parametrize("name", SPEAKER_VARIANTS)
def test_the_mean_speaker_is_cached_until_the_parameters_change(name, monkeypatch):
    bias = build(name)
    calls = []
    for cls in {type(variant) for _, variant in bias.named_variants()}:  # a sum's parts keep their own means
        for method in ("mean_bias", "mean_state"):
            counted = lambda self, compute=getattr(cls, method): calls.append(1) or compute(self)  # noqa: E731
            monkeypatch.setattr(cls, method, counted)
    unseen = torch.tensor([MEAN_SPEAKER, 1])
    with torch.no_grad():
        first = effect(bias, unseen)
        computed = len(calls)
        again = effect(bias, unseen)
    assert computed >= 1 and len(calls) == computed and torch.equal(first, again)
    with torch.no_grad():  # an optimizer's in-place step, an import, a load: the cache is stale
        for p in bias.speaker_parameters().values():
            p.add_(torch.randn_like(p))
        after = effect(bias, unseen)
    assert len(calls) > computed
    assert torch.allclose(after[0], mean_speaker_effect(bias)[0], atol=1e-5)
    biases = bias(torch.arange(S))
    if biases is not None:
        assert torch.allclose(after[0, :V], biases.mean(0), atol=1e-5)
    computed = len(calls)
    out = effect(bias, unseen)  # with gradients: computed every time, and every speaker's row gets its share
    assert len(calls) > computed
    out[0].sum().backward()
    for p in bias.speaker_parameters().values():
        assert p.grad is not None and bool((p.grad.reshape(S, -1).abs().sum(1) > 0).all())


@pytest.mark.parametrize("name", SPEAKER_VARIANTS)
def test_ids_out_of_range_are_errors(name):
    calls = [lambda b, ids: b(ids)] + ([lambda b, ids: b.speaker_state(ids)] if build(name).acts_on_state else [])
    for call in calls:
        with pytest.raises(IndexError, match="out of range"):
            call(build(name), torch.tensor([S]))
        with pytest.raises(IndexError, match="neither a speaker"):
            call(build(name), torch.tensor([-3]))
    with pytest.raises(ValueError, match="needs the speakers"):
        build(name)(None)


# -- the speakers' parameters ------------------------------------------------------------------------


@pytest.mark.parametrize("name", VARIANTS)
def test_parameters_are_either_a_speakers_or_shared(name):
    bias = build(name)
    owned, shared = bias.speaker_parameters(), bias.shared_parameters()
    assert not set(owned) & set(shared)
    assert set(owned) | set(shared) == {n for n, _ in bias.named_parameters()}
    for p in owned.values():
        assert p.size(0) == S
    assert bias.parameters_per_speaker() == sum(p[0].numel() for p in owned.values())


@pytest.mark.parametrize("name", SPEAKER_VARIANTS)
def test_gradients_reach_only_the_rows_of_the_batchs_speakers(name, source):
    bias = build(name)
    effect(bias, torch.tensor([1, 4, 4, 1]), source).pow(2).sum().backward()
    for param_name, p in bias.speaker_parameters().items():
        touched = p.grad.reshape(S, -1).abs().sum(dim=1).nonzero().flatten().tolist()
        assert touched == [1, 4], param_name


@pytest.mark.parametrize("init", ["mean", "zero"])
@pytest.mark.parametrize("name", SPEAKER_VARIANTS)
def test_growing_the_table_keeps_every_speaker_and_adds_new_ones(name, init):
    bias = build(name)
    before = effect(bias, torch.arange(S)).detach()
    mean = effect(bias, torch.tensor([MEAN_SPEAKER])).detach()
    bias.grow(2, init=init)
    assert bias.num_speakers == S + 2
    for p in bias.speaker_parameters().values():
        assert p.size(0) == S + 2
    after = effect(bias, torch.arange(S + 2)).detach()
    assert torch.equal(after[:S], before)
    if init == "mean":
        assert torch.allclose(after[S:], mean.expand(2, -1), atol=1e-5)
        biases = bias(torch.arange(S))
        if biases is not None:  # a bias's mean speaker: the mean of the biases
            assert torch.allclose(after[S:, :V], biases.mean(0).expand(2, -1), atol=1e-5)
    else:
        for p in bias.speaker_parameters().values():
            assert torch.count_nonzero(p[S:]) == 0
    effect(bias, torch.tensor([S + 1])).sum().backward()  # the new rows are parameters like the others
    assert all(p.grad is not None for p in bias.speaker_parameters().values())


@pytest.mark.parametrize("name", SPEAKER_VARIANTS)
def test_onboarded_speakers_do_not_move_the_mean_speaker_and_a_checkpoint_keeps_it(name):
    """Unseen speakers get the mean of the speakers the model was trained with, whoever is onboarded later."""
    bias = build(name)
    bias.speaker_names = [f"spk{i}" for i in range(S)]
    with torch.no_grad():
        mean = effect(bias, torch.tensor([MEAN_SPEAKER])).detach()
    bias.freeze_mean()
    bias.grow(2, init="zero", names=["new0", "new1"])
    with torch.no_grad():
        for p in bias.speaker_parameters().values():
            p[S:].normal_(0.0, 3.0)  # onboarded speakers far from the others
        assert torch.allclose(effect(bias, torch.tensor([MEAN_SPEAKER])), mean, atol=1e-5)
    copy_ = build(name)
    copy_.resize_table(S + 2)
    copy_.load_state_dict(bias.state_dict())
    assert copy_.mean_of == S
    with torch.no_grad():
        assert torch.allclose(effect(copy_, torch.tensor([MEAN_SPEAKER])), mean, atol=1e-5)


@pytest.mark.parametrize("name", SPEAKER_VARIANTS)
def test_export_then_import_moves_a_speaker(name):
    bias = build(name)
    rows = bias.export_speakers([1])
    assert {k: tuple(v.shape[1:]) for k, v in rows.items()} == bias.speaker_row_shapes()
    assert not torch.allclose(effect(bias, torch.tensor([3])), effect(bias, torch.tensor([1])))
    bias.import_speakers([3], rows)
    assert torch.allclose(effect(bias, torch.tensor([3])), effect(bias, torch.tensor([1])))
    with pytest.raises(ValueError, match="do not match"):
        bias.import_speakers([3], {"nope": torch.zeros(1)})
    with pytest.raises(ValueError, match="expected"):
        bias.import_speakers([3, 4], rows)
    with pytest.raises(IndexError):
        bias.export_speakers([S])


@pytest.mark.parametrize("name", VARIANTS)
def test_state_dict_round_trip(name, source):
    bias = build(name)
    fresh = build(name, randomize=False)
    fresh.load_state_dict(bias.state_dict())
    speakers = torch.tensor([0, 5, MEAN_SPEAKER, 2])
    a, b = effect(bias, speakers, source), effect(fresh, speakers, source)
    assert (a is None and b is None) or torch.equal(a, b)


# -- regularizers --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", VARIANTS)
def test_default_regularizer_is_the_l2_pull_named_after_each_variant(name, source):
    bias = build(name, speaker_l2=0.5)
    speakers = torch.tensor([0, 2, 2, 5])
    out, state, losses = bias.outputs_and_aux_losses(speakers, source)
    if out is None and state is None:
        assert losses == {}
        return
    # each variant that makes a bias or a state itself (not a combinator of others) pulls its own: the bias
    # towards none, the state towards none (offset 0, scale 1)
    leaves = [v for _, v in bias.named_variants() if len(list(v.named_variants())) == 1]
    assert {f"{leaf.name}_l2" for leaf in leaves} <= set(losses)  # (a variant may add regularizers of its own)
    for leaf in leaves:
        expected = 0.0
        leaf_bias, leaf_state = leaf(speakers, source), leaf.speaker_state(speakers, source)
        if leaf_bias is not None:
            expected += 0.5 * leaf_bias.pow(2).sum(1).mean().item()
        if leaf_state is not None:
            expected += 0.5 * leaf_state.deviation().mean().item()
        assert expected > 0
        assert losses[f"{leaf.name}_l2"].item() == pytest.approx(expected, rel=1e-5)
    without = build(name, speaker_l2=0.0).outputs_and_aux_losses(speakers, source)[2]
    assert not {f"{leaf.name}_l2" for leaf in leaves} & set(without)


def test_a_variant_brings_its_own_regularizer():
    @register_speaker_bias("test_sparse", dataclass=OffsetConfig)
    class SparseRows(OffsetSpeakerBias):
        def aux_losses(self, speakers, bias, encoder_out=None):
            return {"test_sparse_l1": self.rows.index_select(0, speakers).abs().sum(1).mean()}

    try:
        bias = build("test_sparse")
        speakers = torch.tensor([1, 2])
        _, losses = bias.bias_and_aux_losses(speakers)
        assert losses["test_sparse_l1"].item() == pytest.approx(bias.rows[[1, 2]].abs().sum(1).mean().item())
    finally:
        unregister_speaker_bias("test_sparse")


# -- inspection and precision --------------------------------------------------------------------------


@pytest.mark.parametrize("name", VARIANTS)
def test_inspection_reads_the_contract(name):
    bias = build(name)
    vectors = bias.speaker_vectors()
    if bias.speaker_parameters():
        assert vectors.dim() == 2 and vectors.size(0) == S
    else:
        assert vectors is None
    for label, value in bias.vocabulary_vectors().items():
        assert value.dim() == 2 and value.size(0) == V, label


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("name", VARIANTS)
def test_half_precision(name, dtype, source):
    bias = build(name).to(dtype)
    speakers = torch.tensor([0, 3, MEAN_SPEAKER, NO_SPEAKER])
    out, state = bias(speakers, source), bias.speaker_state(speakers, source)
    for t in ([out] if out is not None else []) + (state.tensors() if state is not None else []):
        assert t.dtype == dtype and torch.isfinite(t).all()


@pytest.mark.parametrize("name", sorted(SPEAKER_BIAS_REGISTRY))
def test_build_from_a_config_without_the_variants_options_uses_their_defaults(name, tmp_path):
    """An older checkpoint's config lacks options added since: they keep their defaults (a variant is given only
    what it cannot be built without, the file of its example)."""
    cls, t = SPEAKER_BIAS_REGISTRY[name], task()
    needed = cls.example_options(str(tmp_path), t.source_dictionary)
    bias = build_speaker_bias(name, argparse.Namespace(**needed), t.speaker_dictionary, t.target_dictionary,
                              t.source_dictionary)
    assert bias.cfg == cls.config_class(**needed)


def test_test_options_of_every_variant_build_it():
    for name in VARIANTS:
        assert isinstance(variant_options(name, task()), dict)


@pytest.mark.parametrize("weight", [-0.1, float("nan"), float("inf")])
def test_a_negative_or_non_finite_speaker_l2_is_refused(weight):
    from fairseq_speaker.errors import UserError

    with pytest.raises(UserError, match="--speaker-l2 must be a number >= 0"):
        build_bias("fact", make_task(num_speakers=3), speaker_l2=weight)


@pytest.mark.parametrize("options,message", [
    (dict(l2=-1.0), "l2 \\(--adapt-l2\\) must be a number from 0 to 1e\\+09"),
    (dict(l2=float("nan")), "must be a number from 0 to 1e\\+09 .*, got nan"),
    (dict(l2=1e300), "must be a number from 0 to 1e\\+09 .*, got 1e\\+300"),
    (dict(max_iter=0), "max_iter must be at least 1"),
])
def test_bad_fit_options_are_refused(options, message):
    from fairseq_speaker.errors import UserError
    from fairseq_speaker.onboarding.fit_options import FitOptions

    with pytest.raises(UserError, match=message):
        FitOptions(**options)
