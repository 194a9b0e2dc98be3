"""The library behind onboarding: :class:`SpeakerAdapter`, which fits new speakers into a trained model on the frozen
network (``fairseq-speaker-adapt``, :class:`~fairseq_speaker.onboarding.translator.SpeakerTranslator`, refit,
onboarding-eval and the benchmarks use it): what a fit reads of each speaker's sentences and its cache, adding and
updating speakers. Its parts: the encoding of the adaptation sentences
(:class:`~fairseq_speaker.onboarding.adaptation_sentences.SentenceEncoding`, beside the reading and grouping of the
adaptation files), where a new speaker's fit starts through the decoder
(:class:`~fairseq_speaker.onboarding.fit_starts.FitStarts`).

Only what the variant marks as the speakers' own parameters is learned (the V-vector of ``full``, the r weights of
``fact``, the embedding of ``proj``, ...); the network is frozen, and every speaker the model already had translates
exactly as before. A variant acting on the decoder's state (``hyper_lhuc``, ...) is fitted through the frozen decoder
rather than on cached logits (slower: a decoder pass per iteration).
"""

import dataclasses
import logging
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from fairseq_speaker.data.speaker_labels import new_label_problem
from fairseq_speaker.modules.speaker_words import SpeakerWords, speaker_words_of
from fairseq_speaker.modules.words_index import WordsIndex
from fairseq_speaker.onboarding.adaptation_sentences import SentenceEncoding
from fairseq_speaker.onboarding.checkpoint import (
    OnboardingError,
    adaptable_bias,
    add_speakers,
    replace_speakers,
    speaker_counts,
    stacked_rows,
)
from fairseq_speaker.onboarding.curvature import Curvature
from fairseq_speaker.onboarding.fit import FitReport, fit_speakers
from fairseq_speaker.onboarding.fit_loss import data_nll
from fairseq_speaker.onboarding.fit_options import FitOptions
from fairseq_speaker.onboarding.fit_starts import FitStarts
from fairseq_speaker.onboarding.prior import SpeakerPrior, best_start
from fairseq_speaker.onboarding.scoring import (
    Pair,
    Scored,
    TokenScores,
    decoder_batches,
    score_tokens,
    split_scores,
)

logger = logging.getLogger(__name__)


class SpeakerAdapter(SentenceEncoding, FitStarts):
    """Adds and updates speakers of a loaded model (``model`` and its ``task``), in place.

    The network runs once over each speaker's sentences; the scores are kept for the
    ``cache_speakers`` most recent speakers, so that one more sentence for one of them
    (:meth:`update`) costs one forward pass of that sentence and a warm-started fit.
    Through the decoder, an update of a speaker fitted here fits the new sentences only, the earlier ones
    standing in as the quadratic model their fit left (:class:`~fairseq_speaker.onboarding.curvature.Curvature`);
    ``exact_updates=True`` refits on all of them instead.

    New speakers are pulled towards the mean speaker of the model as it was when the adapter was made (or the prior
    saved in the checkpoint), so that a speaker's fit does not depend on who was added before. They start from it,
    except through the decoder, where each evaluation of the objective is a pass of the decoder. There a new
    speaker's fit starts from the rows of known speakers (the speakers the model had when the adapter was made) like
    them: in a model that remembers its speakers' words (``fairseq-speaker-words``), the speakers whose words are
    most like theirs (the neighbours of :mod:`~fairseq_speaker.modules.speaker_words`, weighted as there); else, for
    a variant with an output bias of its own, the speakers whose output bias makes their target words most probable
    (:meth:`~fairseq_speaker.onboarding.fit_starts.FitStarts.likely_start`). The objective is the same; it starts
    nearer its end (on the styles corpus, for a speaker of 10 sentences, a median of 7 evaluations of the objective
    from either start instead of 10 from the mean, the same translations).

    A variant acting on the decoder's state is fitted through the frozen decoder (its encoder outputs
    are what is kept, see :class:`~fairseq_speaker.onboarding.scoring.DecoderBatch`), the others on the
    cached logits.
    """

    def __init__(self, model, task, options: Optional[FitOptions] = None, cache_speakers: int = 16,
                 batch_sentences: int = 64, max_unknown_rate: float = 0.1, prior: Optional[SpeakerPrior] = None,
                 exact_updates: bool = False):
        self.model, self.task = model, task
        #: the largest share of words outside the model's dictionaries that :meth:`encode` accepts
        self.max_unknown_rate = max_unknown_rate
        self.bias = adaptable_bias(model, task)
        #: whether speakers are fitted through the decoder (a variant acting on its state), not on cached logits
        self.through_decoder = bool(self.bias.acts_on_state)
        self.options = options or FitOptions()
        self.cache_speakers = cache_speakers
        self.batch_sentences = batch_sentences
        #: the sentences each speaker was adapted on here
        self.sentences: Dict[str, List[Pair]] = {}
        self._scores: "OrderedDict[str, List[Scored]]" = OrderedDict()
        #: through the decoder: the quadratic model of each speaker's last fit, for their incremental updates
        self._curvatures: Dict[str, Curvature] = {}
        self.exact_updates = exact_updates
        self.mean_speaker = self.bias.new_speaker_rows(1, "mean")
        #: the speaker rows the model had when the adapter was made: where new speakers' neighbours are looked for
        self.known_speakers = len(self.task.speaker_dictionary)
        # (memory, its index) where the neighbours are looked for
        self._words_index: Optional[Tuple[SpeakerWords, WordsIndex]] = None
        # likely_start's candidates, centre, normalizers; () where it has none
        self._likely: Optional[Tuple[Tensor, ...]] = None
        #: the prior new speakers are fitted under (:mod:`fairseq_speaker.onboarding.prior`, saved in the
        #: checkpoint by fairseq-speaker-refit); None: pulled towards the mean speaker with ``options.l2``
        self.prior = prior
        torch.optim.LBFGS([torch.zeros(1, requires_grad=True)])  # torch's first optimizer costs ~1 s: not in a fit

    # -- what a fit reads of the sentences ----------------------------------------------------------
    def score(self, pairs: Sequence[Pair], batch_size: Optional[int] = None) -> TokenScores:
        cfg = self.task.cfg
        return score_tokens(self.model, pairs, self.task.source_dictionary, self.task.target_dictionary,
                            left_pad_source=getattr(cfg, "left_pad_source", True),
                            left_pad_target=getattr(cfg, "left_pad_target", False),
                            batch_size=batch_size or self.batch_sentences)

    def chunks(self, pairs: Sequence[Pair], batch_size: Optional[int] = None) -> List[Scored]:
        """What the fit reads of some sentences: their scores (a bias on the logits), or the encoder's outputs
        for the frozen decoder (a variant acting on the decoder's state)."""
        if not self.through_decoder:
            return [self.score(pairs, batch_size)]
        cfg = self.task.cfg
        return list(decoder_batches(self.model, pairs, self.task.source_dictionary, self.task.target_dictionary,
                                    left_pad_source=getattr(cfg, "left_pad_source", True),
                                    left_pad_target=getattr(cfg, "left_pad_target", False),
                                    batch_size=batch_size or self.batch_sentences))

    def _cached(self, name: str) -> List[Scored]:
        chunks = self._scores.get(name) or self.chunks(self.sentences[name])
        self._remember(name, chunks)
        return chunks

    # -- adding and updating speakers ---------------------------------------------------------------
    def adapt(self, sentences: Dict[str, List[Pair]], heldout: Optional[Dict[str, List[Pair]]] = None,
              replace: bool = False, fit_shared: bool = False) -> Dict[str, FitReport]:
        """Fit each speaker of ``sentences`` (name -> sentence pairs) from the mean speaker and put
        them in the model: new names are added, known ones need ``replace``."""
        for name in sentences:  # before any fit: a name the speaker files' label rules refuse
            problem = new_label_problem(name, self.task.speaker_dictionary)
            if problem:
                raise OnboardingError(f"cannot add a speaker: {problem}")
        empty = [name for name, pairs in sentences.items() if not pairs]
        if not sentences or empty:
            raise OnboardingError("no sentences to adapt on" + (f" for {', '.join(map(repr, empty))}" if empty else ""))
        known = [name for name in sentences if name in self.task.speaker_dictionary]  # onboarded here too
        if known and not replace:
            raise OnboardingError(
                f"speaker(s) {', '.join(map(repr, known[:5]))}{' ...' if len(known) > 5 else ''} already in the "
                f"model: pass --replace (replace=True) to fit them again from these sentences alone")
        heldout = heldout or {}
        names = list(sentences)
        for name in names:
            self.sentences[name] = list(sentences[name])
            self._scores.pop(name, None)
            self._curvatures.pop(name, None)
        groups = self.score_groups(names) if not fit_shared else None
        held = {name: self.chunks(heldout[name]) for name in names if heldout.get(name)}
        if fit_shared:
            problems = [self._cached(name) for name in names]
            start = [self.mean_speaker] * len(names)
            rows, shared, report = fit_speakers(self.bias, problems, self.options, init=start, prior=start,
                                                heldout=[held.get(name, []) for name in names] if held else None,
                                                fit_shared=True)
            reports = {name: report for name in names}
            with torch.no_grad():
                for key, value in shared.items():
                    self.bias.get_parameter(key).copy_(value)
        else:
            assert groups is not None  # scored unless the shared parameters are fitted
            rows, reports = [], {}
            for group in groups:  # the network scores a group's sentences in one pass; then each speaker is fitted
                for name, chunks in group:
                    start, prior = self.start_and_prior(chunks)
                    curvature: List[Optional[Curvature]] = []
                    r, _, report = fit_speakers(self.bias, [chunks], self.options, init=[start], prior=[prior],
                                                heldout=[held[name]] if name in held else None,
                                                curvature_out=curvature if self.through_decoder else None)
                    if curvature and curvature[0] is not None:
                        self._curvatures[name] = curvature[0]
                    rows.append(r[0])
                    reports[name] = report
        self._put(names, rows)
        self._remember_words(names)
        return reports

    def start_and_prior(self, chunks: List[Scored]):
        """Where a new speaker's fit starts and what it is pulled towards: the mean speaker, or under a mixture
        prior the component that explains the speaker's sentences best, and the mixture."""
        if self.prior is not None and self.prior.components > 1:  # a mixture: the fit finds the basin it starts in
            return best_start(self.prior, chunks, lambda rows, c: data_nll(self.bias, rows, c)), self.prior
        prior = self.mean_speaker if self.prior is None else self.prior
        start = None
        if self.through_decoder:
            start = self.neighbours_start(chunks)
            if start is None:
                start = self.likely_start(chunks)
        if start is None:
            start = self.mean_speaker if self.prior is None else self.prior.component_rows(0)
        return start, prior

    def score_groups(self, names: List[str]):
        """Speakers' scores, a group of at most ``batch_sentences`` sentences at a time (a generator, so
        that only one group's scores are in memory beyond the cache); through the decoder, a speaker at a time."""
        if self.through_decoder:
            for name in names:
                chunks = self.chunks(self.sentences[name])
                self._remember(name, chunks)
                yield [(name, chunks)]
            return
        group: List[str] = []
        for i, name in enumerate(names):
            group.append(name)
            size = sum(len(self.sentences[n]) for n in group)
            following = len(self.sentences[names[i + 1]]) if i + 1 < len(names) else None
            if following is None or size + following > self.batch_sentences:  # one batch, unless one speaker
                pairs = [p for n in group for p in self.sentences[n]]          # alone has more sentences
                scores = split_scores(self.score(pairs, batch_size=max(len(pairs), self.batch_sentences)),
                                      [len(self.sentences[n]) for n in group])
                for n, sc in zip(group, scores):
                    self._remember(n, [sc])
                yield [(n, [sc]) for n, sc in zip(group, scores)]
                group = []

    def _remember(self, name: str, chunks: List[Scored]) -> None:
        self._scores[name] = chunks
        self._scores.move_to_end(name)
        while len(self._scores) > self.cache_speakers:
            self._scores.popitem(last=False)

    def update(self, name: str, pairs: Sequence[Pair]) -> FitReport:
        """One or a few more sentences of a speaker: refit, starting from the speaker's current parameters.

        A speaker adapted here is refitted on all their sentences (as if adapted on them at once).
        A speaker the model was trained with has no sentences here: their trained parameters are the
        prior the new sentences move them away from. An unknown speaker is added (:meth:`adapt`).
        """
        if not pairs:
            raise OnboardingError(f"no sentences to update speaker {name!r} with")
        index = self.task.speaker_dictionary.index(name)
        if index is None:
            return self.adapt({name: list(pairs)})[name]
        current = self.bias.export_speakers([index])
        new_chunks = self.chunks(pairs)
        # the earlier sentences of a speaker fitted here through the decoder: as their fit left them, unless exact
        curvature = self._curvatures.pop(name, None) if not self.exact_updates else None
        if name in self.sentences:
            if curvature is None:
                chunks = self._cached(name) + new_chunks
                self._remember(name, chunks)
            else:
                chunks = new_chunks
                if name in self._scores:
                    self._remember(name, self._scores[name] + new_chunks)
            self.sentences[name] += list(pairs)
            prior = [self.prior if self.prior is not None else self.mean_speaker]
        else:
            chunks, prior = new_chunks, [current]
        out: List[Optional[Curvature]] = []
        # the strict tolerance even through the decoder: a sentence moves a speaker little, and the looser one stopped
        # most updates before their first step (the gradient of one sentence among many is small per word)
        options = dataclasses.replace(self.options, decoder_tolerance=self.options.tolerance)
        rows, _, report = fit_speakers(self.bias, [chunks], options, init=[current], prior=prior,
                                       curvatures=[curvature],
                                       curvature_out=out if self.through_decoder and name in self.sentences else None)
        if out and out[0] is not None:
            self._curvatures[name] = out[0]
        # the rows were refitted on all the speaker's sentences: they keep the words known, and take the new ones; the
        # onboarding record counts them (it lost the count: "?" in fairseq-speaker-speakers after an update)
        if name in self.sentences:
            count: Optional[int] = len(self.sentences[name])
        else:
            before = speaker_counts(self.task).get(name) or None
            count = before + len(pairs) if before is not None else None
        replace_speakers(self.model, self.task, [name], rows[0], keep_words=True, counts=[count])
        words = speaker_words_of(self.model)
        if words is not None:
            words.add_words(index, [target for _, target in pairs])
        return report

    def _remember_words(self, names: Sequence[str]) -> None:
        """The model's memory of its speakers' words (if it has one): ``names`` said the words of their sentences."""
        words = speaker_words_of(self.model)
        if words is None:
            return
        for name in names:
            words.set_words(self.task.speaker_dictionary.index(name), [target for _, target in self.sentences[name]])

    def _put(self, names: List[str], rows: List[Dict[str, Tensor]]) -> None:
        new = [(name, r) for name, r in zip(names, rows) if name not in self.task.speaker_dictionary]
        old = [(name, r) for name, r in zip(names, rows) if name in self.task.speaker_dictionary]
        if new:
            add_speakers(self.model, self.task, [n for n, _ in new], stacked_rows([r for _, r in new]),
                         counts=[len(self.sentences[n]) for n, _ in new])
        if old:
            replace_speakers(self.model, self.task, [n for n, _ in old], stacked_rows([r for _, r in old]))
