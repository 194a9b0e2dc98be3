"""What the package changes in fairseq, in one place (fairseq_speaker/fairseq_patches.py)."""

import ast
import importlib
import os
import subprocess
import sys

import pytest
import torch
from fairseq import checkpoint_utils
from fairseq import utils as fairseq_utils
from fairseq.optim import FairseqOptimizer
from fairseq.optim.fp16_optimizer import FP16Optimizer

from fairseq_speaker import fairseq_patches
from fairseq_speaker.fairseq_patches import CHANGES, UnsupportedFairseq, apply, check_fairseq_version

#: the page whose "Compatibility" section lists every change
COMPATIBILITY = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "extending.md")


def _installed():
    return (FairseqOptimizer.multiply_grads, FairseqOptimizer.step, fairseq_utils.clip_grad_norm_,
            checkpoint_utils.load_checkpoint_to_cpu, FP16Optimizer.build_fp32_params)


def test_apply_has_made_its_changes_once_and_a_second_call_changes_nothing():
    before = _installed()
    assert all(getattr(fn, "_fairseq_speaker_patch", False) for fn in before)
    apply()
    assert _installed() == before
    # the originals are fairseq's own, not an earlier wrapper of ours
    assert not any(getattr(fn, "_fairseq_speaker_patch", False) for fn in fairseq_patches.ORIGINALS.values())


def test_every_change_names_code_that_exists_and_the_docs_list_it():
    page = open(COMPATIBILITY, encoding="utf-8").read()
    section = page[page.index("## Compatibility"):]
    for change in CHANGES:
        assert f"`{change.target}`" in section, change.target
        first, *others = [name.strip() for name in change.where.split(",")]  # "module.name[, name ...]"
        module_name, _, name = first.rpartition(".")
        try:
            owner = importlib.import_module(module_name)
        except ModuleNotFoundError:  # a class's method: module.Class.method
            module_name, _, class_name = module_name.rpartition(".")
            owner = getattr(importlib.import_module(module_name), class_name)
        for attribute in [name, *others]:
            assert hasattr(owner, attribute), change.where


@pytest.mark.parametrize("version", ["0.12.2", "0.12.3", "0.12.3.1"])
def test_the_supported_fairseq_releases_pass(version):
    check_fairseq_version(version)


@pytest.mark.parametrize("version", ["0.13.0", "0.12.1", "0.12.20", "1.0.0a0"])
def test_another_fairseq_is_refused_saying_what_to_install(version, monkeypatch):
    monkeypatch.delenv(fairseq_patches.ANY_FAIRSEQ_VARIABLE, raising=False)
    with pytest.raises(UnsupportedFairseq, match=f"found fairseq {version}: pip install .*fairseq-fixed==0.12.3.1"):
        check_fairseq_version(version)
    monkeypatch.setenv(fairseq_patches.ANY_FAIRSEQ_VARIABLE, "1")
    check_fairseq_version(version)  # a warning only


def test_a_command_line_with_another_fairseq_ends_in_one_message_without_a_traceback():
    """fairseq-train (or one of ours) loading the package: its hook is installed before the version is checked."""
    code = ("import sys, fairseq; sys.argv[0] = '/venv/bin/fairseq-train'; fairseq.__version__ = '0.13.0'; "
            "import fairseq_speaker")
    env = {k: v for k, v in os.environ.items() if k != fairseq_patches.ANY_FAIRSEQ_VARIABLE}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1].startswith("error: fairseq-speaker supports fairseq 0.12.2")


def test_onboardings_lbfgs_is_not_touched_by_the_row_updates():
    """The row updates hook only the optimizers that fairseq's optimizers step."""
    x = torch.zeros(3, requires_grad=True)
    lbfgs = torch.optim.LBFGS([x], max_iter=2)

    def closure():
        lbfgs.zero_grad()
        loss = (x - 1).pow(2).sum()
        loss.backward()
        return loss

    lbfgs.step(closure)
    assert getattr(lbfgs, "_speaker_rows_hook", None) is None
    assert not lbfgs._optimizer_step_pre_hooks


# -- no other module reads a private part ---------------------------------------------------------------------

PACKAGE = os.path.join(os.path.dirname(__file__), "..", "..", "fairseq_speaker")
#: private reads outside the patch module not yet moved into it, with why
NOT_YET_MOVED: dict = {}  # (file, private name): why it is read there for now


def _private(obj) -> set:
    return {name for name in dir(obj) if name.startswith("_") and not name.startswith("__")}


def private_names() -> set:
    """The private attributes and methods of torch, its tensors and modules, argparse's parser and the fairseq
    classes the package builds on."""
    import argparse

    from fairseq.models import BaseFairseqModel, FairseqDecoder, FairseqEncoder, FairseqIncrementalDecoder
    from fairseq.search import BeamSearch, DiverseBeamSearch
    from fairseq.sequence_generator import EnsembleModel, SequenceGenerator
    from fairseq.tasks import FairseqTask
    from fairseq.tasks.translation import TranslationTask
    from fairseq.trainer import Trainer

    owners = (torch, torch.Tensor, torch.zeros(0), torch.nn.Module(), torch.nn.Linear(1, 1), torch.optim.Optimizer,
              argparse.ArgumentParser(), FairseqTask, TranslationTask, BaseFairseqModel, FairseqDecoder,
              FairseqEncoder, FairseqIncrementalDecoder, FairseqOptimizer, Trainer, SequenceGenerator, EnsembleModel,
              BeamSearch, DiverseBeamSearch)
    return set().union(*(_private(owner) for owner in owners))


def _chain(node) -> list:
    """``torch.ops.mkldnn._x`` -> ["torch", "ops", "mkldnn", "_x"] (empty if it is not a chain of names)."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    return [node.id, *reversed(parts)] if isinstance(node, ast.Name) else []


def private_reads(source: str, private: set, overridden: set) -> list:
    """``(line, name)`` of each private part of torch or fairseq that ``source`` reads: an attribute among ``private``
    (not one the module sets itself, on any object: its own classes' attributes), a private part of a chain starting
    at ``torch`` or ``fairseq`` (``getattr``/``hasattr`` of a private name on one included), or a private method
    overridden (``def`` in a class, and its ``super()`` call) that is not among ``overridden`` (``Class.method``)."""
    tree = ast.parse(source)
    own = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store)}
    found = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for method in cls.body:
            if isinstance(method, ast.FunctionDef) and method.name in private and \
                    f"{cls.name}.{method.name}" not in overridden:
                found.append((method.lineno, method.name))
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            chain = _chain(node)
            if chain[:1] in (["torch"], ["fairseq"]) and any(p.startswith("_") and not p.startswith("__")
                                                             for p in chain[1:]):
                found.append((node.lineno, ".".join(chain)))
            elif node.attr in private and node.attr not in own and not (  # super() of an override in the ledger
                    isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "super"
                    and node.attr in {name.split(".")[-1] for name in overridden}):
                found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr") and \
                len(node.args) >= 2 and _chain(node.args[0])[:1] in (["torch"], ["fairseq"]) and \
                isinstance(node.args[1], ast.Constant) and str(node.args[1].value).startswith("_"):
            found.append((node.lineno, node.args[1].value))
    return sorted(set(found))


def test_no_module_but_the_patch_module_reads_a_private_part_of_torch_or_fairseq():
    private = private_names()
    overridden = {".".join(change.where.split(".")[-2:]) for change in CHANGES if change.kind == "overridden"}
    found = []
    for folder, _, names in os.walk(PACKAGE):
        for name in names:
            path = os.path.join(folder, name)
            where = os.path.relpath(path, PACKAGE).replace(os.sep, "/")
            if not name.endswith(".py") or where == "fairseq_patches.py":
                continue
            found += [f"fairseq_speaker/{where}:{line}: {part}" for line, part in
                      private_reads(open(path, encoding="utf-8").read(), private, overridden)
                      if (where, part) not in NOT_YET_MOVED]
    assert found == [], "read these through fairseq_speaker/fairseq_patches.py (a Change in CHANGES):\n" + \
        "\n".join(found)


@pytest.mark.parametrize("source", [
    "import torch\ntorch._foreach_mul_(grads, 2)\n",
    "import torch\nop = torch.ops.mkldnn._linear_pointwise\n",
    "import torch\nok = hasattr(torch.ops.mkldnn, '_linear_pointwise')\n",
    "def f(t):\n    return t._version\n",
    "def f(module):\n    del module._parameters['bias']\n",
    "class A(torch.nn.Module):\n    def _load_from_state_dict(self, *args):\n        pass\n",
    "class A(Task):\n    def f(self):\n        return super()._inference_with_bleu(1, 2, 3)\n",
])
def test_the_check_sees_a_private_read(source):
    assert private_reads(source, private_names(), set()) != []


def test_the_check_leaves_the_package_own_names_and_ledgered_overrides():
    source = ("class A(torch.nn.Module):\n"
              "    def __init__(self):\n        self._base = 1\n"
              "    def size(self):\n        return self._base\n"
              "    def _load_from_state_dict(self, *args):\n        super()._load_from_state_dict(*args)\n")
    assert private_reads(source, private_names(), {"A._load_from_state_dict"}) == []
