"""The model of a checkpoint, rebuilt on the meta device for counting (``fairseq-speaker-params --path``).

:func:`load_checkpoint_model` rebuilds the model from the options it was trained with, at its vocabulary sizes and
its number of speakers (onboarded ones included), and checks it parameter by parameter against the checkpoint's
shapes; :func:`checkpoint_training_flags` reads the optimizer, lr scheduler and precision it was trained with, for
the memory of training it (:mod:`fairseq_speaker.analysis.training_memory`).
"""

import argparse
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Dict, Optional, Sequence, TypedDict

import torch
from fairseq.models import ARCH_MODEL_REGISTRY
from torch import nn

from fairseq_speaker.analysis.meta_model import (
    CountingDictionary,
    MetaModel,
    few_speakers,
    model_options,
    resize_speakers,
)
from fairseq_speaker.checkpoints import read_checkpoint
from fairseq_speaker.errors import UserError
from fairseq_speaker.models import family_of_arch
from fairseq_speaker.user_dir import check_registered


@dataclass
class CheckpointModel:
    """What ``--path`` reads of a checkpoint: the model rebuilt on the meta device, and its sizes."""

    built: MetaModel
    arch: str
    src_vocab: int
    tgt_vocab: int
    num_speakers: int
    spk_token: bool


def _section(cfg, name: str) -> Dict:
    """The section ``name`` of a checkpoint's ``cfg`` (an omegaconf or argparse one) as a dict; {} if it has none."""
    section = cfg.get(name) if cfg is not None and hasattr(cfg, "get") else None
    if section is None:
        return {}
    return dict(vars(section)) if isinstance(section, argparse.Namespace) else dict(section)


def _rows(model: Dict, *keys: str) -> Optional[int]:
    """The rows of the first of the tables ``keys`` the model state ``model`` holds; None if it holds none."""
    for key in keys:
        if key in model and hasattr(model[key], "shape"):
            return int(model[key].shape[0])
    return None


class TrainingFlags(TypedDict):
    optimizer: Optional[str]
    lr_scheduler: Optional[str]
    fp16: bool
    memory_efficient_fp16: bool


def checkpoint_training_flags(state: dict) -> TrainingFlags:
    """The optimizer, lr scheduler and precision a checkpoint was trained with (fairseq's names)."""
    cfg = state.get("cfg")
    common = _section(cfg, "common")
    return {"optimizer": _section(cfg, "optimizer").get("_name"),
            "lr_scheduler": _section(cfg, "lr_scheduler").get("_name"),
            "fp16": bool(common.get("fp16")), "memory_efficient_fp16": bool(common.get("memory_efficient_fp16"))}


def load_checkpoint_model(path: str, training_args: Sequence[str] = ()) -> CheckpointModel:
    """The model of checkpoint ``path`` on the meta device, built from the options it was trained with (and
    ``training_args``, fairseq-train flags of training only: optimizer, precision) at its vocabulary sizes and
    number of speakers; every parameter is checked against the checkpoint's shape."""
    state = read_checkpoint(path)
    model_state, task_state = state.get("model"), state.get("task_state")
    if not isinstance(model_state, dict) or not isinstance(task_state, dict) or "cfg" not in state:
        raise UserError(f"--path {path}: not a fairseq-speaker checkpoint (no model or task state): give a checkpoint "
                        f"written by fairseq-train or fairseq-speaker-adapt")
    check_registered(state, path)
    options = _section(state["cfg"], "model")
    arch = options.get("arch") or options.get("_name")
    if not isinstance(arch, str) or arch not in ARCH_MODEL_REGISTRY or family_of_arch(arch) is None:
        raise UserError(f"--path {path}: its arch {arch!r} is not a speaker model's: give a fairseq-speaker checkpoint")
    speakers = task_state.get("speaker_dictionary")
    num_speakers = len(speakers["names"]) if isinstance(speakers, dict) else 0
    src_vocab = _rows(model_state, "encoder.embed_tokens.weight")
    tgt_vocab = _rows(model_state, "decoder.embed_tokens.weight", "decoder.output_projection.weight",
                      "decoder.output_bias")
    if src_vocab is None or tgt_vocab is None:
        raise UserError(f"--path {path}: no embedding tables in its model: not a checkpoint of a speaker model")
    args = argparse.Namespace(**{**vars(model_options(arch, training_args)),
                                 **{k: v for k, v in options.items() if not k.startswith("_")}})
    task = SimpleNamespace(source_dictionary=CountingDictionary(src_vocab),
                           target_dictionary=CountingDictionary(tgt_vocab),
                           speaker_dictionary=few_speakers(num_speakers))
    try:
        with torch.device("meta"):
            model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
            resize_speakers(model.decoder.speaker_bias, num_speakers)
    except (ValueError, OSError) as e:  # an option naming a file that is gone (topic's --topic-model), ...
        raise UserError(f"--path {path}: its model cannot be rebuilt from its options: {e}") from None
    built = MetaModel(model, args, {}, tgt_vocab)
    saved = {k: tuple(v.shape) for k, v in model_state.items() if hasattr(v, "shape")}
    missing = [name for name, _ in model.named_parameters() if name not in saved]
    if missing:
        raise UserError(f"--path {path}: the model rebuilt from its options has {missing[0]}, which the checkpoint "
                        f"lacks ({len(missing)} missing): a damaged checkpoint, or one of another release's model")
    for name, p in list(model.named_parameters()):  # sized by a file the options name (topic's K): as saved
        if saved[name] != tuple(p.shape):
            owner, _, attr = name.rpartition(".")
            setattr(model.get_submodule(owner), attr, nn.Parameter(torch.empty(saved[name], device="meta"),
                                                                   requires_grad=p.requires_grad))
    return CheckpointModel(built, arch, src_vocab, tgt_vocab, num_speakers, bool(task_state.get("speaker_token")))
