"""Memory accounting for training, against the tensors of real fairseq updates on the CPU."""

import os
import re
import shlex
import warnings

import pytest
import torch
from fairseq import optim
from fairseq.dataclass.utils import convert_namespace_to_omegaconf
from fairseq.models import ARCH_MODEL_REGISTRY
from fairseq.optim.lr_scheduler import build_lr_scheduler

from fairseq_speaker.analysis.meta_model import build_meta_model, model_options
from fairseq_speaker.analysis.parameter_accounting import main
from fairseq_speaker.analysis.parameter_counts import count_parameters
from fairseq_speaker.analysis.training_memory import OPTIMIZER_STATE, human_bytes, parse_size, training_memory
from fairseq_speaker.models import get_family
from tests.helpers import TINY_MODELS, make_task, random_batch

TINY = get_family("lstm").scale_args("tiny") + ["--lr", "0.001"]
TINY_T = [a for k, v in TINY_MODELS["transformer"].items() for a in (f"--{k.replace('_', '-')}", str(v))] + [
    "--lr", "0.001"]
PARTS = ("weights", "gradients", "master", "optimizer_state", "snapshot", "checkpoint")


def nbytes(tensors):
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def saved_bytes(obj, seen=None):
    """Bytes torch.save writes for the tensors in ``obj``: each storage once."""
    seen = {} if seen is None else seen
    if torch.is_tensor(obj):
        storage = obj.untyped_storage()
        seen[storage.data_ptr()] = storage.nbytes()
    elif isinstance(obj, dict):
        for value in obj.values():
            saved_bytes(value, seen)
    elif isinstance(obj, (list, tuple)):
        for value in obj:
            saved_bytes(value, seen)
    return sum(seen.values())


def fairseq_config(arch, flags):
    args = model_options(arch, flags)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return args, convert_namespace_to_omegaconf(args)


def tensors_in(state):
    """The tensors of an optimizer state, nested ones included (the counters of the speaker tables in an fp32
    copy of --fp16/--bf16, by offset)."""
    for value in state.values():
        if torch.is_tensor(value):
            yield value
        elif isinstance(value, dict):
            yield from tensors_in(value)


def real_update(arch, args, cfg, num_speakers):
    """A real model on the CPU after one update by fairseq's optimizer (wrapped as fairseq-train wraps it) and one
    validation of the lr scheduler: the bytes of each part, summed from the tensors that exist."""
    torch.manual_seed(0)
    task = make_task(num_speakers)
    model = ARCH_MODEL_REGISTRY[arch].build_model(args, task).train()
    if args.fp16:
        model.half()
    params = [p for p in model.parameters() if p.requires_grad]
    if args.memory_efficient_fp16:
        optimizer = optim.MemoryEfficientFP16Optimizer.build_optimizer(cfg, params)
    elif args.fp16:
        optimizer = optim.FP16Optimizer.build_optimizer(cfg, params)
    else:
        optimizer = optim.build_optimizer(cfg.optimizer, params)
    src = random_batch(task.source_dictionary, [5, 3, 4, 4, 2])
    tgt = random_batch(task.target_dictionary, [4, 4, 2, 3, 5], left_pad=False)
    speakers = torch.arange(5) % num_speakers
    logits = model(src, torch.tensor([5, 3, 4, 4, 2]), tgt, speakers=speakers)[0]
    optimizer.backward(logits.float().log_softmax(-1).sum())
    measured = {
        "weights": nbytes(model.parameters()) + nbytes(model.buffers()),
        "gradients": nbytes(p.grad for p in model.parameters()),  # before the step: the first update's gradients
        "master": sum(nbytes([p, p.grad]) for p in optimizer.fp32_params) if hasattr(optimizer, "fp32_params") else 0,
    }
    optimizer.step()
    state = [v for s in optimizer.optimizer.state.values() for v in tensors_in(s)]
    measured["optimizer_state"] = nbytes(state)
    scheduler = build_lr_scheduler(cfg.lr_scheduler, optimizer)
    scheduler.step(1, 1.0)  # a first validation: restart_from_best takes its copy
    measured["snapshot"] = nbytes(getattr(scheduler, "snapshot", None) or [])
    checkpoint = {"model": model.state_dict(), "optimizer_history": [{"lr_scheduler_state": scheduler.state_dict()}]}
    if not args.no_save_optimizer_state:  # what fairseq's Trainer.state_dict puts in a checkpoint
        checkpoint["last_optimizer_state"] = optimizer.state_dict()
    measured["checkpoint"] = saved_bytes(checkpoint)
    return measured


def accounted(arch, flags, num_speakers):
    task = make_task(num_speakers)
    built = build_meta_model(len(task.source_dictionary), len(task.target_dictionary), num_speakers, arch, flags)
    return training_memory(built.model, built.args)


CASES = [("lstm_full_bias", ["--optimizer", name]) for name in sorted(OPTIMIZER_STATE)] + [
    ("lstm_full_bias", ["--optimizer", "adam", "--speaker-dense-updates"]),
    ("lstm_full_bias", ["--optimizer", "adam", "--lr-scheduler", "fixed", "--no-save-optimizer-state"]),
    ("lstm_fact_bias", ["--optimizer", "sgd", "--momentum", "0.9"]),
    ("lstm_full_bias", ["--optimizer", "adam", "--fp16", "--fp16-no-flatten-grads"]),  # flat needs CUDA
    ("lstm_full_bias", ["--optimizer", "adam", "--memory-efficient-fp16"]),
    ("transformer_fact_bias", ["--optimizer", "adam", *TINY_T]),  # buffers, some of them not saved
]


@pytest.mark.parametrize("arch,flags", CASES, ids=[" ".join([arch, *f[1:3]]) for arch, f in CASES])
def test_the_accounting_is_what_one_real_fairseq_update_holds(arch, flags):
    """Every part, at two speaker counts: so the shared bytes and what one more speaker costs are right too."""
    # a case that gives its model's sizes keeps them; the others are tiny LSTMs
    flags = ([] if "--encoder-embed-dim" in flags else TINY) + ["--lr-scheduler", "restart_from_best"] + flags
    memory = accounted(arch, flags, 3)
    args, cfg = fairseq_config(arch, flags)
    measured = {s: real_update(arch, args, cfg, s) for s in (3, 5)}
    for part in PARTS:
        cost = getattr(memory, part)
        for s in (3, 5):
            assert cost.at(s) == measured[s][part], (part, s)
        assert measured[5][part] - measured[3][part] == 2 * cost.per_speaker, part
    assert memory.total.at(3) == sum(measured[3][p] for p in PARTS if p != "checkpoint")
    assert memory.total.per_speaker * 3 + memory.total.shared == memory.total.at(3)


def test_fp16_keeps_an_fp32_master_copy_and_memory_efficient_fp16_none():
    adam = TINY + ["--optimizer", "adam", "--lr-scheduler", "restart_from_best"]
    fp32, fp16, efficient = (accounted("lstm_full_bias", adam + f, 4) for f in
                             ([], ["--fp16", "--fp16-no-flatten-grads"], ["--memory-efficient-fp16"]))
    per = fp32.parameters.per_speaker
    assert (fp32.weights.per_speaker, fp16.weights.per_speaker, efficient.weights.per_speaker) == (4 * per, 2 * per,
                                                                                                   2 * per)
    assert (fp32.master.per_speaker, fp16.master.per_speaker, efficient.master.per_speaker) == (0, 8 * per, 0)
    # restart_from_best copies the optimizer's parameters: the fp32 master copy, or the fp16 weights
    assert (fp32.snapshot.per_speaker, fp16.snapshot.per_speaker, efficient.snapshot.per_speaker) == (4 * per, 4 * per,
                                                                                                      2 * per)


def test_memory_efficient_fp16_is_refused_for_an_optimizer_fairseq_refuses(capsys):
    args = model_options("lstm_base", TINY + ["--optimizer", "sgd", "--memory-efficient-fp16"])
    with pytest.raises(ValueError, match="Unsupported optimizer"):  # fairseq's own refusal
        optim.MemoryEfficientFP16Optimizer.build_optimizer(convert_namespace_to_omegaconf(args),
                                                           [torch.nn.Parameter(torch.zeros(2))])
    with pytest.raises(SystemExit):
        main(["--tgt-vocab", "100", "--speakers", "4", "--optimizer", "sgd", "--memory-efficient-fp16"])
    assert "fairseq's --memory-efficient-fp16 does not support --optimizer sgd" in capsys.readouterr().err


def test_a_million_full_bias_speakers_are_accounted_without_memory_and_do_not_fit(capsys):
    V, S = 40000, 1_000_000
    main(["--tgt-vocab", str(V), "--speakers", str(S), "--arch", "lstm_full_bias", "--memory-budget", "80GB"])
    out = capsys.readouterr().out
    # fp32 Adam with restart_from_best: weights 4, gradient 4, two moments 8, CPU copy 4 bytes a parameter, and
    # the row's step count (8 bytes) of the row-sparse table; a checkpoint: weights, moments, copy
    per_speaker, saved = V * (4 + 4 + 8 + 4) + 8, V * (4 + 8 + 4) + 8
    base = count_parameters(V, V, 1, "lstm_base").base  # the paper's count, tested in test_parameter_accounting
    one = re.sub(r"\s+", " ", out[out.index("one more speaker"):])
    assert f"one more speaker: {V:,} parameters; in training {per_speaker:,} bytes" in one
    assert f"in a checkpoint {saved:,} bytes" in one
    most = (80 * 10**9 - 20 * base) // per_speaker
    assert f"{S:,} speakers do not fit: training needs {human_bytes(20 * base + S * per_speaker)}; " \
           f"at most {most:,} speakers fit" in one
    assert re.search(rf"\n +{S:,} +{re.escape(human_bytes(20 * base + S * per_speaker))} ", out)


def test_more_speaker_counts_add_rows(capsys):
    main(["--tgt-vocab", "1000", "--src-vocab", "900", "--speakers", "10", "2500", "--arch", "lstm_fact_bias",
          "--optimizer", "sgd", "--lr-scheduler", "fixed"])
    out = capsys.readouterr().out
    assert "lstm_fact_bias (speaker bias 'fact')" in out and "optimizer: sgd, no state" in out
    rows = re.findall(r"\n +([\d,]+) +[\d.]+ [kMGT]?B +[\d.]+ [kMGT]?B +[\d.]+ [kMGT]?B", out)
    assert rows == ["10", "1,000", "2,500", "100,000", "1,000,000"]
    assert "restart_from_best" not in out and "CPU memory" not in out


def test_sizes():
    assert parse_size("80GB") == 80 * 10**9 and parse_size("16GiB") == 16 * 2**30
    assert parse_size("512M") == 512 * 10**6 and parse_size("1000") == 1000 and parse_size("1.5 tb") == 1.5e12
    with pytest.raises(ValueError, match="not a size"):
        parse_size("lots")
    assert [human_bytes(n) for n in (999, 160_000, 1_300_000_000)] == ["999 B", "160.0 kB", "1.3 GB"]


def test_the_documented_example_is_what_the_command_prints(capsys):
    page = open(os.path.join(os.path.dirname(__file__), "..", "..", "docs", "benchmarks.md"), encoding="utf-8").read()
    command = re.search(r"\n    fairseq-speaker-params (--tgt-vocab 40000 [^\n]*--memory-budget[^\n]*)\n", page)
    main(shlex.split(command[1]))
    printed = capsys.readouterr().out
    shown = page[command.end():].split("prints, after the parameter tables:\n\n", 1)[1]
    block = re.match(r"(?:(?:    .*)?\n)+", shown)[0]  # the indented lines and the empty ones among them
    lines = [line[4:] for line in block.rstrip("\n").split("\n")]
    assert printed[printed.index("training memory"):].rstrip("\n").split("\n") == lines
