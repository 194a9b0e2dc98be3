"""The family registry: one declaration drives the presets, the command lines, the demo, the benchmark and the
accounting; the family of an arch is its model's, whatever the arch's name; a third family (examples/lightconv_family)
is one file."""

import dataclasses

import pytest
import torch
from fairseq import options
from fairseq.models import ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY, register_model_architecture

import fairseq_speaker  # noqa: F401  (registers the task, models and criterion)
from fairseq_speaker import commands
from fairseq_speaker.analysis.parameter_counts import count_parameters
from fairseq_speaker.benchmarks import training as benchmark
from fairseq_speaker.benchmarks import training_configs
from fairseq_speaker.errors import UserError
from fairseq_speaker.models import (
    FAMILY_REGISTRY,
    PRESET_VARIANTS,
    ModelSizes,
    SpeakerTransformerDecoder,
    SpeakerTransformerEncoder,
    SpeakerTransformerModel,
    get_family,
    paper_system_args,
    preset_variant,
    register_family,
    speaker_presets,
)
from fairseq_speaker.models.families import SCALES, unregister_family
from fairseq_speaker.models.speaker_lstm import SpeakerLSTMEncoder
from fairseq_speaker.models.speaker_transformer import architecture as transformer_defaults
from fairseq_speaker.models.speaker_transformer import size_args as transformer_size_args
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY
from fairseq_speaker.modules.speaker_plumbing import register_speaker_model
from fairseq_speaker.toy import demo
from tests.helpers import FAMILIES, lightconv_family, make_model, make_task, random_batch

#: a model of its own for the throwaway family (a family per model); fairseq's registry keeps it, without archs
TEST_MODEL = "speaker_test_family"
register_speaker_model(TEST_MODEL)(type("TestFamilyModel", (SpeakerTransformerModel,), {}))
SCALES_OF_TEST = {"tiny": ModelSizes(8, 16), "toy": ModelSizes(8, 16), "demo": ModelSizes(16, 32, layers=2)}


def declare(name: str = "tiny_tf", model: str = TEST_MODEL, **changes):
    declaration = dict(architecture=transformer_defaults, encoder=SpeakerTransformerEncoder,
                       decoder=SpeakerTransformerDecoder, size_args=transformer_size_args, scales=SCALES_OF_TEST,
                       demo_options=("--optimizer", "adam"), demo_lr=0.01,
                       component_labels={"decoder.speaker_bias": "the speakers"})
    declaration.update(changes)
    return register_family(name, model, **declaration)


@pytest.fixture
def tiny_tf():
    family = declare()
    yield family
    unregister_family(family.name)


def test_a_registered_family_has_every_preset_and_drives_the_helpers(tiny_tf):
    presets = ["tiny_tf_base", "tiny_tf_full_bias", "tiny_tf_fact_bias", "tiny_tf_speaker"]
    assert [p for p in speaker_presets() if p.startswith("tiny_tf")] == presets == tiny_tf.presets
    assert [preset_variant(p) for p in presets] == [*PRESET_VARIANTS.values(), tiny_tf.recommended_variant]
    assert all(ARCH_MODEL_NAME_REGISTRY[p] == TEST_MODEL for p in presets)
    assert commands.family("tiny_tf_fact_bias:fact+topic+spk_token") == "tiny_tf"
    assert commands.model_size_args("tiny_tf", 8, 16, layers=3) == transformer_size_args(ModelSizes(8, 16, layers=3))
    assert paper_system_args("spk_token", "tiny_tf") == ["--arch", "tiny_tf_base", "--speaker-token"]
    # fairseq-train builds its presets: the variant of the preset, the family's defaults
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "data", "--task", "speaker_translation", "--arch", "tiny_tf_fact_bias", *tiny_tf.scale_args("tiny")])
    assert (args.speaker_bias, args.encoder_embed_dim, args.encoder_ffn_embed_dim) == ("fact", 8, 16)
    # the demo: its systems, sizes, options and learning rate
    parsed = demo.parse_args(["--archs", "tiny_tf_fact_bias", "lstm_base"])
    assert parsed.lr["tiny_tf"] == 0.01 and parsed.lr["lstm"] == get_family("lstm").demo_lr
    assert demo.family_args("tiny_tf") == [*transformer_size_args(SCALES_OF_TEST["demo"]), "--optimizer", "adam"]
    # the benchmark: --family choices, its configurations (no stock model declared: none to compare with)
    assert "tiny_tf" in benchmark.build_parser()._option_string_actions["--family"].choices
    assert training_configs.default_configs("tiny_tf") == presets
    assert training_configs.reference_of("tiny_tf_fact_bias:plain") == "tiny_tf_base:plain"
    with pytest.raises(UserError, match="--configs stock_tiny_tf: the tiny_tf family declares no stock"):
        training_configs.task_arch_criterion("stock_tiny_tf")
    # the parameter accounting names its components as the family says
    accounting = count_parameters(20, 20, 5, "tiny_tf_fact_bias", tiny_tf.scale_args("tiny"))
    assert accounting.components["the speakers"] == accounting.speaker > 0


def test_an_unregistered_family_leaves_no_preset_behind():
    declare()
    unregister_family("tiny_tf")
    assert "tiny_tf" not in FAMILY_REGISTRY
    assert not any(p.startswith("tiny_tf") for p in speaker_presets() + list(ARCH_MODEL_REGISTRY))
    with pytest.raises(UserError, match="'tiny_tf_base' is not an arch of a speaker model family"):
        commands.family("tiny_tf_base")
    declare()  # the model is free for a family again
    unregister_family("tiny_tf")


def test_the_family_of_an_arch_is_its_models_whatever_the_name():
    # fairseq's own transformer arch: named like our presets, not ours
    assert preset_variant("transformer_iwslt_de_en") is None
    with pytest.raises(UserError, match="start it with a preset \\(lstm_base, "):
        commands.family("transformer_iwslt_de_en")
    # an arch of our transformer model named otherwise is of the transformer family (and is no preset)
    register_model_architecture("speaker_transformer", "test_unprefixed_arch")(transformer_defaults)
    try:
        assert commands.family("test_unprefixed_arch") == "transformer"
        assert preset_variant("test_unprefixed_arch") is None
        assert training_configs.reference_of("test_unprefixed_arch") == "transformer_base"
    finally:
        for registry in (ARCH_MODEL_REGISTRY, ARCH_MODEL_NAME_REGISTRY):
            registry.pop("test_unprefixed_arch")


def test_registration_refuses_what_would_be_ambiguous_or_incomplete():
    with pytest.raises(ValueError, match="model family 'lstm' is already registered"):
        declare("lstm")
    with pytest.raises(ValueError, match="model 'speaker_lstm' already has a family, 'lstm'"):
        declare("other", model="speaker_lstm")
    with pytest.raises(ValueError, match="'no_such_model' is not a registered speaker model; register it first"):
        declare("other", model="no_such_model")
    with pytest.raises(ValueError, match="its decoder .* must put SpeakerDecoderMixin before"):
        declare("other", decoder=SpeakerLSTMEncoder)
    with pytest.raises(ValueError, match="give the sizes demo in scales="):
        declare("other", scales={"tiny": ModelSizes(8, 8), "toy": ModelSizes(8, 8)})
    with pytest.raises(ValueError, match="fairseq already has an arch 'bart_base'"):
        declare("bart")
    assert "other" not in FAMILY_REGISTRY and "bart" not in FAMILY_REGISTRY


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("scale", SCALES)
def test_every_named_size_is_a_model_fairseq_train_builds(family, scale):
    declared = get_family(family)
    sizes = declared.scales[scale]
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "data", "--task", "speaker_translation", "--arch", declared.presets[0], *declared.scale_args(scale)])
    assert args.encoder_embed_dim == args.decoder_embed_dim == sizes.embed
    task = make_task()
    with torch.device("meta"):
        model = ARCH_MODEL_REGISTRY[declared.presets[0]].build_model(args, task)
    assert model.encoder.embed_tokens.embedding_dim == sizes.embed


# -- the third family: examples/lightconv_family -----------------------------------------------------

def test_a_family_from_another_package_joins_every_helper():
    lightconv = lightconv_family()
    assert lightconv.presets == [p for p in speaker_presets() if p.startswith("lightconv_")]
    assert commands.family("lightconv_base:simplex") == "lightconv"
    assert training_configs.default_configs("lightconv")[-1] == "stock_lightconv"
    assert training_configs.task_arch_criterion("stock_lightconv") == ("translation", "lightconv",
                                                                "label_smoothed_cross_entropy")
    assert demo.parse_args(["--archs", "lightconv_fact_bias"]).lr["lightconv"] == lightconv.demo_lr


@pytest.mark.parametrize("name", sorted(SPEAKER_BIAS_REGISTRY) + ["fact+topic"])
def test_the_third_family_decodes_step_by_step_as_it_is_trained(name):
    lightconv_family()
    task = make_task(num_speakers=4)
    model = make_model(name, task=task, family="lightconv")
    plain = make_model("none", task=task, family="lightconv")
    plain.load_state_dict(model.state_dict(), strict=False)
    src = random_batch(task.source_dictionary, [6, 2, 4])
    prev = random_batch(task.target_dictionary, [7, 7, 7], left_pad=False)
    speakers = torch.tensor([3, 1, -1])
    with torch.no_grad():
        logits, extra = model(src, src.ne(1).sum(1), prev, speakers=speakers)
        speaker_state = extra.get("speaker_state")  # a variant acting on the state: applied to the same network
        if speaker_state is not None:
            plain.decoder.prepare_speaker_state()
        with plain.decoder.applying_speaker_state(speaker_state):
            reference, _ = plain(src, src.ne(1).sum(1), prev, speakers=speakers)
        encoder_out = model.encoder(src, src.ne(1).sum(1), speakers=speakers)
        state, steps = {}, []
        for t in range(prev.size(1)):
            out = model.decoder(prev[:, : t + 1], encoder_out, incremental_state=state)
            steps.append(model.get_normalized_probs(out, log_probs=True))
    bias = extra["speaker_bias"]
    assert (speaker_state is not None) == model.speaker_bias.acts_on_state
    # the variant's bias on the logits of the same network (with the speakers' state)
    expected = reference if bias is None else reference + bias.unsqueeze(1)
    assert torch.allclose(logits, expected, atol=1e-5)
    assert torch.allclose(torch.cat(steps, dim=1), model.get_normalized_probs((logits, None), log_probs=True),
                          atol=1e-5)


def test_the_third_family_translates_each_sentence_of_a_batch_with_its_speaker():
    lightconv_family()
    task = make_task(num_speakers=4)
    model = make_model("full", task=task, family="lightconv")
    src = random_batch(task.source_dictionary, [5, 5, 3])
    src[1] = src[0]  # the same sentence, said by two speakers
    speakers = torch.tensor([0, 1, 2])
    from fairseq.sequence_generator import SequenceGenerator

    generator = SequenceGenerator([model], task.target_dictionary, beam_size=3, max_len_b=6)
    sample = {"net_input": {"src_tokens": src, "src_lengths": src.ne(1).sum(1), "speakers": speakers}}
    with torch.no_grad():
        batched = [hypos[0]["tokens"].tolist() for hypos in generator.generate([model], sample)]
        alone = []
        for i in range(len(src)):
            row = src[i][src[i].ne(1)].unsqueeze(0)
            one = {"net_input": {"src_tokens": row, "src_lengths": row.ne(1).sum(1), "speakers": speakers[i:i + 1]}}
            alone.append(generator.generate([model], one)[0][0]["tokens"].tolist())
    assert batched == alone
    assert batched[0] != batched[1]  # the speaker decides


def test_an_unknown_family_is_refused_with_the_registered_ones():
    with pytest.raises(UserError, match="unknown model family 'gru'; registered families: lstm, transformer"):
        get_family("gru")
    with pytest.raises(UserError, match="unknown model family 'gru'"):
        commands.model_size_args("gru", 8, 8)


def test_the_demo_fits_a_topic_model_only_for_a_run_with_the_topic_variant():
    assert not demo.uses_topics(["lstm_base", "lstm_fact_bias", "transformer_base:fact+hyper_lhuc",
                                 "lstm_base+spk_token"])
    assert demo.uses_topics(["lstm_fact_bias", "transformer_base:fact+topic"])
    assert demo.uses_topics(["lstm_base:topic+spk_token"])


@pytest.mark.parametrize("family", FAMILIES)
def test_the_unit_tests_models_have_their_familys_declared_tiny_sizes(family):
    """tests/helpers.py reads the sizes from the family registry (changed only as its UNIT_TEST_SIZES say), so a
    family's tiny sizes are written once, in its register_family call; its models have no dropout."""
    from tests.helpers import UNIT_TEST_SIZES, tiny_model_args

    declared = get_family(family)
    sizes = dataclasses.replace(declared.scales["tiny"], **UNIT_TEST_SIZES.get(family, {}))
    unit = vars(tiny_model_args(family))
    assert unit["encoder_embed_dim"] == unit["decoder_embed_dim"] == sizes.embed
    assert [value for key, value in unit.items() if key.endswith("dropout")] and not any(
        value for key, value in unit.items() if key.endswith("dropout"))
    model = make_model("fact", family=family)
    assert model.decoder.embed_tokens.embedding_dim == model.encoder.embed_tokens.embedding_dim == sizes.embed
