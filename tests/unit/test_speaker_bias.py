"""Every registered speaker bias variant, parametrized over the registry."""

from types import SimpleNamespace

import pytest
import torch

from fairseq_speaker.data import MEAN_SPEAKER, NO_SPEAKER
from fairseq_speaker.modules.speaker_bias import (
    SPEAKER_BIAS_REGISTRY,
    SpeakerBias,
    build_speaker_bias,
    register_speaker_bias,
)

S, V, R = 7, 11, 3
CFG = SimpleNamespace(speaker_rank=R)

# parameters each variant must own for S speakers, a vocabulary of V and rank R;
# a new variant must add its count here (the test below fails until it does)
EXPECTED_PARAMETERS = {
    "none": 0,
    "full": S * V,
    "fact": R * (S + V),
}
VARIANTS = sorted(SPEAKER_BIAS_REGISTRY)
BIASED = [name for name in VARIANTS if name != "none"]


def build(name, randomize=True):
    bias = build_speaker_bias(name, CFG, S, V)
    if randomize:
        with torch.no_grad():
            for p in bias.parameters():
                p.normal_()
    return bias


def test_registry_has_the_paper_variants():
    assert {"none", "full", "fact"} <= set(SPEAKER_BIAS_REGISTRY)


@pytest.mark.parametrize("name", VARIANTS)
def test_parameter_count(name):
    assert name in EXPECTED_PARAMETERS, f"add the expected parameter count of variant {name!r}"
    bias = build(name)
    assert sum(p.numel() for p in bias.parameters()) == EXPECTED_PARAMETERS[name]


@pytest.mark.parametrize("name", VARIANTS)
def test_output_shape(name):
    speakers = torch.tensor([0, 3, 3, 6])
    out = build(name)(speakers)
    if name == "none":
        assert out is None
    else:
        assert out.shape == (4, V)
        # the same speaker gets the same bias, different speakers different ones
        assert torch.equal(out[1], out[2])
        assert not torch.allclose(out[0], out[1])


@pytest.mark.parametrize("name", BIASED)
def test_every_speaker_starts_without_bias(name):
    """Training starts from the speaker-agnostic model (full rows and fact weights at zero)."""
    out = build(name, randomize=False)(torch.arange(S))
    assert torch.count_nonzero(out) == 0


def test_fact_shared_biases_start_random():
    bias = build("fact", randomize=False)
    assert bias.shared_biases.std() > 0.1
    # N(1/r, variance 1/sqrt(r)) as in the reference implementation
    big = build_speaker_bias("fact", SimpleNamespace(speaker_rank=4), 2, 20000)
    assert abs(big.shared_biases.mean().item() - 0.25) < 0.02
    assert abs(big.shared_biases.var().item() - 0.5) < 0.03


@pytest.mark.parametrize("name", BIASED)
def test_unseen_speakers_get_mean_or_nothing(name):
    bias = build(name)
    every = bias(torch.arange(S))
    out = bias(torch.tensor([2, MEAN_SPEAKER, NO_SPEAKER]))
    assert torch.allclose(out[0], every[2])
    assert torch.allclose(out[1], every.mean(0), atol=1e-5)
    assert torch.count_nonzero(out[2]) == 0


@pytest.mark.parametrize("name", BIASED)
def test_mean_bias_matches_generic_average(name):
    bias = build(name)
    generic = SpeakerBias.mean_bias(bias)  # the chunked average over every speaker
    assert torch.allclose(bias.mean_bias(), generic, atol=1e-5)


@pytest.mark.parametrize("name", BIASED)
def test_out_of_range_speaker_is_an_error(name):
    with pytest.raises(IndexError, match="out of range"):
        build(name)(torch.tensor([S]))


@pytest.mark.parametrize("name", BIASED)
def test_gradients_reach_only_the_speakers_of_the_batch(name):
    bias = build(name)
    speakers = torch.tensor([1, 4, 4])
    bias(speakers).pow(2).sum().backward()
    owned = getattr(bias, {"full": "weight", "fact": "speaker_weights"}[name])
    touched = owned.grad.abs().sum(dim=1).nonzero().flatten().tolist()
    assert touched == [1, 4]


def test_register_rejects_duplicates_and_non_variants():
    with pytest.raises(ValueError, match="already registered"):
        register_speaker_bias("full")(type("Again", (SpeakerBias,), {}))
    with pytest.raises(ValueError, match="must subclass SpeakerBias"):
        register_speaker_bias("not_a_bias")(object)
    with pytest.raises(ValueError, match="registered variants: fact, full, none"):
        build_speaker_bias("nope", CFG, S, V)


def test_a_new_variant_is_one_decorated_class():
    """The extension point: a class with a decorator, usable by name, nothing else changed."""

    @register_speaker_bias("test_constant")
    class ConstantBias(SpeakerBias):
        def __init__(self, num_speakers, vocab_size):
            super().__init__(num_speakers, vocab_size)
            self.value = torch.nn.Parameter(torch.ones(vocab_size))

        def lookup(self, speakers):
            return self.value.expand(len(speakers), -1)

    try:
        bias = build_speaker_bias("test_constant", CFG, S, V)
        assert torch.equal(bias(torch.tensor([0, MEAN_SPEAKER])), torch.ones(2, V))
    finally:
        del SPEAKER_BIAS_REGISTRY["test_constant"]
