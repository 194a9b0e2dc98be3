"""The options of the memory of the speakers' words (:mod:`fairseq_speaker.modules.speaker_words`) and their
checks.

:class:`WordOptions` are the constants of its equation and of how generation fuses it (``fairseq-speaker-words``
``--weight``, ``--add-to``, ...); :data:`ADD_TO` and :data:`RANK_CHOICES` the values two of them take,
:data:`MAX_WEIGHT` and :data:`MAX_COUNT` the largest values accepted. Its siblings: the estimate of a speaker's bias
(:mod:`~fairseq_speaker.modules.words_estimate`), its fusion into a generation step
(:mod:`~fairseq_speaker.modules.words_fusion`), its index (:mod:`~fairseq_speaker.modules.words_index`), the traits'
kinds (:mod:`~fairseq_speaker.modules.word_kinds`) and its record in a checkpoint
(:mod:`~fairseq_speaker.modules.words_record`).
"""

import math
from dataclasses import dataclass
from typing import List

#: what a step's bias can be added to (:attr:`WordOptions.add_to`); a record written before the option existed
#: (0.6.0 and before) added it to the logits, and keeps doing so
ADD_TO = ("log_probs", "logits")
#: how the alternatives of a choice of the kinds are ranked (:attr:`WordOptions.rank_choices`); a record written before
#: the option existed (0.7.0) ranked them by their rate ratio, and keeps doing so
RANK_CHOICES = ("posterior", "rates")

#: the largest weight accepted: beyond it the memory overrides every word the network proposes (a weight of 1e30
#: makes every output one repeated word)
MAX_WEIGHT = 100.0
#: the widest window accepted (nats below a step's best), the widest the settings' calibration tries: a window of 8
#: put a speaker's bias on nearly every word, and every translation became one word repeated to the length limit
MAX_WINDOW = 4.0
#: the most ``evidence`` and ``kinds_prior`` may be (counts of words: beyond, a speaker's words weigh nothing)
MAX_COUNT = 1e6


@dataclass
class WordOptions:
    """The estimator's constants (the equation of :mod:`~fairseq_speaker.modules.speaker_words`). The defaults were
    chosen on the styles corpus (docs/speaker_learning.md, "How the options were chosen"); no other corpus was
    measured."""

    weight: float = 6.0
    window: float = 2.0
    own: float = 0.3
    neighbours: float = 0.6
    k: int = 30
    power: float = 4.0
    evidence: float = 60.0
    #: what a generation step's bias is added to: ``log_probs``, the step's normalized log-probabilities, so that a
    #: hypothesis keeps its word's bias and the words of the speaker can choose the article before them; or ``logits``
    #: (0.6.0 and before), renormalized at the step, where a noun's bias cannot undo its article
    add_to: str = "log_probs"
    #: how the alternatives of a choice of the traits' kinds are ranked: by the speaker's posterior predictive, every
    #: other word then only raised (``posterior``, the text of :mod:`~fairseq_speaker.modules.speaker_words`), or by
    #: their rate ratio alone, as everything else (``rates``, 0.7.0)
    rank_choices: str = "posterior"
    #: how many of a speaker's own choices the kinds' prediction of a choice counts as (alpha): below 1, an
    #: alternative the speaker said outranks any they did not
    kinds_prior: float = 0.3
    #: whether a word within the window is kept at or above the window's edge (the step's best minus ``window``), so
    #: that the memory only re-ranks the words the network proposes and a word outside the window never wins by the
    #: network's best being lowered (records written before the option existed, 0.8.0 and before, do not)
    floor: bool = True

    def problems(self) -> List[str]:
        out = []
        if self.add_to not in ADD_TO:
            out.append(f"add_to must be one of {', '.join(ADD_TO)}, got {self.add_to!r}")
        if self.rank_choices not in RANK_CHOICES:
            out.append(f"rank_choices must be one of {', '.join(RANK_CHOICES)}, got {self.rank_choices!r}")
        for name in ("weight", "window", "own", "neighbours", "power", "evidence", "kinds_prior"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                out.append(f"{name} must be a number >= 0, got {value!r}")
        if not out and self.weight > MAX_WEIGHT:
            out.append(f"weight must be at most {MAX_WEIGHT:g}, got {self.weight!r}")
        if not out and self.window > MAX_WINDOW:
            out.append(f"window must be at most {MAX_WINDOW:g}, got {self.window!r}")
        for name in ("evidence", "kinds_prior"):  # beyond them every speaker's bias is 0: a memory that does nothing
            if not out and getattr(self, name) > MAX_COUNT:
                out.append(f"{name} must be at most {MAX_COUNT:g} (a count of words; weight 0 is the memory that does "
                           f"nothing), got {getattr(self, name)!r}")
        if not out and self.kinds_prior == 0:
            out.append("kinds_prior must be above 0 (the kinds' prediction of the alternatives a speaker never said)")
        if not out and self.own + self.neighbours > 1:
            out.append(f"own + neighbours must be at most 1, got {self.own} + {self.neighbours}")
        if not isinstance(self.floor, bool):
            out.append(f"floor must be true or false, got {self.floor!r}")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            out.append(f"k must be a whole number >= 1, got {self.k!r}")
        return out

