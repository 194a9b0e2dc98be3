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

from .errors import install_excepthook  # noqa: E402

install_excepthook()  # user errors end in their message, without a traceback, in every command line

from .runtime import quiet_fairseq_command  # noqa: E402

quiet_fairseq_command()  # fairseq-train/-generate/...: no hydra notices nor an unrelated model's configuration

from . import fairseq_patches  # noqa: E402

fairseq_patches.apply()  # every change to fairseq, once (and the check of its version): see fairseq_patches.py

from . import criterions, lr_schedulers, models, modules, tasks  # noqa: E402,F401
