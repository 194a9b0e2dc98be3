"""The checks of :class:`~fairseq_speaker.onboarding.translator.SpeakerTranslator`'s arguments: sentences and speakers
as lists (a string is one sentence, never its characters), names, beams and n-best counts, the generation options a
caller may pass to fairseq's hub and the overrides of a checkpoint's configuration. Each refusal is an
:class:`~fairseq_speaker.onboarding.checkpoint.OnboardingError` naming the argument and what to give instead.
"""

import functools
import math
import numbers
import os
import typing
from typing import Dict, List, Optional, Sequence, Union

import numpy as np
import torch
from fairseq.dataclass.configs import GenerationConfig

import fairseq_speaker  # noqa: F401  (registers the task and the models)
from fairseq_speaker.data.sentence_checks import sentence_problem
from fairseq_speaker.onboarding.checkpoint import OnboardingError
from fairseq_speaker.tasks.inference import BEAM_STOPS

Sentences = Union[str, Sequence[str]]


def as_list(x: Sentences, what: str = "sentences") -> List[str]:
    if isinstance(x, str):
        return [x]
    if x is None or not isinstance(x, (list, tuple)) or not all(isinstance(item, str) for item in x):
        raise OnboardingError(f"{what}: give a string or a list of strings, got {type(x).__name__} {x!r:.80}")
    return list(x)


def not_blank(sentences: List[str], what: str = "sentences") -> List[str]:
    """``sentences`` if none is empty or only whitespace: the model would answer one with an invented sentence, and
    a speaker fitted on one learns the end of sentence alone."""
    for i, sentence in enumerate(sentences):
        problem = sentence_problem(sentence)
        if problem:
            raise OnboardingError(f"{what}[{i}] is {problem}: give a sentence (or leave it out)")
    return sentences


def checked_path(path, what: str) -> str:
    """``path`` as text if it is a path (``str`` or ``os.PathLike``): bytes or None ended in a ``TypeError`` deep in
    ``os.path``. ``what`` names it in the refusal."""
    if not isinstance(path, (str, os.PathLike)):
        raise OnboardingError(f"{what} must be a path (str or os.PathLike), got {type(path).__name__} {path!r:.60}")
    return os.fspath(path)


def some(sentences: List[str], what: str = "sentences") -> List[str]:
    """``sentences`` if it holds one at least (fairseq's hub read none as every one skipped for its length)."""
    if not sentences:
        raise OnboardingError(f"{what} is an empty list: give at least one sentence")
    return sentences


def per_sentence(speakers: Sentences, n: int) -> List[str]:
    """One speaker label per sentence of ``n``, from one label for all or one per sentence."""
    labels = as_list(speakers, "speakers")
    if len(labels) == 1:
        labels = labels * n
    if len(labels) != n:
        raise OnboardingError(f"{len(labels)} speakers for {n} sentences: give one speaker for all, or one per "
                              f"sentence")
    return labels


def name_list(names, method: str, empty: bool = True, every: bool = True) -> List[str]:
    """``names`` if it is a list (or tuple) of speaker names: a string would be read as its characters. ``empty``:
    whether an empty list is a list of names here; ``every``: whether leaving names out means every speaker."""
    if not isinstance(names, (list, tuple)) or not all(isinstance(name, str) for name in names):
        raise OnboardingError(f"{method}: give a list of speaker names, got {type(names).__name__} {names!r:.80}"
                              + (f" ({method}([{names!r:.60}]) for one)" if isinstance(names, str) else ""))
    if not names and not empty:
        raise OnboardingError(f"{method}: names is an empty list: give at least one speaker"
                              + (" (or leave names out: every speaker)" if every else ": nothing would be done"))
    return list(names)


def whole(value):
    """``value`` as an int if it is a whole number of any integer type (numpy's ``np.int64`` included), else as it is
    (a bool stays a bool)."""
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_)) else value


def checked_beam(beam) -> int:
    """``beam`` if it is a whole number of at least 1 (fairseq's search would fail on anything else)."""
    beam = whole(beam)
    if isinstance(beam, bool) or not isinstance(beam, int) or beam < 1:
        raise OnboardingError(f"beam must be a whole number of at least 1, got {beam!r}")
    return beam


def checked_nbest(nbest, beam: int) -> int:
    """``nbest`` if it is a whole number from 1 to ``beam`` (the beam keeps ``beam`` hypotheses: a larger nbest would
    give fewer translations than asked, 0 none)."""
    nbest = whole(nbest)
    if isinstance(nbest, bool) or not isinstance(nbest, int) or not 1 <= nbest <= beam:
        raise OnboardingError(f"nbest must be a whole number from 1 to the beam ({beam}), got {nbest!r}: the beam "
                              f"keeps {beam} translations of each sentence; raise beam for more")
    return nbest


#: what fairseq's hub interface takes besides the generation options (fairseq-generate's, with underscores)
HUB_GENERATE_OPTIONS = ("verbose", "inference_step_args", "prefix_allowed_tokens_fn",
                        "beam_stop")  # the last the task's (--beam-stop): when the beam search ends a sentence

#: generation options that fairseq-generate and -interactive read but the hub interface does not (each would be accepted
#: and change nothing), and one that would lose sentences: option -> why it is refused, and what to do instead
NOT_FOR_THE_HUB = {
    "nbest": "translate gives each sentence's best translation; translate_nbest(nbest=N) gives N",
    "prefix_size": "the hub does not read it (it forces a prefix of a reference translation, which these sentences do "
                   "not have); inference_step_args={'prefix_tokens': ...} forces one",
    "replace_unk": "the hub does not read it (it is fairseq-generate's and -interactive's post-processing)",
    "sacrebleu": "the hub does not read it (it is fairseq-generate's scoring)",
    "score_reference": "the hub does not read it (it scores reference translations, which these sentences do not have)",
    "print_step": "the hub does not read it (it is fairseq-generate's output)",
    "lm_path": "the hub does not read it (fairseq-generate loads the language model)",
    "lm_weight": "the hub does not read it (fairseq-generate fuses the language model)",
    "constraints": "the hub passes no constraints to the search",
    # a binarized split and its speakers: read by none of its methods (a file that did not exist was taken)
    **{name: "a translator reads no binarized split nor its speaker file; translate(sentences, speakers) names each "
             "sentence's speaker" for name in ("speaker_file", "speaker_suffix", "gen_subset", "valid_subset",
                                               "train_subset")},
    "skip_invalid_size_inputs": "a sentence longer than the model takes is refused, naming it; skipped, it would leave "
                                "fewer translations than sentences, out of step with them",
    **{name: "this model's search does not read it (fairseq reads it for other kinds of models: speech translation's "
             "second pass, non-autoregressive decoding, or its command lines)"
       for name in ("beam_mt", "lenpen_mt", "max_len_a_mt", "max_len_b_mt", "decoding_format",
                    "iter_decode_eos_penalty", "iter_decode_max_iter", "iter_decode_force_max_iter",
                    "iter_decode_with_beam", "iter_decode_with_external_reranker", "retain_iter_history",
                    "retain_dropout", "retain_dropout_modules", "no_seed_provided", "eos_token")},
}


def value_problem(value, hint) -> Optional[str]:
    """What is wrong with ``value`` for a generation option typed ``hint`` (fairseq's ``GenerationConfig``), or None:
    a bool where a number goes, text where a bool goes (fairseq took ``"yes"`` for true, ``"20"`` ended in a
    ``TypeError`` deep in the search), a number that is not finite."""
    if typing.get_origin(hint) is Union:
        if value is None:
            return None
        hint = next((arg for arg in typing.get_args(hint) if arg is not type(None)), hint)
    if hint is bool:
        return None if isinstance(value, bool) else "True or False"
    if hint is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "a whole number"
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
        return None if ok else "a finite number"
    if hint is str:
        return None if isinstance(value, str) else "text"
    return None  # a choice of fairseq's: its own check


#: the type of each of fairseq's generation options
GENERATION_TYPES: Dict[str, object] = typing.get_type_hints(GenerationConfig)


def plain(value):
    """``value`` as Python's own number or bool where it is numpy's (``np.int64(3)``, ``np.float32(0.5)``): the
    checks below, and fairseq, read those."""
    return value.item() if isinstance(value, np.generic) else value


def checked_options(options: dict, generation) -> dict:
    """``options`` if each is one of fairseq's generation options (``generation``: the hub's, a ``GenerationConfig``)
    or of its hub interface: fairseq would set a misspelt one (``beem=3``) aside without a word."""
    options = {name: plain(value) for name, value in options.items()}
    for name in options:
        if name in NOT_FOR_THE_HUB:
            raise OnboardingError(f"{name!r} is refused here: {NOT_FOR_THE_HUB[name]}")
        problem = value_problem(options[name], GENERATION_TYPES[name]) if name in GENERATION_TYPES else None
        if problem:
            raise OnboardingError(f"{name} must be {problem}, got {type(options[name]).__name__} "
                                  f"{options[name]!r:.60}")
        if name not in generation and name not in HUB_GENERATE_OPTIONS:
            raise OnboardingError(f"{name!r} is not an option of fairseq's generation (fairseq-generate's options, "
                                  f"written with underscores: beam, lenpen, max_len_b, sampling, ...): it would be "
                                  f"ignored")
    if "beam_stop" in options and options["beam_stop"] is None:  # the translator's own, as from_pretrained's None
        options = {name: value for name, value in options.items() if name != "beam_stop"}
    if options.get("beam_stop", BEAM_STOPS[0]) not in BEAM_STOPS:
        raise OnboardingError(f"beam_stop must be one of {', '.join(BEAM_STOPS)}, got {options['beam_stop']!r}")
    alignment = options.get("print_alignment")
    if alignment not in (None, False, "hard", "soft"):  # fairseq's generator would fail on another value
        raise OnboardingError(f"print_alignment must be 'hard' or 'soft' (or left out), got {alignment!r}")
    # a whole number where fairseq's option is a float, as its parser would read it: fairseq raises a length to the
    # power lenpen, which as an int grew past what a tensor holds (lenpen=50: "int too big to convert")
    return {name: float(value) if GENERATION_TYPES.get(name) in (float, Optional[float]) and isinstance(value, int)
            and not isinstance(value, bool) else value for name, value in options.items()}


def checked_step_args(options: dict, sentences: int, vocab: int) -> None:
    """The hub's ``inference_step_args``: the task's ``inference_step`` takes ``prefix_tokens`` only, a ``[1, k]``
    tensor of target word ids for one sentence (the hub gives the same tensor to every batch it makes, in its order of
    lengths: rows for several sentences would go to other sentences)."""
    args = options.get("inference_step_args")
    if args is None:
        return
    if not isinstance(args, dict) or set(args) - {"prefix_tokens"}:
        raise OnboardingError(f"inference_step_args: give a dict whose only key is 'prefix_tokens', got "
                              f"{args!r:.80}")
    prefix = args.get("prefix_tokens")
    if prefix is None:
        return
    if not torch.is_tensor(prefix) or prefix.dim() != 2 or prefix.size(0) != 1 or prefix.dtype != torch.long:
        raise OnboardingError(f"inference_step_args: prefix_tokens must be a LongTensor [1, k] of target word ids for "
                              f"one sentence, got {prefix!r:.80}")
    if sentences != 1:
        raise OnboardingError(f"inference_step_args: prefix_tokens forces the start of one sentence, and {sentences} "
                              f"are given: translate them one at a time")
    if prefix.numel() and (int(prefix.min()) < 0 or int(prefix.max()) >= vocab):
        raise OnboardingError(f"inference_step_args: prefix_tokens holds ids outside the target dictionary (0 to "
                              f"{vocab - 1})")


def check_overrides(overrides: dict, cfg, checkpoint: str) -> None:
    """Refuse an override of ``from_pretrained`` that names no option of the checkpoint's configuration (nor of a
    tokenizer or BPE): fairseq sets it aside without a word (``max_len_bb=3``)."""
    import dataclasses

    from fairseq.registry import REGISTRIES

    groups = dict(cfg) if isinstance(cfg, dict) else ({name: cfg[name] for name in cfg} if cfg is not None else {})
    known = set(groups)
    for group in groups.values():
        if hasattr(group, "keys"):
            known.update(group.keys())
    for kind in ("bpe", "tokenizer"):
        for options in REGISTRIES[kind]["dataclass_registry"].values():
            if options is not None:
                known.update(f.name for f in dataclasses.fields(options))
    given = [name for name in ("speaker", "speaker_per_line") if name in overrides]
    if given:
        raise OnboardingError(f"from_pretrained: {', '.join(map(repr, given))} are fairseq-interactive's speakers of "
                              f"its input lines; translate(sentences, speakers) names each sentence's speaker")
    for name, value in overrides.items():
        problem = _override_problem(name, plain(value))
        if problem:
            raise OnboardingError(f"from_pretrained: {name} {problem}")
    unknown = [name for name in overrides if name not in known]
    if unknown and groups:
        raise OnboardingError(f"from_pretrained: {', '.join(map(repr, unknown))} is no option of {checkpoint}'s "
                              f"configuration (fairseq's options, with underscores: max_len_b, unknown_speaker, "
                              f"tokenizer, bpe_codes, ...): fairseq would set it aside without a word")


@functools.lru_cache(maxsize=1)
def _override_types() -> Dict[str, object]:
    """The types of fairseq's options that ``from_pretrained`` may override, by name (the first group that has it)."""
    from fairseq.dataclass.configs import CheckpointConfig, CommonConfig, DatasetConfig

    types: Dict[str, object] = {}
    for config in (GenerationConfig, CommonConfig, DatasetConfig, CheckpointConfig):
        for name, hint in typing.get_type_hints(config).items():
            types.setdefault(name, hint)
    return types


def _override_problem(name: str, value) -> Optional[str]:
    """What is wrong with an override of ``from_pretrained`` that fairseq would take and read as something else, or
    None: a value of the wrong type (``cpu='no'`` was true), a size of a batch under 1 (``max_tokens=-5`` refused every
    sentence as longer than -5 tokens), half precision without a GPU (taken and ignored), an option the hub does not
    read (``nbest=3``)."""
    if name in NOT_FOR_THE_HUB:
        return f"is not read here: {NOT_FOR_THE_HUB[name]}"
    hint = _override_types().get(name)
    problem = value_problem(value, hint) if hint is not None else None
    if problem:
        return f"must be {problem}, got {type(value).__name__} {value!r:.60}"
    if name in ("max_tokens", "batch_size", "required_batch_size_multiple") and value is not None and value < 1:
        return f"must be at least 1 (or None: no limit), got {value}"
    if name in ("fp16", "bf16", "memory_efficient_fp16", "memory_efficient_bf16") and value \
            and not torch.cuda.is_available():
        return ("asks for half precision, which fairseq computes on a CUDA GPU only, and this machine has none: leave "
                "it out")
    return None
