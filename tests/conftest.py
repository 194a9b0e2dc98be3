import os

import pytest
import torch
from hypothesis import settings

from tests.process_state import kept

# two test workers on two cores: one thread each, or their threads contend for the same cores
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")

# property tests: a bounded search, the same examples on every run (CI too), no example database written;
# HYPOTHESIS_PROFILE=thorough searches much longer, with new examples each run
settings.register_profile("fast", max_examples=100, deadline=None, derandomize=True, database=None)
settings.register_profile("thorough", max_examples=5000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "fast"))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture
def fast_path_switch():
    """``fast_paths.set_enabled``, with the switch put back as it was after the test."""
    from fairseq_speaker import fast_paths

    before = fast_paths.enabled()
    yield fast_paths.set_enabled
    fast_paths.set_enabled(before)


@pytest.fixture(autouse=True)
def _process_state():
    """Each test leaves the process as it found it: logging, warning filters, exception hook, thread count (a
    command's main run in this process sets them; tests/process_state.py)."""
    with kept():
        yield
