"""``--user-dir`` for the package's own commands: a package that registers more speaker bias variants or
model families (``examples/custom_variant``, ``examples/lightconv_family``), imported as fairseq imports it.

A command that loads a model or names a variant adds the option with :func:`add_user_dir_argument` and
imports it with :func:`import_user_dir` (or :func:`import_user_dir_early`, before a parser whose choices
list the registered presets). :func:`check_registered` turns a checkpoint of a variant or an arch that
is not registered into one message that says which ``--user-dir`` to pass.
"""

import argparse
import os
from typing import Optional, Sequence

from fairseq_speaker.errors import UserError, last_traceback

HELP = ("the folder of a package registering more speaker bias variants or model families, as given to "
        "fairseq-train's --user-dir (needed for a model of one of them)")


def add_user_dir_argument(parser) -> None:
    """Add ``--user-dir DIR`` to ``parser`` (an ``ArgumentParser`` or an argument group)."""
    parser.add_argument("--user-dir", metavar="DIR", help=HELP)


def import_user_dir(user_dir: Optional[str]) -> None:
    """Import the package of ``--user-dir`` (nothing without one); a folder that is not there is a
    :class:`UserError`."""
    if not user_dir:
        return
    if not os.path.isdir(user_dir):
        what = "a file, not a folder" if os.path.exists(user_dir) else "no such folder"
        raise UserError(f"--user-dir {user_dir}: {what} (give the folder of the Python package that "
                        f"registers the variant or family, as given to fairseq-train)")
    if not os.path.isfile(os.path.join(user_dir, "__init__.py")):
        # fairseq imports the folder's name from its parent folder: without __init__.py that is a namespace package
        # that registers nothing, or a module of the same name beside it, which runs instead
        raise UserError(f"--user-dir {user_dir}: not a Python package (no __init__.py in it): give the folder of the "
                        f"package that registers the variant or family")
    from fairseq import utils

    try:
        utils.import_user_module(argparse.Namespace(user_dir=user_dir))
    except ImportError as e:  # fairseq refuses a folder named like another imported module
        raise UserError(f"--user-dir {user_dir}: {e}") from None
    except Exception as e:  # the package's own code fails as it is imported (a traceback that named no option)
        raise UserDirImportFailed(user_dir, e) from None


class UserDirImportFailed(UserError):
    """A ``--user-dir`` package whose own code raised ``error`` as it was imported."""

    def __init__(self, user_dir: str, error: Exception):
        super().__init__(f"--user-dir {user_dir}: importing the package failed at {where_raised(error)}: "
                         f"{type(error).__name__}: {error}: fix the package (python -c 'import NAME' in its parent "
                         f"folder shows the whole traceback)")
        self.error = error


def where_raised(error: BaseException) -> str:
    """The file and line where ``error`` was raised (for a syntax error, where the code is wrong)."""
    if isinstance(error, SyntaxError) and error.filename:
        return f"{error.filename}:{error.lineno}"
    tb = last_traceback(error)
    return f"{tb.tb_frame.f_code.co_filename}:{tb.tb_lineno}" if tb is not None else "its import"


def import_user_dir_early(argv: Optional[Sequence[str]]) -> Optional[str]:
    """Import the ``--user-dir`` of a command line before its parser is built (its presets then become
    choices); returns it."""
    early = argparse.ArgumentParser(add_help=False)
    early.add_argument("--user-dir")
    known, _ = early.parse_known_args(argv)
    import_user_dir(known.user_dir)
    return known.user_dir


def _model_options(state: dict) -> dict:
    cfg = state.get("cfg") if isinstance(state, dict) else None
    model = cfg.get("model") if cfg is not None and hasattr(cfg, "get") else None
    if model is None and isinstance(state, dict) and state.get("args") is not None:
        model = state["args"]
    if isinstance(model, argparse.Namespace):
        return vars(model)
    return dict(model) if model is not None else {}


def _trained_user_dir(state: dict) -> Optional[str]:
    cfg = state.get("cfg")
    common = cfg.get("common") if cfg is not None and hasattr(cfg, "get") else None
    user_dir = common.get("user_dir") if common is not None and hasattr(common, "get") else None
    return user_dir or getattr(state.get("args"), "user_dir", None)


def check_registered(state: dict, path: str) -> None:
    """Raise a :class:`UserError` naming ``path`` if its arch or speaker bias variant is not registered
    here: the message names the ``--user-dir`` the model was trained with."""
    from fairseq.models import ARCH_MODEL_REGISTRY

    from fairseq_speaker import USER_DIR
    from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY

    options = _model_options(state)
    arch = options.get("arch") or options.get("_name")
    missing = None
    if arch and arch not in ARCH_MODEL_REGISTRY:
        missing = f"its arch {arch!r}"
    else:
        variant = options.get("speaker_bias")
        unknown = [part.strip() for part in str(variant or "").split("+")
                   if part.strip() and part.strip() not in SPEAKER_BIAS_REGISTRY]
        if unknown:
            missing = f"its speaker bias variant {unknown[0]!r}"
    if missing is None:
        return
    trained = _trained_user_dir(state)
    if trained and os.path.abspath(trained) == os.path.abspath(USER_DIR):
        trained = None  # this package itself: no hint
    hint = f" (it was trained with --user-dir {trained})" if trained else ""
    raise UserError(f"{path}: {missing} is not registered: pass --user-dir with the folder of the package that "
                    f"registers it{hint}")
