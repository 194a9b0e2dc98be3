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

The search options of fairseq's generator are checked here for every generator of the task (:func:`check_search`,
before fairseq's own assertions end in a traceback), and where the memory changes what they mean they are made to
mean it: sampling draws from the fused step normalized (:class:`SpeakerWordsEnsemble`'s ``normalize``: fairseq's
nucleus, ``--sampling-topp``, sums the step's probabilities, which the memory's bias no longer keeps at 1), and
``--score-reference``, which scores with the network alone, is refused for a model whose memory acts
(:func:`ensemble_memory`). fairseq's diverse beam search keeps its groups' overlap by the position of a sentence in
its batch but looks it up by the sentence's id in the split (an ``IndexError`` past the first batch, another
sentence's overlap within it): :class:`DiverseBeamSearchByPosition` looks it up by position.
"""

import argparse
import inspect
import logging
import math
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from fairseq.search import DiverseBeamSearch
from fairseq.sequence_generator import EnsembleModel, SequenceGenerator
from torch import Tensor

from fairseq_speaker.data.sentence_checks import FILLER
from fairseq_speaker.errors import UserError
from fairseq_speaker.modules.speaker_encoder import encoder_speakers
from fairseq_speaker.modules.speaker_words import SpeakerWords, speaker_words_of

logger = logging.getLogger(__name__)


class SpeakerWordsEnsemble(EnsembleModel):
    """fairseq's ensemble whose step log-probabilities carry each hypothesis's speaker's words (the module's
    docstring). The bias rows of a batch's speakers are made once, at the batch's first step, and kept while the
    batch's speakers are the same (the beam reorders the hypotheses' speakers, not the rows). ``normalize``: each
    fused step is normalized again (a sampling search, which draws from the step as from a distribution)."""

    def __init__(self, models, normalize: bool = False):
        super().__init__(models)
        self.normalize = normalize
        self._rows: Optional[Tuple[SpeakerWords, Tensor, Tensor]] = None  # memory, its speakers, their rows [S, V]

    def memory(self) -> Optional[SpeakerWords]:
        return active_memory(self.single_model)

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
        fused = memory.step_log_probs(log_probs, rows, index)
        return (torch.log_softmax(fused, dim=-1) if self.normalize else fused), attn


def active_memory(model) -> Optional[SpeakerWords]:
    """``model``'s speakers' words where they act in generation (a weight above 0), else None."""
    words = speaker_words_of(model)
    return words if words is not None and words.options.weight > 0 else None


def _same_memory(a: SpeakerWords, b: SpeakerWords) -> bool:
    def arrays_equal(x: Sequence, y: Sequence) -> bool:
        return len(x) == len(y) and all(np.array_equal(u, v) for u, v in zip(x, y))

    return a is b or (a.options == b.options and a.vocab == b.vocab and arrays_equal(a.words, b.words)
                      and len(a.kinds) == len(b.kinds)
                      and all(arrays_equal(s.choices, t.choices) and np.array_equal(s.prior, t.prior)
                              and arrays_equal(s.tables, t.tables) for s, t in zip(a.kinds, b.kinds)))


def ensemble_memory(models: Sequence) -> Optional[SpeakerWords]:
    """The speakers' words an ensemble's generator fuses: the first model's (:class:`SpeakerWordsEnsemble`), which
    every model must then hold alike; None where none acts.

    Raises:
        UserError: the models remember different words (or only some of them do): the memory is fused once, into the
            ensemble's step, so another model's would be left out without a word.
    """
    memories = [active_memory(m) for m in models]
    first = memories[0] if memories else None
    for i, other in enumerate(memories[1:], 2):
        if first is None and other is None or first is not None and other is not None and _same_memory(first, other):
            continue
        if first is None or other is None:
            which = (f"the {_ordinal(i)} model of the ensemble remembers its speakers' words and the 1st does not"
                     if first is None else
                     f"the 1st model of the ensemble remembers its speakers' words and the {_ordinal(i)} does not")
        else:
            which = f"the 1st and the {_ordinal(i)} model of the ensemble remember different speakers' words"
        raise UserError(f"--path: {which} (fairseq-speaker-words); generation fuses one memory into the ensemble's "
                        f"steps: give models that remember the same words, or decode them one at a time")
    return first


def _ordinal(n: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


#: the smallest --temperature taken (fairseq divides the logits by it) and the largest --lenpen either way (a
#: hypothesis's score is divided by its length to the power lenpen: 1024 ** 10 is still a float32)
MIN_TEMPERATURE = 1e-3
MAX_LENPEN = 10.0


def check_beam_within(beam: int, vocab: int, option: str = "--beam") -> None:
    """Refuse a beam (given by ``option``) above a target dictionary of ``vocab`` words less one: fairseq's generator
    searches with ``vocab - 1`` at most, and would give fewer translations than asked."""
    if beam > vocab - 1:
        raise UserError(f"{option} {beam} is more hypotheses than the target dictionary's {vocab} words give (fairseq "
                        f"searches with {vocab - 1}): give {option} {vocab - 1} at most")


def filler_symbols(dictionary) -> List[str]:
    """The symbols fairseq pads a dictionary with to a multiple of 8 (``madeupword0000``, ...): no translation's."""
    return [symbol for symbol in dictionary.symbols if FILLER.fullmatch(symbol)]


def accepts_tokens_to_suppress(seq_gen_cls=None) -> bool:
    """Whether the generator class (fairseq's ``SequenceGenerator`` by default) takes ``tokens_to_suppress``, the
    symbols it never writes (fairseq 0.12.3; 0.12.2 has no such argument): by name, or through ``**kwargs`` given
    on to fairseq's own."""
    ours = "tokens_to_suppress" in inspect.signature(SequenceGenerator.__init__).parameters
    if seq_gen_cls is None or seq_gen_cls is SequenceGenerator:
        return ours
    parameters = inspect.signature(seq_gen_cls.__init__).parameters
    passes_on = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    return "tokens_to_suppress" in parameters or (ours and passes_on and issubclass(seq_gen_cls, SequenceGenerator))


def check_interactive(args, argv: Sequence[str]) -> None:
    """Refuse fairseq-interactive's own options that it takes and reads as something else without a word: ``args`` the
    generation options (``--prefix-size``), ``argv`` the command line (``--buffer-size``, ``--batch-size``,
    ``--max-tokens``, which the task is not given)."""
    prefix = getattr(args, "prefix_size", 0) or 0
    if prefix > 0:  # interactive input has no reference: the prefix was none
        raise UserError(f"fairseq-interactive does not read --prefix-size {prefix}: it forces the first words of a "
                        f"reference translation, and interactive input has none; leave it out (fairseq-generate "
                        f"reads it)")
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name in ("--buffer-size", "--batch-size", "--max-sentences", "--max-tokens"):
        parser.add_argument(name, type=str, default=None)
    given, _ = parser.parse_known_args(list(argv))
    for name, value, meaning in (("--buffer-size", given.buffer_size, "the lines read before they are translated; "
                                  "fairseq took it for 1"),
                                 ("--batch-size", given.batch_size or given.max_sentences, "sentences a batch"),
                                 ("--max-tokens", given.max_tokens, "tokens a batch; fairseq took 0 for no limit")):
        try:
            number = int(value) if value is not None else None
        except ValueError:
            continue  # fairseq's own parser names it
        if number is not None and number < 1:
            raise UserError(f"{name} must be at least 1 ({meaning}), got {value}")


def check_search(args, vocab: Optional[int] = None) -> None:
    """Refuse fairseq's search options that fairseq's generator would end in an assertion or a ``ValueError`` (a
    traceback), or that it takes and that change nothing, with the option to change. ``args``: the generation options
    (fairseq's ``GenerationConfig``); ``vocab``: the target dictionary's size."""
    sampling = bool(getattr(args, "sampling", False))
    for name in ("sampling_topk", "sampling_topp"):
        value = getattr(args, name, -1)
        if value is not None and value >= 0 and not sampling:
            raise UserError(f"--{name.replace('_', '-')} {value:g} chooses among the words a sampling search draws "
                            f"from: give --sampling too, or leave it out")
    groups = getattr(args, "diverse_beam_groups", -1) or -1
    rate = getattr(args, "diversity_rate", -1) or -1
    searches = [("--sampling", sampling), (f"--diverse-beam-groups {groups}", groups > 0),
                ("--match-source-len", bool(getattr(args, "match_source_len", False))),
                (f"--diversity-rate {rate:g}", rate > 0)]
    chosen = [name for name, on in searches if on]
    if len(chosen) > 1:
        raise UserError(f"{' and '.join(chosen)} each choose fairseq's search, which is one: give one of them")
    beam = getattr(args, "beam", 5)
    nbest = getattr(args, "nbest", 1)
    if isinstance(beam, int) and beam < 1:  # the nbest check below blamed --nbest 1
        raise UserError(f"--beam must be at least 1 (the hypotheses the search keeps), got {beam}")
    if isinstance(nbest, int) and nbest < 1:  # fairseq-generate's scorer divided by 0; interactive printed nothing
        raise UserError(f"--nbest must be at least 1 (the translations given of each sentence), got {nbest}")
    if isinstance(beam, int) and vocab is not None:
        check_beam_within(beam, vocab)
    if isinstance(nbest, int) and isinstance(beam, int) and nbest > beam:
        raise UserError(f"--nbest {nbest} asks for more translations of each sentence than the beam keeps (--beam "
                        f"{beam}): fairseq gives {beam}; raise --beam, or lower --nbest")
    if groups > 0 and isinstance(beam, int) and beam % groups:
        raise UserError(f"--diverse-beam-groups {groups} splits the beam into groups of one size: give a --beam that "
                        f"is a multiple of {groups}, got --beam {beam}")
    for name in ("lenpen", "unkpen", "lm_weight", "max_len_a", "temperature", "diversity_rate", "sampling_topp",
                 "diverse_beam_strength"):
        value = getattr(args, name, None)
        if isinstance(value, (int, float)) and not math.isfinite(value):
            # a NaN score ranks nothing, and an infinite one left every hypothesis -inf (fairseq's loop asserted)
            raise UserError(f"--{name.replace('_', '-')} must be a finite number, got {value}")
    temperature = getattr(args, "temperature", 1.0)
    if temperature is not None and not temperature >= MIN_TEMPERATURE:
        # fairseq divides the logits by it: at 1e-300 they overflowed and sampling ended in torch's error
        raise UserError(f"--temperature must be at least {MIN_TEMPERATURE:g} (1: the model's own probabilities; "
                        f"the likeliest word every step is --beam 1 without --sampling), got {temperature:g}")
    lenpen = getattr(args, "lenpen", 1.0)
    if isinstance(lenpen, (int, float)) and abs(lenpen) > MAX_LENPEN:
        # fairseq divides a hypothesis's score by its length to the power lenpen: 1e308 overflowed in a traceback
        raise UserError(f"--lenpen must be from -{MAX_LENPEN:g} to {MAX_LENPEN:g} (1: the score per token, 0: the "
                        f"sentence's score), got {lenpen:g}")
    # values fairseq takes without a word and which change nothing, or end in torch's error
    for name in ("min_len", "max_len_a", "max_len_b", "no_repeat_ngram_size"):
        value = getattr(args, name, None)
        if isinstance(value, (int, float)) and value < 0:
            raise UserError(f"--{name.replace('_', '-')} must be at least 0, got {value:g}")
    topp = getattr(args, "sampling_topp", -1)
    if isinstance(topp, (int, float)) and topp != -1 and not 0 < topp <= 1:
        raise UserError(f"--sampling-topp must be in (0, 1] (the probability mass sampled from; -1: off), got {topp:g}")
    topk = getattr(args, "sampling_topk", -1)
    if isinstance(topk, int) and topk != -1 and not 1 <= topk <= (vocab if vocab is not None else topk):
        raise UserError(f"--sampling-topk must be from 1 to the target dictionary's {vocab} words (-1: off), got "
                        f"{topk}")


class DiverseBeamSearchByPosition(DiverseBeamSearch):
    """fairseq's diverse beam search, its groups' overlap looked up by the sentence's position in the batch of the
    first step (as it stores it) instead of by the sentence's id in the split (the ``original_batch_idxs`` the
    generator passes), which is past the overlap's end after the first batch and another sentence's within it."""

    @classmethod
    def of(cls, search: DiverseBeamSearch, tgt_dict) -> "DiverseBeamSearchByPosition":
        """The same search (groups, strength, discount, candidates), looked up by position."""
        return cls(tgt_dict, search.num_groups, -search.diversity_strength, search.diversity_discount,
                   search.candidate_multiple)

    def step(self, step: int, lprobs, scores, prev_output_tokens: Optional[Tensor] = None,
             original_batch_idxs: Optional[Tensor] = None):
        if original_batch_idxs is not None:
            if step == 0:  # the batch's sentences, in the order the overlap is stored in
                self._first_ids = original_batch_idxs.clone()
                self._order = torch.argsort(self._first_ids)
            order = self._order
            original_batch_idxs = order[torch.searchsorted(self._first_ids[order], original_batch_idxs)]
        return super().step(step, lprobs, scores, prev_output_tokens, original_batch_idxs)


def by_position(generator, tgt_dict):
    """``generator`` with its diverse beam search, if it has one, looked up by position
    (:class:`DiverseBeamSearchByPosition`)."""
    search = getattr(generator, "search", None)
    if type(search) is DiverseBeamSearch:
        generator.search = DiverseBeamSearchByPosition.of(search, tgt_dict)
    return generator


class UnbeatenStopGenerator(SequenceGenerator):
    """fairseq's beam search, a sentence ended only when no live hypothesis can still beat its ended ones
    (``--beam-stop unbeaten``).

    fairseq ends a sentence's search as soon as ``beam`` hypotheses have ended (``SequenceGenerator.is_finished``)
    and returns the best of those. Where one continuation is right and every other unlikely, the unlikely ones that
    end at once fill those places while the right one, scored better, is still being written: the search returns a
    sentence cut short. Here the ended hypotheses are the best ``beam`` ended so far (a better one that ends later
    takes the worst one's place), and a sentence ends once it has ``beam`` of them and the best live hypothesis,
    scored by its score so far normalized by the shortest length it can end at (the rule of Hugging Face's
    ``early_stopping=False``), is no better than the worst of them; or at the maximum length, as
    fairseq's does. With ``--unnormalized`` or a length penalty of 0 a live hypothesis can only lose score, and the
    rule is exact: no hypothesis that could still beat an ended one is dropped; with a length penalty above 0 a
    longer hypothesis gains from its length and the rule is the same heuristic as Hugging Face's.

    A sentence is checked when one of its hypotheses ends (where fairseq checks it): one whose live hypotheses
    never end again runs to the maximum length, which costs time and not correctness. There it ends with the
    hypotheses it has ended even where none of its live ones could end (all of them scored -inf: a forced prefix
    that held the end of the sentence, ``--prefix-size`` longer than the reference), where fairseq's loop asserts
    that every sentence has ended. Every other part of the search (candidates, scores, constraints, the ensemble's
    step) is fairseq's.
    """

    def _generate(self, sample, *args, **kwargs):
        # fairseq's loop ends at the maximum length instead of asserting that no sentence is left (its own rule has
        # ended every sentence by then: `beam` ended; here one whose live hypotheses all score -inf may be left)
        self.search.stop_on_max_len = True
        return super()._generate(sample, *args, **kwargs)

    def finalize_hypos(self, step: int, bbsz_idx, eos_scores, tokens, scores, finalized, finished, beam_size: int,
                       attn, src_lengths, max_len: int):
        #: the sentence (index in the whole batch) of each position of the reduced batch (fairseq's ``cum_unfin``)
        self._sentences = [sent for sent, done in enumerate(finished) if not done]
        ending = torch.div(bbsz_idx, beam_size, rounding_mode="trunc").tolist()
        # fairseq keeps the first `beam` hypotheses that end and no more: the worst kept are set aside to make room
        # for this step's, and the best `beam` of all are kept once fairseq has added them
        self._set_aside: Dict[int, List[Dict[str, Tensor]]] = {}
        for position in set(ending):
            sent = self._sentences[position]
            room = beam_size - ending.count(position)
            if len(finalized[sent]) > room:
                ranked = _best_first(finalized[sent])
                finalized[sent][:] = ranked[:room]
                self._set_aside[sent] = ranked[room:]
        self._finalized = finalized
        # the best score so far of each position's live hypotheses (0 before the first word)
        self._live_best = (scores.view(-1, beam_size, scores.size(1))[:, :, step - 1].max(dim=1).values.tolist()
                           if step > 0 else [0.0] * len(self._sentences))
        newly = super().finalize_hypos(step, bbsz_idx, eos_scores, tokens, scores, finalized, finished, beam_size,
                                       attn, src_lengths, max_len)
        for sent, hypos in self._set_aside.items():
            finalized[sent][:] = _best_first(finalized[sent] + hypos)[:beam_size]
        return newly

    def is_finished(self, step: int, unfin_idx: int, max_len: int, finalized_sent_len: int, beam_size: int) -> bool:
        if step == max_len:
            return True
        sent = self._sentences[unfin_idx]
        ended = _best_first(self._finalized[sent] + self._set_aside.get(sent, []))[:beam_size]
        if len(ended) < beam_size:
            return False
        live = self._live_best[unfin_idx]
        if self.normalize_scores:  # the shortest it can end at: this step's word and an end at the next
            live = live / (step + 2) ** self.len_penalty
        return live <= float(ended[-1]["score"])


def _best_first(hypos: List[Dict[str, Tensor]]) -> List[Dict[str, Tensor]]:
    return sorted(hypos, key=lambda hypo: float(hypo["score"]), reverse=True)


def empty_source_rows(sample: dict, src_dict) -> List[int]:
    """The rows of ``sample`` whose source is the end-of-sentence token alone."""
    src, pad, eos = sample["net_input"]["src_tokens"], src_dict.pad(), src_dict.eos()
    return [i for i in range(src.size(0)) if int(src[i].ne(pad).sum()) == 1 and int(src[i][src[i].ne(pad)][0]) == eos]


def empty_sources_left_empty(generator, sample: dict, hypos: List[list], src_dict, tgt_dict,
                             reported: int = 0) -> List[list]:
    """``hypos`` (``generator``'s result for ``sample``) with each sentence whose source is empty (the end-of-sentence
    token alone: an empty input line of fairseq-interactive, an empty line of a split) answered by one empty
    translation of score 0, logged once for the batch. A model given nothing invents a fluent sentence; the empty one
    keeps the output's lines in step with the input's. A scorer of references (``--score-reference``) is left as it
    is: it scores what it is given. ``reported`` of the empty sources were input lines emptied and logged by the task
    (too long, not UTF-8): the log counts only the others."""
    if not isinstance(generator, SequenceGenerator):
        return hypos
    src = sample["net_input"]["src_tokens"]
    empty = empty_source_rows(sample, src_dict)
    if not empty:
        return hypos
    ids, unreported = sample.get("id"), len(empty) - reported
    for i in empty:
        first = hypos[i][0] if hypos[i] else None
        hypo: Dict = {"tokens": torch.tensor([tgt_dict.eos()], dtype=src.dtype, device=src.device),
                      "score": torch.tensor(0.0), "positional_scores": torch.zeros(1)}
        if first is not None:
            hypo["attention"] = first["attention"][:, :1] if torch.is_tensor(first.get("attention")) and \
                first["attention"].dim() == 2 else first.get("attention")
            hypo["alignment"] = first["alignment"][:0] if first.get("alignment") is not None else None
        else:
            hypo["attention"], hypo["alignment"] = torch.empty(0), torch.empty(0)
        hypos[i] = [hypo]
    if isinstance(ids, Tensor):  # a split's sentences (fairseq-generate): their ids, as its S- lines print them
        numbers = [int(ids[i]) for i in empty]
        shown = ", ".join(map(str, numbers[:3])) + (f" and {len(numbers) - 3} more" if len(numbers) > 3 else "")
        which = f"an empty source (sentence id {shown})"
    elif unreported > 0:  # fairseq-interactive gives no ids with a batch: its S- and H- lines show which
        which = "an empty input line" if unreported == 1 else f"{unreported} empty input lines"
    else:
        return hypos
    logger.warning(f"{which} translated as an empty sentence: given nothing, a model invents one")
    return hypos
