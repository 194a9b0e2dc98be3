"""Optimizer steps of speaker tables: see :mod:`fairseq_speaker.optim.speaker_rows`."""

from .speaker_rows import update_speaker_rows  # noqa: F401
from .table_marks import mark_row_sparse  # noqa: F401
