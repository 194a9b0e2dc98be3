"""Everything fairseq-speaker changes in fairseq (and torch), or reads from their insides, in one place.

No other module of the package reads or overrides a private part of fairseq or torch: it calls the readers
here (:func:`onednn_linear`, :func:`version_counter`, ...), each listed in :data:`CHANGES`.

A fairseq plugin should change fairseq only through its extension points (registries, subclasses).
Where that is not enough, the change is made here, and nowhere else:

- :data:`CHANGES` lists every one: what it touches, what it does, why, where the code it installs lives,
  and the fairseq version it was written against. docs/extending.md's "Compatibility" section lists the same
  (a test keeps the two in step).
- :func:`apply` makes the changes; it is called once when the package is imported (``--user-dir``) and
  does nothing when called again. Every wrapped function keeps the original's behaviour for everything
  that is not a speaker table, and the optimizer hook reaches only the optimizers fairseq's trainer
  steps (onboarding's L-BFGS, a user's own torch optimizer, never see it).
- :func:`check_fairseq_version` refuses, at import, a fairseq outside the supported releases (0.12.2
  and the maintained builds of 0.12.3, such as ``fairseq-fixed``), with what to install; the private
  attributes this module reads are checked to exist, so that a fairseq that renamed one fails loudly here
  instead of quietly skipping a fix.
"""

import contextlib
import functools
import importlib.util
import inspect
import logging
import os
import re
import sys
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, List, Optional, Set

import fairseq
import torch

from fairseq_speaker.errors import UserError

logger = logging.getLogger(__name__)

#: the fairseq releases this package is written and tested against (a version starting with one of them)
SUPPORTED_FAIRSEQ = ("0.12.2", "0.12.3")
#: "1" in the environment: import with another fairseq anyway (a warning instead of the refusal)
ANY_FAIRSEQ_VARIABLE = "FAIRSEQ_SPEAKER_ANY_FAIRSEQ"


@dataclass(frozen=True)
class Change:
    """One change to fairseq or torch, or one private part of fairseq that the package relies on."""

    target: str  #: what is touched, by its import path
    kind: str  #: "wrapped", "replaced", "registered", "read" (a private attribute) or "overridden" (a private method)
    what: str  #: what the package does there
    why: str  #: what goes wrong without it
    where: str  #: the package's code it installs or uses
    written_for: str = "0.12.2"


CHANGES: List[Change] = [
    Change("fairseq.optim.FairseqOptimizer.multiply_grads", "replaced",
           "scales row-sparse gradients of speaker tables, as dense ones",
           "fairseq scales a detached alias of a sparse gradient: the rows' gradients would stay unnormalized, "
           "dominate the gradient norm and shrink every other gradient under --clip-norm",
           "fairseq_speaker.optim.row_gradients.multiply_grads"),
    Change("fairseq.utils.clip_grad_norm_", "wrapped",
           "counts row-sparse gradients in the norm and clips them",
           "fairseq's norm skips sparse gradients", "fairseq_speaker.optim.row_gradients.clip_grad_norm_"),
    Change("fairseq.optim.FairseqOptimizer.step", "wrapped",
           "before the first step, registers a step pre-hook on that optimizer's own torch optimizer: the "
           "speaker tables' rows are updated there, row by row",
           "the rows of speakers absent from a batch must keep their values and their Adam state (the authors' "
           "lazy updates), and a grown table's optimizer state must gain rows; a global torch hook would also "
           "fire for every other optimizer of the process", "fairseq_speaker.optim.speaker_rows.update_speaker_rows"),
    Change("fairseq.optim.fp16_optimizer.FP16Optimizer.build_fp32_params", "wrapped",
           "records on the fp32 copies of the parameters that --fp16/--bf16's optimizer steps on where each "
           "parameter lies in them (by default all in one flat copy)",
           "the speaker tables are trained as slices of those copies, which the step hook would not know as "
           "tables: --speaker-lr-scale would not reach their rows, which would take the shared learning rate",
           "fairseq_speaker.optim.table_marks.record_fp32_copies"),
    Change("fairseq.checkpoint_utils.load_checkpoint_to_cpu", "wrapped",
           "names the file in every loading error and upgrades checkpoints of earlier releases as they are read",
           "fairseq's errors do not name the file (a KeyError or an unpickling error), and checkpoints older than "
           "0.3.0 have unnamed speaker rows", "fairseq_speaker.checkpoints.readable, upgrade"),
    Change("fairseq.checkpoint_utils.torch_persistent_save", "wrapped",
           "writes a local checkpoint through the package's atomic writer (a hidden temporary file named after "
           "the writing process, then a rename)",
           "fairseq's own temporary file (checkpoint_last.pt.tmp) is left behind by a killed run and never removed",
           "fairseq_speaker.checkpoint_writing.atomic_persistent_save"),
    Change("fairseq.checkpoint_utils.PathManager", "replaced",
           "the PathManager of fairseq's checkpoint module copies local files atomically",
           "fairseq-train copies each checkpoint it writes to checkpoint_best.pt and checkpoint_last.pt with a plain "
           "copy: a run killed during the copy leaves a truncated checkpoint_last.pt, which the next run resumes from",
           "fairseq_speaker.checkpoint_writing.atomic_copies"),
    Change("torch.serialization.add_safe_globals", "registered",
           "allow-lists the numpy and argparse classes that fairseq checkpoints hold",
           "torch >= 2.6 loads with weights_only=True and refuses fairseq's own checkpoints otherwise",
           "fairseq_speaker.checkpoints.checkpoint_globals", written_for="torch 2.6"),
    Change("fairseq.models.MODEL_DATACLASS_REGISTRY", "registered",
           "replaces a speaker model's options dataclass (also its __dataclass and hydra ConfigStore node) "
           "whenever a speaker bias variant registers",
           "a variant registered after the model (a second --user-dir) must still have its options as flags "
           "and hydra keys of every speaker model", "fairseq_speaker.fairseq_patches.set_model_options"),
    Change("argparse.ArgumentParser._actions", "read",
           "lists the options of an argparse model (the Transformer) so that no variant option takes their names",
           "argparse has no public listing of a parser's options",
           "fairseq_speaker.fairseq_patches.parser_option_names",
           written_for="Python 3.8-3.12"),
    Change("fairseq.tasks.FairseqTask.dataset_to_epoch_iter", "read",
           "tells whether fairseq will reuse an epoch iterator it cached",
           "a resumed run must make epoch 1's batches, as a run that went through does",
           "fairseq_speaker.fairseq_patches.epoch_iterator_is_cached"),
    Change("fairseq.tasks.translation.TranslationTask._inference_with_bleu", "overridden",
           "drops the speaker token that starts every reference with --speaker-token",
           "--eval-bleu would score the speaker token as a word of every reference",
           "fairseq_speaker.tasks.inference.SpeakerInferenceMixin._inference_with_bleu"),
    Change("fairseq.sequence_generator.SequenceGenerator._generate", "overridden",
           "makes the search of --beam-stop unbeaten end at the maximum length (search.stop_on_max_len) before "
           "fairseq's own loop runs",
           "a sentence whose live hypotheses all score -inf is left at the maximum length, where fairseq's loop "
           "asserts that every sentence has ended (its own rule has ended them all by then)",
           "fairseq_speaker.sequence_generator.UnbeatenStopGenerator._generate"),
    Change("fairseq_cli.interactive.buffered_read", "replaced",
           "reads fairseq-interactive's input as bytes: lines end at a line feed only, and bytes that are not UTF-8 "
           "reach the task, which answers their line with an empty translation and a warning",
           "fairseq reads --input FILE with Python's universal newlines and a strict decoder: a lone carriage "
           "return split a line in two (every later translation's id shifted), and a Latin-1 or UTF-16 file ended "
           "the session in a UnicodeDecodeError (standard input too, under a strict locale)",
           "fairseq_speaker.fairseq_patches.buffered_read"),
    Change("fairseq.trainer.Trainer.__init__", "wrapped",
           "refuses --fp16, --bf16 and their memory-efficient forms without a CUDA GPU, with what to do; and a "
           "--restore-file other than the default that is not there",
           "fairseq then fails deep inside with an assertion or takes the machine for a TPU (a traceback); a "
           "misspelt --restore-file trained from scratch after one log line and overwrote --save-dir's checkpoints",
           "fairseq_speaker.fairseq_patches.check_half_precision"),
    Change("fairseq.models.BaseFairseqModel.get_normalized_probs", "read",
           "recognizes a model whose log-probabilities are fairseq's default log_softmax (by method identity)",
           "the fused loss computes log_softmax itself: a model that normalizes otherwise must keep fairseq's loss",
           "fairseq_speaker.fairseq_patches.uses_default_log_softmax"),
    Change("torch.ops.mkldnn._linear_pointwise", "read",
           "multiplies the LSTM's float32 matrices on a CPU by oneDNN's GEMM (a fast path; F.linear where it is "
           "missing)",
           "torch has no public call of oneDNN's GEMM, faster than the BLAS's for these shapes on the CPUs measured",
           "fairseq_speaker.fairseq_patches.onednn_linear", written_for="torch 2.6"),
    Change("torch._foreach_mul_", "read",
           "scales the dense gradients of one device and dtype in one call when the row-sparse ones are scaled too",
           "torch has no public call; one multiplication per gradient launches a kernel each, as torch's own "
           "clip_grad_norm_ avoids", "fairseq_speaker.fairseq_patches.foreach_mul_", written_for="torch 2.6"),
    Change("torch.Tensor._version", "read",
           "tells whether a variant's parameters changed in place since its mean bias (or state) was cached",
           "torch has no public version counter; without it a cached value could outlive an in-place update",
           "fairseq_speaker.fairseq_patches.version_counter", written_for="torch 2.6"),
    Change("torch.nn.Module._non_persistent_buffers_set", "read",
           "tells which buffers a model's state_dict leaves out, in the accounting of training memory",
           "torch has no public listing of a module's non-persistent buffers",
           "fairseq_speaker.fairseq_patches.non_persistent_buffer_names", written_for="torch 2.6"),
    Change("torch.nn.Module._load_from_state_dict", "overridden",
           "a variant built alone takes from the checkpoint the decoder's sites its parameters were made for, "
           "before the parameters are loaded", "it could not load a state variant's parameters, whose shapes the "
           "decoder's sizes decide (inspection, the report)",
           "fairseq_speaker.modules.speaker_bias.base.SpeakerBias._load_from_state_dict", written_for="torch 2.6"),
    Change("torch.nn.Module._load_from_state_dict", "overridden",
           "the topic variant takes the shapes of the checkpoint's topic model before the parameters are loaded",
           "a model whose --topic-model file has another number of topics than at training would not load",
           "fairseq_speaker.modules.speaker_bias.topic.TopicBias._load_from_state_dict", written_for="torch 2.6"),
]


# -- the supported fairseq ----------------------------------------------------------------------------


class UnsupportedFairseq(UserError, ImportError):
    """The installed fairseq is not one this package supports."""


def check_fairseq_version(version: str = getattr(fairseq, "__version__", "unknown")) -> None:
    """Refuse a fairseq outside :data:`SUPPORTED_FAIRSEQ` (a warning with ``FAIRSEQ_SPEAKER_ANY_FAIRSEQ=1``)."""
    if any(version == v or version.startswith(v + ".") for v in SUPPORTED_FAIRSEQ):
        return
    message = (f"fairseq-speaker supports fairseq {' and '.join(SUPPORTED_FAIRSEQ)}.x, found fairseq {version}: "
               f"pip install 'fairseq==0.12.2' (Python < 3.11) or 'fairseq-fixed==0.12.3.1' (Python >= 3.11); "
               f"{ANY_FAIRSEQ_VARIABLE}=1 tries this one anyway")
    if os.environ.get(ANY_FAIRSEQ_VARIABLE) == "1":
        logger.warning(message)
        return
    raise UnsupportedFairseq(message)


# -- the changes --------------------------------------------------------------------------------------

#: what :func:`apply` replaced: target -> the original
ORIGINALS: Dict[str, Callable] = {}
_MARK = "_fairseq_speaker_patch"


def _replace(owner, name: str, target: str, make: Callable[[Any], Any]) -> None:
    """Set ``owner.name`` to ``make(original)`` unless this module did already (idempotent); a classmethod
    stays one (``make`` then returns a function taking the class first)."""
    current = getattr(owner, name)
    if getattr(current, _MARK, False):
        return
    ORIGINALS[target] = current
    patched = make(current)
    setattr(patched, _MARK, True)
    setattr(owner, name, classmethod(patched) if isinstance(inspect.getattr_static(owner, name), classmethod)
            else patched)


def apply() -> None:
    """Make every change of :data:`CHANGES` that is made once (the others are made where a model registers
    or read where needed); a second call changes nothing."""
    from fairseq import checkpoint_utils
    from fairseq import utils as fairseq_utils
    from fairseq.optim import FairseqOptimizer

    from fairseq_speaker import checkpoint_writing, checkpoints
    from fairseq_speaker.optim import row_gradients, speaker_rows, table_marks

    check_fairseq_version()
    _check_private_parts()

    def multiply_grads(original):
        def multiply_grads(self, c):
            row_gradients.multiply_grads(self.params, c, multiply_=foreach_mul_)
        return functools.wraps(original)(multiply_grads)

    _replace(FairseqOptimizer, "multiply_grads", "fairseq.optim.FairseqOptimizer.multiply_grads", multiply_grads)

    def clip_grad_norm_(original):
        @functools.wraps(original)
        def clip_grad_norm_(params, max_norm, aggregate_norm_fn=None):
            return row_gradients.clip_grad_norm_(params, max_norm, aggregate_norm_fn, dense_clip_grad_norm_=original,
                                                 multiply_=foreach_mul_)
        return clip_grad_norm_

    _replace(fairseq_utils, "clip_grad_norm_", "fairseq.utils.clip_grad_norm_", clip_grad_norm_)

    def step(original):
        @functools.wraps(original)
        def step(self, *args, **kwargs):
            speaker_rows.update_speaker_rows(self.optimizer)
            return original(self, *args, **kwargs)
        return step

    _replace(FairseqOptimizer, "step", "fairseq.optim.FairseqOptimizer.step", step)

    from fairseq.optim.fp16_optimizer import FP16Optimizer

    def build_fp32_params(original):
        @functools.wraps(original)
        def build_fp32_params(cls, args, params, flatten=True):
            fp32_params = original.__func__(cls, args, params, flatten=flatten)
            pipeline = getattr(args, "pipeline_model_parallel", False) and getattr(args, "distributed_no_spawn",
                                                                                    False)  # as fairseq reads it
            table_marks.record_fp32_copies(params, fp32_params, pipeline=bool(pipeline))
            return fp32_params
        return build_fp32_params

    _replace(FP16Optimizer, "build_fp32_params", "fairseq.optim.fp16_optimizer.FP16Optimizer.build_fp32_params",
             build_fp32_params)

    def load_checkpoint_to_cpu(original):
        @functools.wraps(original)
        def load_checkpoint_to_cpu(path, *args, **kwargs):
            with checkpoints.readable(path):
                state = original(path, *args, **kwargs)
            return checkpoints.upgrade(state, path)
        return load_checkpoint_to_cpu

    _replace(checkpoint_utils, "load_checkpoint_to_cpu", "fairseq.checkpoint_utils.load_checkpoint_to_cpu",
             load_checkpoint_to_cpu)
    _replace(checkpoint_utils, "torch_persistent_save", "fairseq.checkpoint_utils.torch_persistent_save",
             checkpoint_writing.atomic_persistent_save)
    _replace(checkpoint_utils, "PathManager", "fairseq.checkpoint_utils.PathManager", checkpoint_writing.atomic_copies)

    from fairseq.trainer import Trainer

    def trainer_init(original):
        @functools.wraps(original)
        def __init__(self, cfg, *args, **kwargs):
            check_half_precision(cfg.common)
            check_restore_file(cfg.checkpoint)
            check_finetune_from_model(cfg.checkpoint)
            original(self, cfg, *args, **kwargs)
        return __init__

    _replace(Trainer, "__init__", "fairseq.trainer.Trainer.__init__", trainer_init)
    checkpoints.allow_fairseq_checkpoints()


def buffered_read(input: str, buffer_size: int) -> Iterator[List[str]]:
    """fairseq-interactive's input lines (``input``: a file, or ``-`` for standard input), ``buffer_size`` at a time,
    as fairseq's ``buffered_read`` gives them (each stripped), but split at ``\n`` only and decoded with
    ``surrogateescape``: a byte that is not UTF-8 becomes a lone surrogate, which the speaker task reports
    (:func:`fairseq_speaker.tasks.inference.untranslatable_line`)."""
    if input == "-":  # its bytes (a test's stand-in for standard input may have text only)
        opened: Any = contextlib.nullcontext(getattr(sys.stdin, "buffer", sys.stdin))
    else:
        try:
            opened = open(input, "rb")
        except OSError as e:
            raise UserError(f"--input {input}: {e.strerror}: give a readable text file, or leave out --input") from None
    buffer: List[str] = []
    with opened as stream:
        for number, line in enumerate(stream, 1):
            if number == 1 and isinstance(line, bytes):
                _check_not_utf16(line, input)
            buffer.append((line.decode("utf-8", "surrogateescape") if isinstance(line, bytes) else line).strip())
            if len(buffer) >= buffer_size:
                yield buffer
                buffer = []
    if buffer:
        yield buffer


def _check_not_utf16(line: bytes, input: str) -> None:
    """Refuse input in UTF-16 or UTF-32 (its first line starts with their byte-order mark, or a third of its bytes or
    more are NUL, as in ASCII text in UTF-16): split at each ``\n`` byte, every line of it read as words holding NUL
    characters, and one more line than the file has."""
    nuls = line.count(b"\0")
    if line.startswith((b"\xff\xfe", b"\xfe\xff", b"\0\0\xfe\xff")) or (nuls and 3 * nuls >= len(line)):
        utf32 = line.startswith((b"\xff\xfe\0\0", b"\0\0\xfe\xff")) or 3 * nuls >= 2 * len(line)
        name = "UTF-32" if utf32 else "UTF-16"
        where = "standard input" if input == "-" else f"--input {input}"
        convert = f"iconv -f {name.lower()} -t utf-8" + ("" if input == "-" else f" {input} > {input}.utf8")
        raise UserError(f"{where}: the text looks like {name} (a byte-order mark or NUL bytes in its first line), not "
                        f"UTF-8: convert it ({convert})")


def read_interactive_input() -> None:
    """Replace fairseq-interactive's ``buffered_read`` by :func:`buffered_read` where fairseq-interactive runs (its
    module imported: its ``main`` reads its input after the task is set up)."""
    module = sys.modules.get("fairseq_cli.interactive")
    if module is not None and hasattr(module, "buffered_read"):
        _replace(module, "buffered_read", "fairseq_cli.interactive.buffered_read", lambda original: buffered_read)


def set_model_options(name: str, model_cls: type, options: type) -> None:
    """Make ``options`` (a dataclass) the options of the registered model ``name``: where fairseq's argparse
    path (``MODEL_DATACLASS_REGISTRY``, the class's ``__dataclass``) and hydra (the ConfigStore's
    ``model/<name>`` node) look for them."""
    from fairseq.models import MODEL_DATACLASS_REGISTRY
    from hydra.core.config_store import ConfigStore

    MODEL_DATACLASS_REGISTRY[name] = options
    setattr(model_cls, "__dataclass", options)
    node = options()
    node._name = name
    ConfigStore.instance().store(name=name, group="model", node=node, provider="fairseq")


def check_restore_file(checkpoint) -> None:
    """Refuse a ``--restore-file`` the user named that is not there: fairseq logs "No existing checkpoint found" and
    trains from scratch, writing over ``--save-dir``'s checkpoints. The default (``checkpoint_last.pt`` in
    ``--save-dir``) may be missing: that is a first run."""
    restore = getattr(checkpoint, "restore_file", None)
    if not restore or restore == "checkpoint_last.pt" or os.path.isfile(restore):
        return
    where = " (a folder: give the checkpoint file in it)" if os.path.isdir(restore) else ""
    raise UserError(f"--restore-file {restore}: no such checkpoint{where}; fairseq would train from scratch and "
                    f"write over --save-dir's checkpoints. Give the checkpoint to continue from, or leave "
                    f"--restore-file out (checkpoint_last.pt of --save-dir, when there is one)")


def check_finetune_from_model(checkpoint) -> None:
    """Refuse a ``--finetune-from-model`` that is no checkpoint file (fairseq ended a missing one in a ``ValueError``
    with a traceback, and took a folder for a checkpoint it did not find: it trained from scratch), or that is given
    with an option it cannot go with (fairseq's ``ValueError``)."""
    model = getattr(checkpoint, "finetune_from_model", None)
    if not model:
        return
    restore = getattr(checkpoint, "restore_file", None)
    if restore and restore != "checkpoint_last.pt":
        raise UserError(f"--finetune-from-model {model} and --restore-file {restore} both name the checkpoint to start "
                        f"from: give one of them")
    resets = [f"--{name.replace('_', '-')}" for name in ("reset_optimizer", "reset_lr_scheduler", "reset_meters",
                                                          "reset_dataloader") if getattr(checkpoint, name, False)]
    if resets:
        raise UserError(f"--finetune-from-model resets the optimizer, the learning rate scheduler, the meters and the "
                        f"data loader itself: leave out {', '.join(resets)}")
    if not os.path.isfile(model):
        where = "a folder: give the checkpoint file in it" if os.path.isdir(model) else "no such file"
        raise UserError(f"--finetune-from-model {model}: {where}; fairseq would start from it only if it were a "
                        f"checkpoint file (a folder was taken for none, and training started from scratch)")


def check_half_precision(common) -> None:
    """Refuse half precision where fairseq cannot train in it: without a CUDA device or a TPU (on CPU it
    asserts, or takes the machine for a TPU)."""
    names = ("fp16", "bf16", "memory_efficient_fp16", "memory_efficient_bf16")
    flags = [f"--{name.replace('_', '-')}" for name in names if getattr(common, name, False)]
    if flags and getattr(common, "tpu", False) and importlib.util.find_spec("torch_xla") is not None:
        return  # a TPU (fairseq's --bf16 turns --tpu on by itself)
    if flags and (getattr(common, "cpu", False) or not torch.cuda.is_available()):
        where = ("with --cpu" if getattr(common, "cpu", False)
                 else "on this machine, which has no CUDA GPU PyTorch can use")
        raise UserError(f"{' '.join(flags)}: fairseq trains in half precision on a CUDA GPU only, not {where}; "
                        f"leave the flag out to train in float32")


# -- private parts read -------------------------------------------------------------------------------


def parser_option_names(parser) -> List[str]:
    """The destinations of every option of an argparse parser."""
    return [action.dest for action in parser._actions]


def epoch_iterator_is_cached(task, dataset) -> bool:
    """Whether fairseq's ``task.get_batch_iterator`` will return the epoch iterator it cached for ``dataset``."""
    return dataset in task.dataset_to_epoch_iter


def log_softmax_when_teacher_forced(method):
    """Marks a decoder's ``get_normalized_probs`` that is fairseq's own in teacher-forced passes (it differs at
    generation steps only), so that :func:`uses_default_log_softmax` accepts it."""
    method.log_softmax_when_teacher_forced = True
    return method


def uses_default_log_softmax(model) -> bool:
    """Whether ``model``'s log-probabilities are fairseq's default, ``log_softmax`` of its logits (the
    Transformer's ``get_normalized_probs`` only re-exports the default for TorchScript), in teacher-forced passes."""
    from fairseq.models import BaseFairseqModel, FairseqDecoder
    from fairseq.models.transformer import TransformerModelBase

    while isinstance(getattr(model, "module", None), torch.nn.Module):  # data-parallel wrappers
        model = model.module
    decoder = getattr(model, "decoder", None)
    defaults = (BaseFairseqModel.get_normalized_probs, TransformerModelBase.get_normalized_probs)
    return (isinstance(model, BaseFairseqModel) and isinstance(decoder, FairseqDecoder)
            and getattr(decoder, "adaptive_softmax", None) is None
            and type(model).get_normalized_probs in defaults
            and type(model).get_normalized_probs_scriptable is BaseFairseqModel.get_normalized_probs_scriptable
            and (type(decoder).get_normalized_probs is FairseqDecoder.get_normalized_probs
                 or getattr(type(decoder).get_normalized_probs, "log_softmax_when_teacher_forced", False))
            and type(decoder).get_normalized_probs_scriptable is FairseqDecoder.get_normalized_probs_scriptable)


def onednn_linear() -> Optional[Callable]:
    """torch's operator ``x weight^T + bias`` by oneDNN (``torch.ops.mkldnn._linear_pointwise(x, weight, bias,
    "none", [], "")``), or None in a torch built without it."""
    try:
        if torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise"):
            return torch.ops.mkldnn._linear_pointwise
    except (AttributeError, RuntimeError):  # pragma: no cover - builds without the op
        pass
    return None


def foreach_mul_(tensors: List[torch.Tensor], factor) -> None:
    """Multiply each of ``tensors`` (of one device and dtype) in place by ``factor`` (a number or a tensor of one
    element), in one call (``torch._foreach_mul_``) where torch has it."""
    multiply = getattr(torch, "_foreach_mul_", None)
    if multiply is not None:
        multiply(tensors, factor)
        return
    for tensor in tensors:  # pragma: no cover - a torch without it
        tensor.mul_(factor)


def version_counter(tensor: torch.Tensor) -> int:
    """How many times ``tensor`` has been changed in place (torch's ``Tensor._version``)."""
    return tensor._version


def non_persistent_buffer_names(module: torch.nn.Module) -> Set[str]:
    """The names of ``module``'s own buffers that its ``state_dict`` leaves out (``persistent=False``)."""
    return set(module._non_persistent_buffers_set)


def _check_private_parts() -> None:
    """Each private part of fairseq that :data:`CHANGES` reads or overrides must exist in the installed one."""
    from fairseq.optim.fp16_optimizer import FP16Optimizer
    from fairseq.tasks import FairseqTask
    from fairseq.tasks.translation import TranslationTask

    missing = []
    if not callable(getattr(TranslationTask, "_inference_with_bleu", None)):
        missing.append("fairseq.tasks.translation.TranslationTask._inference_with_bleu")
    if not re.search(r"self\.dataset_to_epoch_iter\b", inspect.getsource(FairseqTask)):
        missing.append("fairseq.tasks.FairseqTask.dataset_to_epoch_iter")
    build = getattr(FP16Optimizer, "build_fp32_params", None)
    if build is None or list(inspect.signature(build, follow_wrapped=False).parameters)[:3] != [
            "args", "params", "flatten"]:
        missing.append("fairseq.optim.fp16_optimizer.FP16Optimizer.build_fp32_params(args, params, flatten)")
    if missing:
        raise UnsupportedFairseq(
            f"the installed fairseq {getattr(fairseq, '__version__', '?')} lacks {', '.join(missing)}, which "
            f"fairseq-speaker relies on (fairseq_speaker/fairseq_patches.py): install a supported fairseq "
            f"({' or '.join(SUPPORTED_FAIRSEQ)})")
    missing = [name for name, present in (
        ("torch.Tensor._version", hasattr(torch.zeros(0), "_version")),
        ("torch.nn.Module._non_persistent_buffers_set", hasattr(torch.nn.Module(), "_non_persistent_buffers_set")),
        ("torch.nn.Module._load_from_state_dict", callable(getattr(torch.nn.Module, "_load_from_state_dict", None))),
    ) if not present]
    if missing:
        raise UnsupportedFairseq(
            f"the installed torch {torch.__version__} lacks {', '.join(missing)}, which fairseq-speaker relies on "
            f"(fairseq_speaker/fairseq_patches.py): install a torch this release supports (2.6 or later)")
