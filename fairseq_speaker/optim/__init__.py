"""Optimizer steps of speaker tables: see :mod:`fairseq_speaker.optim.speaker_rows`."""

from .speaker_rows import mark_row_sparse, update_speaker_rows  # noqa: F401
