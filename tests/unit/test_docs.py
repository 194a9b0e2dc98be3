"""The variants written out in the README and the pages of docs/ work as the text says."""

import os
import subprocess
import sys
import textwrap

import pytest

from tests.documents import ROOT, documents, python_blocks

#: the blocks that write out a variant (the others are run by the tests of their features: the README's
#: SpeakerTranslator example by tests/integration/test_serving.py)
BLOCKS = [(path, i, code) for path in documents() for i, code in enumerate(python_blocks(path))
          if "register_speaker_bias" in code]

CHECK = textwrap.dedent("""
    import argparse
    import torch
    from fairseq import options
    from tests.helpers import FAMILIES, build_bias, expected_parameters, make_model, make_task

    task = make_task(num_speakers=5)
    bias = build_bias("scaled", task)
    assert sum(p.numel() for p in bias.parameters()) == expected_parameters(bias)
    assert bias(torch.tensor([0, 3, -1])).shape == (3, len(task.target_dictionary))
    assert set(bias.speaker_parameters()) == {"scales"}
    for family in FAMILIES:
        make_model("scaled", task=task, family=family)
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "data", "--task", "speaker_translation", "--arch", "transformer_base", "--speaker-bias", "scaled",
        "--scaled-init", "0.1"])
    assert args.scaled_init == 0.1
    print("ok")
""")


def test_the_variant_guide_writes_out_a_variant():
    assert "docs/bias_variants.md" in [path for path, _, _ in BLOCKS]


@pytest.mark.parametrize("path,index,code", BLOCKS, ids=[f"{p}:{i}" for p, i, _ in BLOCKS])
def test_the_documented_variant_registers_builds_and_is_a_flag_of_every_family(path, index, code):
    proc = subprocess.run([sys.executable, "-c", code + CHECK], cwd=ROOT, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
