"""The one switch of the package's fast CPU paths.

Each fast path computes what a plain PyTorch/fairseq computation gives (values and gradients, tested
side by side), faster on the CPUs this project is measured on:

- the LSTM's matrix products through oneDNN's GEMM (:mod:`fairseq_speaker.modules.gemm`), which also
  makes a speaker model's generation step in one product with the speaker's rows
  (:class:`~fairseq_speaker.modules.speaker_decoder.SpeakerDecoderMixin`);
- the MLP attention's tanh as ``2 sigmoid(2x) - 1`` (:mod:`fairseq_speaker.modules.pointwise`);
- a recurrence's weight gradients as one product over all steps
  (:mod:`fairseq_speaker.modules.step_weights`), and the teacher-forced LSTM decoder's word gates
  computed for all steps at once (``AttentionalLSTMDecoder``);
- the label-smoothed loss from the logits with one vocabulary-sized buffer
  (:mod:`fairseq_speaker.criterions.speaker_label_smoothed_cross_entropy`).

``FAIRSEQ_SPEAKER_PLAIN=1`` in the environment turns every one of them off in that process (read here,
once, at import): the plain path, for comparison (``fairseq-speaker-benchmark --plain``) or for a CPU
where oneDNN is slower than the BLAS. Code reads the switch with :func:`enabled` at the moment it
chooses a path; tests and benchmarks flip it with :func:`set_enabled` or :func:`plain`.
"""

import contextlib
import os
from typing import Iterator

#: the environment variable that turns every fast path off ("1")
ENVIRONMENT_VARIABLE = "FAIRSEQ_SPEAKER_PLAIN"


def requested_by_environment() -> bool:
    """False when ``FAIRSEQ_SPEAKER_PLAIN=1`` is in this process's environment."""
    return os.environ.get(ENVIRONMENT_VARIABLE, "0") != "1"


_enabled = requested_by_environment()


def enabled() -> bool:
    """Whether the fast paths are on (where they serve: CPU, float32, a PyTorch build with oneDNN)."""
    return _enabled


def set_enabled(value: bool) -> None:
    global _enabled
    _enabled = bool(value)


@contextlib.contextmanager
def plain() -> Iterator[None]:
    """Every fast path off inside the block, as with ``FAIRSEQ_SPEAKER_PLAIN=1``."""
    before = _enabled
    set_enabled(False)
    try:
        yield
    finally:
        set_enabled(before)
