"""fairseq-speaker-doctor (make doctor): one line per part of the installation, then ok or the problems."""

import os
import sys

import fairseq
import pytest
import sacrebleu
import torch

from fairseq_speaker import doctor
from fairseq_speaker.models import speaker_presets
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY
from tests.cli import USER_DIR, run

CUSTOM = os.path.join(os.path.dirname(USER_DIR), "examples", "custom_variant", "sparse_speaker_bias")
PARTS = ["package", "python", "torch", "CUDA", "GPUs", "fairseq", "extensions", "sacrebleu", "sacremoses", "threads",
         "commands", "plugin", "families", "variants", "registered"]


def parts(stdout: str):
    found = {}
    for line in stdout.splitlines():
        name, sep, text = line.partition(":")
        if sep and name in PARTS:
            found[name] = text.strip()
    return found


def test_the_doctor_says_what_is_installed_and_that_it_works():
    proc = run("fairseq-speaker-doctor", [])
    found = parts(proc.stdout)
    assert list(found) == PARTS, proc.stdout
    assert proc.stdout.splitlines()[-1] == "ok: nothing to fix" and proc.returncode == 0
    assert found["python"].startswith(f"{sys.version_info.major}.{sys.version_info.minor}.")
    assert found["torch"].startswith(torch.__version__ + ": ")
    assert ("CUDA" in found["torch"]) == (torch.version.cuda is not None)
    assert (found["GPUs"] == "none") == (not torch.cuda.is_available() or torch.cuda.device_count() == 0)
    assert found["fairseq"].startswith(fairseq.__version__)
    built = found["extensions"].split(";")[0]
    assert "data_utils_fast" in built and "libbleu" in built
    assert found["sacrebleu"] == sacrebleu.__version__
    assert "OMP_NUM_THREADS=1" in found["threads"]  # tests.cli.run sets it
    assert found["commands"].startswith("compute with 1 thread(s) (OMP_NUM_THREADS=1)")
    listed = found["variants"].split(", ")  # this process may hold variants other tests registered
    assert listed == sorted(listed) and set(listed) <= set(SPEAKER_BIAS_REGISTRY)
    assert {"none", "full", "fact", "proj", "simplex", "topic", "lhuc", "hyper_lhuc", "input"} <= set(listed)
    for preset in speaker_presets():
        assert preset in found["families"]
    pairs = len(speaker_presets()) * (len(listed) + 1)  # the variants the doctor's own process registers
    assert found["registered"] == f"fairseq-train's parser takes {pairs} of {pairs} preset/variant pairs"


def test_a_package_of_ones_own_registers_too():
    proc = run("fairseq-speaker-doctor", ["--user-dir", CUSTOM])
    found = parts(proc.stdout)
    assert "sparse_full" in found["variants"].split(", ")
    assert found["registered"].startswith("fairseq-train's parser takes ")
    taken, total = found["registered"].split("takes ")[1].split(" preset")[0].split(" of ")
    assert taken == total


def test_a_package_of_ones_own_that_does_not_import_is_a_problem_not_a_traceback(tmp_path):
    package = tmp_path / "half_written_variant"
    package.mkdir()
    (package / "__init__.py").write_text("import fairseq_speaker\n\nraise RuntimeError('not finished')\n")
    proc = run("fairseq-speaker-doctor", ["--user-dir", str(package)], check=False)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr + proc.stdout, proc.stderr[-3000:]
    problems = [line for line in proc.stdout.splitlines() if line.startswith("problem: ")]
    assert problems == [f"problem: --user-dir {package} does not import: RuntimeError: not finished at "
                        f"{package / '__init__.py'}:3; fix the package (python -c 'import NAME' from its parent "
                        f"folder shows the traceback), then run the doctor again; the lines above check the package "
                        f"without it"], proc.stdout
    assert list(parts(proc.stdout)) == PARTS  # the rest is checked all the same


def test_a_missing_extension_is_a_problem_with_what_to_do(monkeypatch, capsys):
    monkeypatch.setitem(doctor.NEEDED_EXTENSIONS, "fairseq.no_such_extension", "what the test needs")
    with pytest.raises(SystemExit) as ended:
        doctor.main([])
    assert ended.value.code == 1
    out = capsys.readouterr().out
    problems = [line for line in out.splitlines() if line.startswith("problem: ")]
    assert len(problems) == 1, out
    assert "fairseq.no_such_extension does not import" in problems[0] and "--no-build-isolation" in problems[0]
    assert "not built: no_such_extension" in parts(out)["extensions"]
    assert "ok: nothing to fix" not in out


def test_a_cuda_build_names_its_gpus_or_says_none_is_visible(monkeypatch):
    """The CUDA lines without a GPU machine: torch's answers replaced by those of a CUDA build."""
    import types

    monkeypatch.setattr(torch.version, "cuda", "12.8")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=80 * 2 ** 30))
    lines = dict(doctor.torch_lines())
    assert lines["torch"].endswith(": a CUDA 12.8 build") and lines["CUDA"] == "available"
    assert lines["GPUs"] == "0: NVIDIA H100 80GB HBM3 (80 GiB); 1: NVIDIA H100 80GB HBM3 (80 GiB)"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    lines = dict(doctor.torch_lines())
    assert lines["CUDA"].startswith("not available (no GPU or no driver visible)") and lines["GPUs"] == "none"
    assert "TORCH=cpu" in lines["CUDA"]
