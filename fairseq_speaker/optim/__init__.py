"""Optimizer steps of speaker tables: see :mod:`fairseq_speaker.optim.speaker_rows`."""

from .speaker_rows import clip_grad_norm_, mark_row_sparse  # noqa: F401  (installs the step hook)
