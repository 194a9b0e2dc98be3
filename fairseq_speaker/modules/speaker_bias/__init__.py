"""Speaker bias variants: one registry, one file per variant.

A variant is a :class:`SpeakerBias` subclass registered with its options::

    @register_speaker_bias("my_bias", dataclass=MyBiasConfig)
    class MyBias(SpeakerBias): ...

Its options then exist as command-line flags and hydra keys of every speaker
model (``speaker_lstm``, ``speaker_transformer``), and ``--speaker-bias my_bias``
chooses it on any preset. A variant acts on the logits (a bias), on the decoder's
state (:class:`SpeakerState`: ``lhuc``, ``hyper_lhuc``, ``input``), or on both.
``--speaker-bias a+b`` adds two variants (the ``sum`` combinator). Every file of this folder is imported below; a
variant can as well live in another package (a second ``--user-dir``) that imports this one. See
``docs/bias_variants.md`` and :mod:`.base` for the contract, :mod:`.registry` for the registry.
"""

import importlib
import os

from .base import EncoderOut, SpeakerBias, SpeakerBiasConfig, SpeakerState, StateSites, source_tokens
from .registry import (
    SPEAKER_BIAS_DATACLASS_REGISTRY,
    SPEAKER_BIAS_REGISTRY,
    build_speaker_bias,
    on_register,
    parse_variant_name,
    register_speaker_bias,
    reserve_options,
    speaker_bias_class,
    speaker_option_fields,
    unregister_speaker_bias,
    variant_spelling,
)


def _import_variants() -> None:
    here = os.path.dirname(__file__)
    for file in sorted(os.listdir(here)):
        if file.endswith(".py") and not file.startswith("_") and file not in ("base.py", "registry.py"):
            importlib.import_module(f"{__name__}.{file[:-3]}")


_import_variants()

__all__ = [
    "EncoderOut",
    "SPEAKER_BIAS_DATACLASS_REGISTRY",
    "SPEAKER_BIAS_REGISTRY",
    "SpeakerBias",
    "SpeakerBiasConfig",
    "SpeakerState",
    "StateSites",
    "build_speaker_bias",
    "on_register",
    "parse_variant_name",
    "variant_spelling",
    "register_speaker_bias",
    "reserve_options",
    "source_tokens",
    "speaker_bias_class",
    "speaker_option_fields",
    "unregister_speaker_bias",
]
