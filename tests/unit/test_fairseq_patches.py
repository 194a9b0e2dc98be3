"""What the package changes in fairseq, in one place (fairseq_speaker/fairseq_patches.py)."""

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
