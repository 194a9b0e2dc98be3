"""The options of a speaker's fit on a frozen network, and their checks.

:class:`FitOptions` are the options of ``fairseq-speaker-adapt`` (``--adapt-l2``, ...), of
:class:`~fairseq_speaker.onboarding.adapter.SpeakerAdapter` and of ``fairseq-speaker-refit``; :data:`MAX_L2` is the
largest pull towards the mean speaker they take. The solver that reads them is
:func:`~fairseq_speaker.onboarding.fit.fit_speakers`.
"""

import math
from dataclasses import dataclass

from fairseq_speaker.errors import UserError

#: the largest l2 taken: far past it a new speaker is the mean speaker whatever their sentences, and beyond float32's
#: range (3.4e38) the fit's arithmetic overflows
MAX_L2 = 1e9


@dataclass
class FitOptions:
    """How speakers are fitted (the options of ``fairseq-speaker-adapt``)."""

    l2: float = 1.0  # weight of the pull towards the mean speaker's rows (in units of one token's loss)
    label_smoothing: float = 0.0  # e of the label-smoothed loss (training's criterion); 0: the likelihood
    max_iter: int = 100  # L-BFGS iterations at most
    check_every: int = 5  # iterations between two looks at the held-out loss
    patience: int = 2  # looks without improvement before stopping
    tolerance: float = 1e-6  # stop when the per-token loss changes less than this
    #: the same through the decoder, where each evaluation is a pass of the network: from 1e-6 to 1e-4, new speakers
    #: of the styles corpus took a median of 6 L-BFGS iterations instead of 9 at n = 10 and were translated as well
    #: at n = 1 to 30 (docs/onboarding.md, "How fast")
    decoder_tolerance: float = 1e-4
    gradient_tolerance: float = 1e-7  # stop when no gradient entry is larger than this

    def __post_init__(self):
        if not (math.isfinite(self.l2) and 0 <= self.l2 <= MAX_L2):
            raise UserError(f"the fit's l2 (--adapt-l2) must be a number from 0 to {MAX_L2:g} (at {MAX_L2:g} a new "
                            f"speaker is already the mean speaker), got {self.l2}")
        for name in ("max_iter", "check_every", "patience"):
            if int(getattr(self, name)) < 1:
                raise UserError(f"the fit's {name} must be at least 1, got {getattr(self, name)}")
