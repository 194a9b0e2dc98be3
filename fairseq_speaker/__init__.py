"""fairseq-speaker: personalized NMT with speaker biases on the output softmax, as a fairseq plugin.

Use with ``--user-dir fairseq_speaker`` (or the installed package's folder):
this registers the task ``speaker_translation``, the model ``speaker_lstm``
(archs ``lstm_base``, ``lstm_full_bias``, ``lstm_fact_bias``) and the
criterion ``speaker_label_smoothed_cross_entropy``.
"""

__version__ = "0.1.0"

from . import checkpoints  # noqa: F401  (lets torch >= 2.6 load fairseq checkpoints safely)
from . import criterions, lr_schedulers, models, modules, tasks  # noqa: F401
