"""fairseq-speaker: personalized NMT with speaker biases on the output softmax, as a fairseq plugin.

Use with ``--user-dir`` pointing at this package's folder (:data:`USER_DIR`):
this registers the task ``speaker_translation``, the models ``speaker_lstm``
(presets ``lstm_base``, ``lstm_full_bias``, ``lstm_fact_bias``) and
``speaker_transformer`` (``transformer_base``, ``transformer_full_bias``,
``transformer_fact_bias``), each declared as a model family
(:mod:`fairseq_speaker.models.families`), the speaker bias variants of
:mod:`fairseq_speaker.modules.speaker_bias`, the criterion
``speaker_label_smoothed_cross_entropy`` and the lr scheduler ``restart_from_best``.
"""

import os

__version__ = "0.8.0"

#: the folder to pass as ``--user-dir``
USER_DIR = os.path.dirname(os.path.abspath(__file__))

from .command_registry import running_command  # noqa: E402
from .errors import install_excepthook  # noqa: E402
from .runtime import fairseq_command, quiet_fairseq_command  # noqa: E402

# Importing the package changes nothing process-wide, unless this process is a command line: one of ours
# (fairseq-speaker-*) or fairseq's own with the package as --user-dir (fairseq-train, -generate, ...), which
# start here. Then user errors end in their message, without a traceback (from here on: a fairseq that is not
# supported is refused so below), and fairseq's commands print no hydra notices nor an unrelated model's
# configuration. Our commands install the hook again when their main starts (errors.command), for a main called
# from Python.
if running_command() is not None or fairseq_command() is not None:
    install_excepthook()
    quiet_fairseq_command()

from . import fairseq_patches  # noqa: E402

fairseq_patches.apply()  # every change to fairseq, once (and the check of its version): see fairseq_patches.py

from . import criterions, lr_schedulers, models, modules, tasks  # noqa: E402,F401
