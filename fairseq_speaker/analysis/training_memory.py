"""Memory accounting for training: what a model costs in bytes with fairseq's optimizers, and what a speaker costs.

For a model (built on the ``meta`` device by ``fairseq-speaker-params``, so nothing is allocated) and
fairseq-train's options, in bytes, shared by all speakers and for each speaker:

- weights (and buffers) in the model's dtype, and their gradients (a speaker table's row-sparse
  gradient is dense at its first update: counted dense);
- with ``--fp16`` / ``--bf16``, fairseq's ``FP16Optimizer`` keeps an fp32 master copy of the weights
  and of their gradients beside the half-precision model; ``--memory-efficient-fp16`` keeps none;
- the optimizer's state (:data:`OPTIMIZER_STATE`), always fp32: on the fp32 weights, on the fp32
  master copy, or, memory-efficient, by fairseq's own optimizers which keep it in fp32; plus, with
  row-sparse Adam updates of a speaker table, a step count per row
  (:mod:`fairseq_speaker.optim.speaker_rows`);
- ``restart_from_best``'s copy of the optimizer's parameters, in CPU memory
  (:mod:`fairseq_speaker.lr_schedulers.restart_from_best`);
- a checkpoint: the weights (persistent buffers), the optimizer state (unless
  ``--no-save-optimizer-state``) and the scheduler's state, which holds that copy.

Activations, the batch, and the framework's own overhead (allocator, CUDA context) are not counted.
"""

import math
import re
import textwrap
import warnings
from dataclasses import dataclass
from typing import TYPE_CHECKING, Dict, Iterable, List, Optional, Tuple

import torch
from torch import nn

from fairseq_speaker.errors import UserError
from fairseq_speaker.fairseq_patches import non_persistent_buffer_names
from fairseq_speaker.optim.lr_scale import dense_scale_applies, parse_lr_scale

if TYPE_CHECKING:
    from fairseq.models import BaseFairseqModel

    from fairseq_speaker.modules.speaker_bias import SpeakerBias

#: bytes of a speaker table row's step count kept by row-sparse Adam (``row_step``, a long)
ROW_STEP_BYTES = 8
#: bytes of the 0-dim float32 step count torch's Adagrad and Adadelta keep per parameter tensor
STEP_TENSOR_BYTES = 4
#: speaker counts the report always shows
SCALE = (1_000, 100_000, 1_000_000)


@dataclass(frozen=True)
class OptimizerState:
    """The state an optimizer keeps for each parameter: tensors of the parameter's size."""

    tensors: Tuple[str, ...]
    step_tensor: bool = False  # torch's Adagrad and Adadelta: also a 0-dim step count per parameter tensor
    needs_momentum: bool = False  # torch's SGD keeps its buffer only with --momentum > 0

    def names(self, momentum: float) -> Tuple[str, ...]:
        return () if self.needs_momentum and not momentum else self.tensors


#: fairseq's optimizers (``--optimizer``) and their state
OPTIMIZER_STATE: Dict[str, OptimizerState] = {
    "adam": OptimizerState(("exp_avg", "exp_avg_sq")),
    "adamax": OptimizerState(("exp_avg", "exp_inf")),
    "nag": OptimizerState(("momentum_buffer",)),
    "sgd": OptimizerState(("momentum_buffer",), needs_momentum=True),
    "adagrad": OptimizerState(("sum",), step_tensor=True),
    "adadelta": OptimizerState(("square_avg", "acc_delta"), step_tensor=True),
}


@dataclass
class Cost:
    """Bytes (or parameters) shared by all speakers, and those of each speaker."""

    shared: int = 0
    per_speaker: int = 0

    def at(self, speakers: int) -> int:
        return self.shared + self.per_speaker * speakers

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.shared + other.shared, self.per_speaker + other.per_speaker)


@dataclass
class TrainingSetup:
    """What besides the model decides the memory of training: fairseq-train's options."""

    optimizer: str
    state: Tuple[str, ...]  # state tensors per parameter
    step_tensor: bool
    lr_scheduler: str
    snapshot: bool  # the scheduler keeps a copy of the parameters (restart_from_best)
    half: Optional[str]  # "fp16", "bf16" or None (fp32)
    memory_efficient: bool  # no fp32 master copy
    flatten: bool  # FP16Optimizer's master copy is one flat tensor
    row_sparse: Optional[str]  # how speaker tables are updated row by row ("adam", "sgd"), None: dense
    save_optimizer_state: bool
    dense_kind: str = "adam"  # the optimizer's family for a dense step's scale (lr_scale.dense_kind)

    @property
    def master(self) -> bool:
        """Whether fairseq's FP16Optimizer keeps an fp32 master copy of the weights and gradients."""
        return self.half is not None and not self.memory_efficient

    @classmethod
    def from_args(cls, args) -> "TrainingSetup":
        """The setup of fairseq-train's options ``args`` (``--optimizer``, ``--lr-scheduler``, ``--fp16``, ...),
        refused where fairseq-train would refuse it."""
        from fairseq.optim.lr_scheduler import LR_SCHEDULER_REGISTRY

        from fairseq_speaker.lr_schedulers.restart_from_best import RestartFromBestSchedule
        from fairseq_speaker.optim.lr_scale import dense_kind
        from fairseq_speaker.optim.row_updates import dense_reason, optimizer_kind

        name = args.optimizer
        if name not in OPTIMIZER_STATE:
            known = ", ".join(sorted(OPTIMIZER_STATE))
            raise UserError(f"training memory needs an --optimizer of {known}" if name is None else
                            f"no table of the state of --optimizer {name}; known: {known}")
        probe = fairseq_optimizer(args)
        group = probe.optimizer.param_groups[0]
        half = "bf16" if args.bf16 else "fp16" if args.fp16 else None
        efficient = bool(args.memory_efficient_fp16 or args.memory_efficient_bf16)
        flatten = not args.fp16_no_flatten_grads and not args.bf16
        if half and efficient and not probe.supports_memory_efficient_fp16:
            raise UserError(f"fairseq's --memory-efficient-{half} does not support --optimizer {name}")
        if half and not efficient and flatten and not probe.supports_flat_params:
            raise UserError(f"fairseq's --{half} flattens the parameters, which --optimizer {name} does not support: "
                            f"add --fp16-no-flatten-grads")
        kind = optimizer_kind(probe.optimizer)
        # FP16Optimizer steps on fp32 copies of the parameters: the speaker tables are updated as dense ones
        sparse = (kind is not None and dense_reason(probe.optimizer, group) is None
                  and not (half and not efficient) and args.distributed_world_size <= 1)
        return cls(
            optimizer=name,
            state=OPTIMIZER_STATE[name].names(group.get("momentum", 0.0)),
            step_tensor=OPTIMIZER_STATE[name].step_tensor,
            lr_scheduler=args.lr_scheduler,
            snapshot=LR_SCHEDULER_REGISTRY.get(args.lr_scheduler) is RestartFromBestSchedule,
            half=half,
            memory_efficient=efficient and half is not None,
            flatten=flatten,
            row_sparse=kind if sparse else None,
            save_optimizer_state=not args.no_save_optimizer_state,
            dense_kind=dense_kind(probe.optimizer),
        )


def fairseq_optimizer(args):
    """fairseq's optimizer of ``args``, built on one parameter: fairseq's own defaults and what it supports."""
    from fairseq import optim
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    with warnings.catch_warnings():  # hydra's deprecation notices
        warnings.simplefilter("ignore")
        cfg = convert_namespace_to_omegaconf(args)
    return optim.build_optimizer(cfg.optimizer, [nn.Parameter(torch.zeros(1))])


@dataclass
class TrainingMemory:
    """Bytes of training a model, shared by all speakers and per speaker."""

    setup: TrainingSetup
    num_speakers: int
    parameters: Cost  # parameters (not bytes)
    weights: Cost  # the model's parameters and buffers, in its dtype
    gradients: Cost
    master: Cost  # FP16Optimizer's fp32 copy of the weights and of their gradients
    optimizer_state: Cost
    snapshot: Cost  # restart_from_best's copy of the parameters, in CPU memory
    checkpoint: Cost  # what a checkpoint saves: weights, optimizer state, the scheduler's copy
    largest: Tuple[str, int]  # the largest parameter: name, elements
    buffers: int = 0  # bytes of the buffers among the weights
    row_sparse_tables: int = 0  # speaker tables updated row by row

    @property
    def device(self) -> Cost:
        """On the training device: weights, gradients, master copy and optimizer state."""
        return self.weights + self.gradients + self.master + self.optimizer_state

    @property
    def total(self) -> Cost:
        return self.device + self.snapshot


def _speaker_tables(bias: "SpeakerBias") -> Dict[int, Tuple[bool, "SpeakerBias"]]:
    """id of every speaker parameter ``[S, ...]`` of a speaker bias -> whether its optimizer may update it row
    by row (the variant's ``row_sparse_parameter_names``, unless ``--speaker-dense-updates``), and its variant."""
    return {id(variant.get_parameter(name)): (name in variant.row_sparse_parameter_names and variant._sparse_updates(),
                                              variant)
            for _, variant in bias.named_variants() for name in variant.speaker_parameter_names}


def _buffers(model: nn.Module) -> Iterable[Tuple[torch.Tensor, bool]]:
    """Every buffer once, with whether it is saved in the model's ``state_dict``."""
    seen = set()
    for module in model.modules():
        transient = non_persistent_buffer_names(module)
        for name, buf in module.named_buffers(recurse=False):
            if id(buf) not in seen:
                seen.add(id(buf))
                yield buf, name not in transient


def training_memory(model: "BaseFairseqModel", args) -> TrainingMemory:
    """The memory of training ``model`` (any device, ``meta`` included) with fairseq-train's options ``args``."""
    setup = TrainingSetup.from_args(args)
    bias = model.decoder.speaker_bias
    tables = _speaker_tables(bias)
    weight = 2 if setup.half else 4
    master = 8 if setup.master else 0
    state = 4 * len(setup.state)
    snapshot = (4 if setup.half is None or setup.master else 2) if setup.snapshot else 0

    frozen, trained, per_speaker, row_sparse, dense_scaled, tensors = 0, 0, 0, 0, 0, 0
    largest = ("", 0)
    for name, p in model.named_parameters():  # a tied parameter once
        largest = max(largest, (name, p.numel()), key=lambda x: x[1])
        if not p.requires_grad:
            frozen += p.numel()
            continue
        tensors += 1
        if id(p) in tables:
            per_speaker += torch.Size(p.shape[1:]).numel()
            may_be_sparse, variant = tables[id(p)]
            sparse = setup.row_sparse is not None and may_be_sparse
            row_sparse += sparse
            # a dense step scaled by --speaker-lr-scale counts each row's updates too: on fp32 weights or on
            # --fp16/--bf16's fp32 copies, not on --memory-efficient-fp16's half-precision weights
            scale = parse_lr_scale(getattr(variant.cfg, "speaker_lr_scale", None)) or "auto"
            dense_scaled += (not sparse and (setup.half is None or setup.master)
                             and dense_scale_applies(setup.dense_kind, scale))
        else:
            trained += p.numel()
    buffers = persistent = 0
    for buf, saved in _buffers(model):
        size = buf.numel() * (weight if buf.is_floating_point() else buf.element_size())
        buffers += size
        persistent += size if saved else 0
    step_tensors = (1 if setup.master and setup.flatten else tensors) if setup.step_tensor and setup.state else 0

    row_steps = (row_sparse if setup.row_sparse == "adam" else 0) + dense_scaled
    optimizer_state = Cost(state * trained + STEP_TENSOR_BYTES * step_tensors,
                           state * per_speaker + ROW_STEP_BYTES * row_steps)
    copy = Cost(snapshot * trained, snapshot * per_speaker)
    saved_state = optimizer_state if setup.save_optimizer_state else Cost()
    return TrainingMemory(
        setup=setup,
        num_speakers=bias.num_speakers,
        parameters=Cost(trained + frozen, per_speaker),
        weights=Cost(weight * (trained + frozen) + buffers, weight * per_speaker),
        gradients=Cost(weight * trained, weight * per_speaker),
        master=Cost(master * trained, master * per_speaker),
        optimizer_state=optimizer_state,
        snapshot=copy,
        checkpoint=Cost(weight * (trained + frozen) + persistent, weight * per_speaker) + saved_state + copy,
        largest=largest,
        buffers=buffers,
        row_sparse_tables=row_sparse,
    )


# -- the report ------------------------------------------------------------------------------------
UNITS = ("B", "kB", "MB", "GB", "TB", "PB")


def human_bytes(n: float) -> str:
    """``n`` bytes in decimal units: 999 B, 160.0 kB, 1.3 GB."""
    if n < 1000:
        return f"{int(n)} B"
    power = min(int(math.log10(n) // 3), len(UNITS) - 1)
    return f"{n / 1000 ** power:.1f} {UNITS[power]}"


def parse_size(text: str) -> int:
    """Bytes of a size such as ``80GB``, ``16GiB``, ``512M`` or ``1000000``."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([kmgtp]?)(i?)b?\s*", text, re.IGNORECASE)
    if not match:
        raise UserError(f"not a size: {text!r} (e.g. 80GB, 16GiB, 512MB)")
    power = "_kmgtp".index(match[2].lower()) if match[2] else 0
    return int(float(match[1]) * (1024 if match[3] else 1000) ** power)


def _describe(setup: TrainingSetup) -> List[str]:
    state = f"state {', '.join(setup.state)} (fp32)" if setup.state else "no state"
    precision = (f"{setup.half} weights and gradients, no fp32 copy (--memory-efficient-{setup.half})"
                 if setup.memory_efficient else
                 f"{setup.half} weights and gradients, and an fp32 master copy of both (--{setup.half})"
                 if setup.half else "fp32")
    scheduler = ", a copy of the parameters in CPU memory" if setup.snapshot else ""
    return [f"  optimizer: {setup.optimizer}, {state}",
            f"  lr scheduler: {setup.lr_scheduler}{scheduler}",
            f"  precision: {precision}"]


def _note(text: str) -> str:
    return textwrap.fill(text, width=110, initial_indent="  ", subsequent_indent="   ")


WIDTH = 20


def _row(label: str, cost: Cost, speakers: int) -> str:
    return (f"  {label:<42}{human_bytes(cost.shared):>{WIDTH}}{human_bytes(cost.per_speaker * speakers):>{WIDTH}}"
            f"{human_bytes(cost.at(speakers)):>{WIDTH}}")


def format_memory(memory: TrainingMemory, speakers: Iterable[int] = (), budget: Optional[int] = None) -> str:
    """The memory report: by part, for one more speaker, for more speakers, and against ``budget`` bytes."""
    s, setup = memory.num_speakers, memory.setup
    state_label = f"optimizer state ({', '.join(setup.state)})" if setup.state else "optimizer state"
    parts = [("weights and buffers" if memory.buffers else "weights", memory.weights),
             ("gradients", memory.gradients)]
    if setup.master:
        parts.append(("fp32 master copy of weights and gradients", memory.master))
    parts.append((state_label, memory.optimizer_state))
    if setup.snapshot:
        parts.append((f"{setup.lr_scheduler}'s copy (CPU memory)", memory.snapshot))
    saved = ["the weights"] + (["the optimizer state"] if setup.save_optimizer_state else []) + (
        [f"{setup.lr_scheduler}'s copy (once it has taken one, at the first validation)"] if setup.snapshot else [])
    lines = ["training memory, per training process (activations and batches not included):", *_describe(setup),
             f"  {'':<42}{'shared':>{WIDTH}}{f'{s:,} speakers':>{WIDTH}}{'total':>{WIDTH}}"]
    lines += [_row(label, cost, s) for label, cost in parts]
    lines.append(_row("training total", memory.total, s))
    if setup.snapshot:
        lines.append(_row("  of which on the training device", memory.device, s))
    lines.append(_row("checkpoint", memory.checkpoint, s))
    notes = ["shared: the network and what all speakers share; a checkpoint saves "
             f"{', '.join(saved[:-1])}{' and ' if len(saved) > 1 else ''}{saved[-1]}"]
    if setup.row_sparse == "adam" and memory.row_sparse_tables:
        notes.append(f"a speaker's optimizer state includes the step count of its row, {ROW_STEP_BYTES} bytes a table")
    if memory.row_sparse_tables:
        notes.append(f"speaker tables are updated row by row ({setup.row_sparse}): their gradient is counted dense, "
                     f"as at the first update; afterwards it holds the batch's rows")
    if setup.memory_efficient:
        name, numel = memory.largest
        notes.append(f"each update also makes fp32 copies of one parameter and its gradient at a time: "
                     f"up to {human_bytes(8 * numel)} more, for the largest, {name}")
    lines += [_note(f"({note})") for note in notes]
    lines += ["", _note(_one_speaker(memory)), "",
              f"  {'speakers':>12}{'training':>{WIDTH}}{'on device':>{WIDTH}}{'checkpoint':>{WIDTH}}"]
    for n in sorted({s, *SCALE, *speakers}):
        lines.append(f"  {n:>12,}{human_bytes(memory.total.at(n)):>{WIDTH}}{human_bytes(memory.device.at(n)):>{WIDTH}}"
                     f"{human_bytes(memory.checkpoint.at(n)):>{WIDTH}}")
    if budget is not None:
        lines += ["", _note(fits(memory, budget))]
    return "\n".join(lines)


def _one_speaker(memory: TrainingMemory) -> str:
    setup = memory.setup
    parts = [("weights", memory.weights), ("gradient", memory.gradients)]
    if setup.master:
        parts.append(("fp32 master copy", memory.master))
    parts.append(("optimizer state", memory.optimizer_state))
    if setup.snapshot:
        parts.append((f"{setup.lr_scheduler}'s copy", memory.snapshot))
    itemized = ", ".join(f"{label} {cost.per_speaker:,}" for label, cost in parts)
    total, saved = memory.total.per_speaker, memory.checkpoint.per_speaker
    return (f"one more speaker: {memory.parameters.per_speaker:,} parameters; in training {total:,} bytes "
            f"({human_bytes(total)}: {itemized}); in a checkpoint {saved:,} bytes ({human_bytes(saved)})")


def fits(memory: TrainingMemory, budget: int) -> str:
    """Whether training fits in ``budget`` bytes, and how many speakers would."""
    s, need, total = memory.num_speakers, memory.total.at(memory.num_speakers), memory.total
    head = f"memory budget {human_bytes(budget)} (for the training total, device and CPU memory): "
    if budget < total.shared:
        return head + f"does not fit: the shared part alone needs {human_bytes(total.shared)}"
    most = (budget - total.shared) // total.per_speaker if total.per_speaker else None
    verdict = f"fit ({human_bytes(need)})" if need <= budget else f"do not fit: training needs {human_bytes(need)}"
    room = f"at most {most:,} speakers fit" if most is not None else "any number of speakers fits"
    return head + f"{s:,} speakers {verdict}; {room}"
