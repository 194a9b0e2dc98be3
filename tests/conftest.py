import os

import pytest
import torch

# two test workers on two cores: one thread each, or both slow down several-fold
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
