"""What code run in the test process may change for the whole process, put back as it was: a command's main run
here (tests/cli.py's runners) or a test that calls one directly must leave the next test the process it found."""

import contextlib
import logging
import sys
import warnings

import torch


def _loggers():
    """Every logger of this process, the root's included, by name."""
    found = {name: logger for name, logger in logging.Logger.manager.loggerDict.items()
             if isinstance(logger, logging.Logger)}
    found[""] = logging.getLogger()
    return found


@contextlib.contextmanager
def kept():
    """On leaving, put back every logger's level, handlers, filters, propagation and ``disabled`` flag (a logger made
    inside: as a new one is), ``logging.disable``'s level, the warning filters and hook, ``sys.excepthook`` and
    torch's thread count. A command sets these when it starts (``logging.basicConfig(force=True)`` on the standard
    error it was given, a library's logger held at WARNING, its exception hook, ``--threads``); left in place, a
    later test's logging writes to a closed stream or misses lines."""
    before = {name: (logger.level, list(logger.handlers), list(logger.filters), logger.propagate, logger.disabled)
              for name, logger in _loggers().items()}
    disable, hook, threads = logging.root.manager.disable, sys.excepthook, torch.get_num_threads()
    with warnings.catch_warnings():  # the filters and warnings.showwarning (logging.captureWarnings sets it)
        try:
            yield
        finally:
            _put_back(before, disable, hook, threads)


def _put_back(before, disable, hook, threads) -> None:
    for name, logger in _loggers().items():
        level, handlers, filters, propagate, disabled = before.get(name, (logging.NOTSET, [], [], True, False))
        logger.setLevel(level)  # also clears every logger's cache of what it lets through
        logger.handlers[:] = handlers
        logger.filters[:] = filters
        logger.propagate, logger.disabled = propagate, disabled
    logging.disable(disable)
    sys.excepthook = hook
    if torch.get_num_threads() != threads:
        torch.set_num_threads(threads)
