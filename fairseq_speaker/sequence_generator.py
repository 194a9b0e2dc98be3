"""Generation with the speakers' words: the memory fused into fairseq's beam search where fairseq fuses a language
model, in the generator and not in the network (:mod:`fairseq_speaker.modules.speaker_words`).

fairseq's ``SequenceGenerator`` asks its ``EnsembleModel`` for each step's log-probabilities
(``forward_decoder``) and adds a language model's to them (``--lm-path``, ``--lm-weight``). The speakers' words are
the same kind of part: each hypothesis's speaker's bias added to the step's log-probabilities, at the words within
the memory's window of the step's best. :class:`SpeakerWordsEnsemble` is fairseq's ensemble with that one step
added; :meth:`SpeakerTranslationTask.build_generator` builds every generator of the task with it (fairseq-generate,
fairseq-interactive, ``fairseq-train --eval-bleu``, the hub interface and so ``SpeakerTranslator`` and the service).
The network itself knows nothing of the memory: its teacher-forced and incremental outputs are those of the
checkpoint without it. The memory is kept with the model (its decoder's ``speaker_words``, so that a checkpoint
carries it and onboarding updates it) and read from the first model of the ensemble at each step, so a memory
attached after the generator was built (a checkpoint restored by fairseq-train) is used; one of weight 0 is skipped.
"""

from typing import Dict, List, Optional, Tuple

import torch
from fairseq.sequence_generator import EnsembleModel
from torch import Tensor

from fairseq_speaker.modules.speaker_plumbing import encoder_speakers
from fairseq_speaker.modules.speaker_words import SpeakerWords, speaker_words_of


class SpeakerWordsEnsemble(EnsembleModel):
    """fairseq's ensemble whose step log-probabilities carry each hypothesis's speaker's words (the module's
    docstring). The bias rows of a batch's speakers are made once, at the batch's first step, and kept while the
    batch's speakers are the same (the beam reorders the hypotheses' speakers, not the rows)."""

    def __init__(self, models):
        super().__init__(models)
        self._rows: Optional[Tuple[SpeakerWords, Tensor, Tensor]] = None  # memory, its speakers, their rows [S, V]

    def memory(self) -> Optional[SpeakerWords]:
        words = speaker_words_of(self.single_model)
        return words if words is not None and words.options.weight > 0 else None

    def _speaker_rows(self, memory: SpeakerWords, speakers: Tensor) -> Tuple[Tensor, Tensor]:
        """The bias rows of the distinct ``speakers`` ``[S, V]`` and the row of each hypothesis ``[B]``."""
        distinct, index = speakers.unique(return_inverse=True)
        cached = self._rows
        if cached is None or cached[0] is not memory or not torch.equal(cached[1], distinct):
            cached = self._rows = (memory, distinct, memory.bias(distinct.cpu()).to(speakers.device))
        return cached[2], index

    @torch.no_grad()
    def forward_decoder(self, tokens, encoder_outs: List[Dict[str, List[Tensor]]],
                        incremental_states: List[Dict[str, Dict[str, Optional[Tensor]]]], temperature: float = 1.0):
        log_probs, attn = super().forward_decoder(tokens, encoder_outs, incremental_states, temperature)
        memory = self.memory()
        if memory is None or not encoder_outs:
            return log_probs, attn
        speakers = encoder_speakers(encoder_outs[0])
        if speakers is None:
            return log_probs, attn
        if tokens.size(1) == 1:  # a new batch: its speakers' rows made anew (the memory may have changed between)
            self._rows = None
        rows, index = self._speaker_rows(memory, speakers)
        return memory.step_log_probs(log_probs, rows, index), attn
