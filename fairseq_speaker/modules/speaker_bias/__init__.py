"""Speaker bias variants: one registry, one file per variant.

A variant maps a batch of speaker ids to a bias over the target vocabulary
that the decoder adds to its logits (eq. 2 and 4 of Michel & Neubig, 2018).
Adding a variant is one new file in this folder with a class decorated by
``@register_speaker_bias("name")``; every file here is imported below, and the
unit tests parametrize over :data:`SPEAKER_BIAS_REGISTRY`.
"""

import importlib
import os
from typing import Callable, Dict, Type

from .base import SpeakerBias

SPEAKER_BIAS_REGISTRY: Dict[str, Type[SpeakerBias]] = {}


def register_speaker_bias(name: str) -> Callable[[Type[SpeakerBias]], Type[SpeakerBias]]:
    """Class decorator: make a :class:`SpeakerBias` subclass available as ``--speaker-bias name``."""

    def register(cls: Type[SpeakerBias]) -> Type[SpeakerBias]:
        if name in SPEAKER_BIAS_REGISTRY:
            raise ValueError(f"speaker bias {name!r} is already registered")
        if not issubclass(cls, SpeakerBias):
            raise ValueError(f"speaker bias {name!r} ({cls.__name__}) must subclass SpeakerBias")
        cls.name = name
        SPEAKER_BIAS_REGISTRY[name] = cls
        return cls

    return register


def build_speaker_bias(name: str, cfg, num_speakers: int, vocab_size: int) -> SpeakerBias:
    """Build the variant registered as ``name``.

    Args:
        name: a key of :data:`SPEAKER_BIAS_REGISTRY` (``none``, ``full``, ``fact``, ...).
        cfg: the model config; variants read their own options from it (``speaker_rank``).
        num_speakers: S, the size of the speaker dictionary.
        vocab_size: V, the size of the target dictionary.
    """
    if name not in SPEAKER_BIAS_REGISTRY:
        raise ValueError(
            f"unknown --speaker-bias {name!r}; registered variants: "
            f"{', '.join(sorted(SPEAKER_BIAS_REGISTRY))}"
        )
    return SPEAKER_BIAS_REGISTRY[name].build(cfg, num_speakers, vocab_size)


def _import_variants() -> None:
    here = os.path.dirname(__file__)
    for file in sorted(os.listdir(here)):
        if file.endswith(".py") and not file.startswith("_") and file != "base.py":
            importlib.import_module(f"{__name__}.{file[:-3]}")


_import_variants()

__all__ = ["SPEAKER_BIAS_REGISTRY", "SpeakerBias", "build_speaker_bias", "register_speaker_bias"]
