"""The options of a speaker model: the one every speaker model has (:class:`SpeakerModelConfig`), composed with every
registered variant's (:func:`compose_options`), defaults filled into an argparse namespace (:func:`fill_defaults`),
and the network's dropouts and sizes checked before it is built (:func:`check_network_options`).
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Type

from fairseq.dataclass import FairseqDataclass

from fairseq_speaker.errors import UserError
from fairseq_speaker.modules.speaker_bias import speaker_option_fields


@dataclass
class SpeakerModelConfig(FairseqDataclass):
    """The option every speaker model has; the variants' own options are added to it."""

    speaker_bias: str = field(
        default="none",
        metadata={"help": "speaker bias variant: a name registered in fairseq_speaker.modules.speaker_bias "
                  "(none, full, fact, proj, simplex, topic, ...), or several joined by '+' to add them "
                  "(fact+topic); the preset chooses one, this flag overrides it"},
    )


def compose_options(base: Type[FairseqDataclass]) -> Type[FairseqDataclass]:
    """``base`` extended with the options of every registered variant (a new dataclass of the same name)."""
    own = {f.name for f in dataclasses.fields(base)}
    extra = []
    for f in speaker_option_fields():
        if f.name in own:
            continue
        if f.default_factory is not dataclasses.MISSING:
            copy = field(default_factory=f.default_factory, metadata=f.metadata)
        else:
            copy = field(default=f.default, metadata=f.metadata)
        extra.append((f.name, f.type, copy))
    composed = dataclasses.make_dataclass(base.__name__, extra, bases=(base,))
    composed.__module__, composed.__qualname__, composed.__doc__ = base.__module__, base.__qualname__, base.__doc__
    return composed


def fill_defaults(args, config_class: Type[FairseqDataclass]) -> None:
    """Give every option of ``config_class`` that ``args`` lacks (or holds as None) its default."""
    for f in dataclasses.fields(config_class):
        if f.name.startswith("_") or getattr(args, f.name, None) is not None:
            continue
        if f.default_factory is not dataclasses.MISSING:
            setattr(args, f.name, f.default_factory())
        elif f.default is not dataclasses.MISSING:
            setattr(args, f.name, f.default)


#: the options that size a network, by their start and their end: each must be a whole number of at least 1
SIZE_OPTIONS = (("encoder_", "decoder_", "attention_", "speaker_", "embed_"), ("_dim", "_size", "_layers", "_heads"))


#: what a dropout of 1 does, by option (the others drop units, as --dropout does)
DROPOUT_OF_1 = {
    "dropout": "1 drops every unit: nothing is learned, and a rescaling by 1 / (1 - p) ends in NaN gradients",
    "target_word_dropout": "1 replaces every target word the decoder reads by <unk>: it learns no language model "
                           "of the target, and decodes with one it never saw",
}


def check_network_options(cfg) -> None:
    """Refuse, before a network is built, a dropout option (``--dropout``, ``--attention-dropout``, ...) outside
    [0, 1) and a size (``--encoder-embed-dim``, ``--decoder-layers``, ``--encoder-attention-heads``, ...) below 1:
    torch's refusals (a negative dimension, 0 ** -0.5 in an initialization, oneDNN's failed primitive) name no option,
    and fairseq's own dropout takes any probability."""
    options = vars(cfg) if not hasattr(cfg, "keys") else {key: cfg[key] for key in cfg.keys()}
    for name, value in sorted(options.items()):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if "dropout" in name and not 0 <= value < 1:  # nan too
            raise UserError(f"--{name.replace('_', '-')} {value}: a dropout is a probability, from 0 to below 1 "
                            f"({DROPOUT_OF_1.get(name, DROPOUT_OF_1['dropout'])}; 0.1 to 0.3 are usual)")
        if name.startswith(SIZE_OPTIONS[0]) and name.endswith(SIZE_OPTIONS[1]) and isinstance(value, int) and value < 1:
            raise UserError(f"--{name.replace('_', '-')} {value}: a size of the network must be at least 1")
