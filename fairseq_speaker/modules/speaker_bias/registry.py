"""The registry of speaker bias variants: names, options, and building a variant by name.

Variants register here (``@register_speaker_bias``); the speaker models read every variant's options
from here (:func:`speaker_option_fields`, :func:`on_register`). The package's ``__init__`` imports
every variant file of this folder, so this module sits below the variants and imports none of them.
"""

import dataclasses
import typing
from typing import Any, Callable, Dict, List, Optional, Type

from torch import nn

from fairseq_speaker.errors import UserError

from .base import SpeakerBias, SpeakerBiasConfig, StateSites

SPEAKER_BIAS_REGISTRY: Dict[str, Type[SpeakerBias]] = {}
#: name -> the variant's options dataclass
SPEAKER_BIAS_DATACLASS_REGISTRY: Dict[str, Type[SpeakerBiasConfig]] = {}
#: called after each registration (the speaker models refresh their option dataclasses)
_LISTENERS: List[Callable[[], None]] = []
#: option name -> (the variant that declared it first, its field)
_OPTION_FIELDS: Dict[str, "tuple[str, dataclasses.Field]"] = {}
#: names no variant option may take (the speaker models' own options, added by the models)
_RESERVED_OPTIONS: Dict[str, str] = {}


def register_speaker_bias(name: str, dataclass: Type[SpeakerBiasConfig] = SpeakerBiasConfig):
    """Class decorator: make a :class:`SpeakerBias` subclass available as ``--speaker-bias name``.

    Args:
        name: the variant's name (letters, digits, ``_``; no ``+``, which sums variants).
        dataclass: its options, a subclass of :class:`SpeakerBiasConfig`. An option may be
            declared by several variants only if it is the same field (e.g. inherited from a
            shared options class), so that a flag means one thing.
    """
    if not name or "+" in name or not name.replace("_", "").isalnum():
        raise ValueError(f"speaker bias name {name!r}: use letters, digits and '_'")
    if not (isinstance(dataclass, type) and issubclass(dataclass, SpeakerBiasConfig)):
        raise ValueError(f"speaker bias {name!r}: options must be a dataclass deriving from SpeakerBiasConfig")

    def register(cls: Type[SpeakerBias]) -> Type[SpeakerBias]:
        if name in SPEAKER_BIAS_REGISTRY:
            raise ValueError(f"speaker bias {name!r} is already registered")
        if not (isinstance(cls, type) and issubclass(cls, SpeakerBias)):
            raise ValueError(f"speaker bias {name!r} ({getattr(cls, '__name__', cls)}) must subclass SpeakerBias")
        new_fields = _check_options(name, dataclass)
        cls.name = name
        cls.config_class = dataclass
        SPEAKER_BIAS_REGISTRY[name] = cls
        SPEAKER_BIAS_DATACLASS_REGISTRY[name] = dataclass
        _OPTION_FIELDS.update(new_fields)
        for listener in _LISTENERS:
            listener()
        return cls

    return register


def unregister_speaker_bias(name: str) -> None:
    """Remove a variant (for tests that register throwaway variants)."""
    SPEAKER_BIAS_REGISTRY.pop(name)
    SPEAKER_BIAS_DATACLASS_REGISTRY.pop(name)
    for option in [o for o, (owner, _) in _OPTION_FIELDS.items() if owner == name]:
        del _OPTION_FIELDS[option]
    for listener in _LISTENERS:
        listener()


def _option_fields(dataclass: type) -> Dict[str, dataclasses.Field]:
    hints = typing.get_type_hints(dataclass)  # resolves string annotations (from __future__ import annotations)
    out = {}
    for f in dataclasses.fields(dataclass):
        if not f.name.startswith("_"):
            f.type = hints.get(f.name, f.type)
            out[f.name] = f
    return out


def _check_options(name: str, dataclass: type) -> Dict[str, "tuple[str, dataclasses.Field]"]:
    new = {}
    for option, f in _option_fields(dataclass).items():
        if option in _RESERVED_OPTIONS:
            raise ValueError(f"speaker bias {name!r}: option {option!r} is already an option of "
                             f"{_RESERVED_OPTIONS[option]}; choose another name")
        if option in _OPTION_FIELDS:
            owner, known = _OPTION_FIELDS[option]
            if known is not f and (known.type, known.default) != (f.type, f.default):
                raise ValueError(f"speaker bias {name!r}: option {option!r} is already declared differently "
                                 f"by speaker bias {owner!r}; share its field or choose another name")
        else:
            new[option] = (name, f)
    return new


def reserve_options(owner: str, names) -> None:
    """Names of a speaker model's own options (``dropout``, ...), which no variant may take."""
    for option in names:
        if option in _OPTION_FIELDS:
            raise ValueError(f"option {option!r} of {owner} is already an option of speaker bias "
                             f"{_OPTION_FIELDS[option][0]!r}")
        _RESERVED_OPTIONS.setdefault(option, owner)


def on_register(listener: Callable[[], None]) -> None:
    """Call ``listener`` after every registration (and unregistration) of a variant."""
    _LISTENERS.append(listener)


def speaker_option_fields() -> List[dataclasses.Field]:
    """The options of every registered variant, each once, in registration order."""
    return [f for _, f in _OPTION_FIELDS.values()]


def parse_variant_name(name: str, option: str = "--speaker-bias") -> List[str]:
    """``"fact+topic"`` -> ``["fact", "topic"]``; raises with the registered names if one is unknown (``option``: the
    option that gave ``name``, for the message)."""
    parts = str(name).split("+")
    if not str(name).strip():  # "$BIAS" unset: no speakers (a bare model) or the preset's, without a word
        raise UserError(f"{option} {name!r} names no variant: give one ({', '.join(sorted(SPEAKER_BIAS_REGISTRY))}; "
                        f"none for no speaker bias), or leave the option out for the --arch's own")
    if any(part != part.strip() for part in parts):  # ' fact' passed the check stripped and was looked up unstripped
        raise UserError(f"{option} {name!r}: a variant's name holds no spaces: write "
                        f"{'+'.join(part.strip() for part in parts)!r}")
    unknown = [part for part in parts if part not in SPEAKER_BIAS_REGISTRY]
    if unknown or not all(parts):
        raise UserError(
            f"unknown {option} {name!r}; registered variants: {', '.join(sorted(SPEAKER_BIAS_REGISTRY))} "
            f"(join two with '+' to add them, e.g. fact+topic)"
        )
    if len(parts) > 1 and len(set(parts)) < len(parts):
        raise UserError(f"{option} {name!r} names a variant twice")
    return parts


def variant_spelling(bias: SpeakerBias) -> str:
    """A built variant as ``--speaker-bias`` spells it (:func:`parse_variant_name`'s inverse): ``fact``, or
    ``fact+full`` for a sum (whose class's name is ``sum``)."""
    parts = getattr(bias, "parts", None)
    if isinstance(parts, nn.ModuleDict):  # a combinator (sum) holds the variants it adds, by name
        return "+".join(parts.keys())
    return bias.name


def speaker_bias_class(name: str) -> Type[SpeakerBias]:
    """The class that ``--speaker-bias name`` builds (``sum`` for ``a+b``)."""
    parts = parse_variant_name(name)
    return SPEAKER_BIAS_REGISTRY[parts[0] if len(parts) == 1 else "sum"]


def build_speaker_bias(name: str, cfg, speaker_dictionary, target_dictionary,
                       source_dictionary=None, sites: Optional[StateSites] = None) -> SpeakerBias:
    """Build the variant ``name`` (a registered name, or ``a+b``) from the model config ``cfg``.

    Args:
        cfg: the model config; each variant reads its own options from it.
        speaker_dictionary: the task's speaker dictionary (None for a task without speakers).
        target_dictionary: the target dictionary (V = its size).
        source_dictionary: the source dictionary, for variants that read the source.
        sites: where a speaker state acts in the decoder it is for (:meth:`SpeakerBias.attach`); a model
            attaches its variant itself (``SpeakerModelMixin.with_speaker_bias``), this is for a variant alone.
    """
    parts = parse_variant_name(name)
    if len(parts) > 1:  # a+b: the "sum" combinator, registered like any variant
        combinator: Any = SPEAKER_BIAS_REGISTRY["sum"]  # sum.py's class, which this module does not import
        bias = combinator.build_parts(parts, cfg, speaker_dictionary, target_dictionary, source_dictionary)
    else:
        bias = SPEAKER_BIAS_REGISTRY[name].build(cfg, speaker_dictionary, target_dictionary, source_dictionary)
    if sites is not None:
        bias.attach(sites)
    return bias
