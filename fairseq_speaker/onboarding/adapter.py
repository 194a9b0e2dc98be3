"""The library behind onboarding: :class:`SpeakerAdapter`, which fits new speakers into a trained model on the frozen
network (``fairseq-speaker-adapt``, :class:`~fairseq_speaker.onboarding.translator.SpeakerTranslator`, refit,
onboarding-eval and the benchmarks use it), and the reading and grouping of adaptation sentences.

Only what the variant marks as the speakers' own parameters is learned (the V-vector of ``full``, the r weights of
``fact``, the embedding of ``proj``, ...); the network is frozen, and every speaker the model already had translates
exactly as before. A variant acting on the decoder's state (``hyper_lhuc``, ...) is fitted through the frozen decoder
rather than on cached logits (slower: a decoder pass per iteration).
"""

import dataclasses
import logging
import math
import unicodedata
from collections import OrderedDict
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from fairseq_speaker.data import read_lines, read_speaker_file
from fairseq_speaker.data.speaker_dictionary import new_label_problem, sentence_problem
from fairseq_speaker.modules.speaker_words import SpeakerWords, speaker_words_of
from fairseq_speaker.modules.words_index import WordsIndex
from fairseq_speaker.onboarding.checkpoint import (
    OnboardingError,
    adaptable_bias,
    add_speakers,
    replace_speakers,
    stacked_rows,
)
from fairseq_speaker.onboarding.fit import (
    Curvature,
    DecoderBatch,
    FitOptions,
    FitReport,
    Pair,
    Scored,
    TokenScores,
    data_nll,
    decoder_batches,
    fit_speakers,
    score_tokens,
    split_scores,
)
from fairseq_speaker.onboarding.prior import SpeakerPrior, best_start

logger = logging.getLogger(__name__)

#: without the speakers' words, a new speaker's fit through the decoder starts from the LIKELY_K known speakers
#: whose output bias makes their sentences most probable, among at most LIKELY_CANDIDATES of them (evenly spaced
#: through the table), whose bias rows are read LIKELY_CHUNK at a time
LIKELY_K = 30
LIKELY_CANDIDATES = 4096
LIKELY_CHUNK = 256


class SpeakerAdapter:
    """Adds and updates speakers of a loaded model (``model`` and its ``task``), in place.

    The network runs once over each speaker's sentences; the scores are kept for the
    ``cache_speakers`` most recent speakers, so that one more sentence for one of them
    (:meth:`update`) costs one forward pass of that sentence and a warm-started fit.
    Through the decoder, an update of a speaker fitted here fits the new sentences only, the earlier ones
    standing in as the quadratic model their fit left (:class:`~fairseq_speaker.onboarding.fit.Curvature`);
    ``exact_updates=True`` refits on all of them instead.

    New speakers are pulled towards the mean speaker of the model as it was when the adapter was made (or the prior
    saved in the checkpoint), so that a speaker's fit does not depend on who was added before. They start from it,
    except through the decoder, where each evaluation of the objective is a pass of the decoder. There a new
    speaker's fit starts from the rows of known speakers (the speakers the model had when the adapter was made) like
    them: in a model that remembers its speakers' words (``fairseq-speaker-words``), the speakers whose words are
    most like theirs (the neighbours of :mod:`~fairseq_speaker.modules.speaker_words`, weighted as there); else, for
    a variant with an output bias of its own, the speakers whose output bias makes their target words most probable
    (:meth:`likely_start`). The objective is the same; it starts nearer its end (on the styles corpus, for a speaker
    of 10 sentences, a median of 7 evaluations of the objective from either start instead of 10 from the mean, the
    same translations).

    A variant acting on the decoder's state is fitted through the frozen decoder (its encoder outputs
    are what is kept, see :class:`~fairseq_speaker.onboarding.fit.DecoderBatch`), the others on the
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

    # -- input -----------------------------------------------------------------------------------
    def encode(self, sources: Sequence[str], targets: Sequence[str],
               encode_fn: Optional[Callable[[str], str]] = None,
               where: str = "the adaptation sentences",
               encode_target_fn: Optional[Callable[[str], str]] = None) -> List[Pair]:
        """Token ids of sentence pairs (``encode_fn``: the model's tokenizer/BPE, if the text is raw;
        ``encode_target_fn``: the same for the targets, in the target language, by default ``encode_fn``)."""
        check_pair_counts(sources, targets)
        encode_fn = encode_fn or (lambda x: x)
        encode_target_fn = encode_target_fn or encode_fn
        pairs = self._token_ids(sources, targets, encode_fn, encode_target_fn)
        self.check_unknown_words(pairs, where, nfd=lambda: self._nfd(sources, targets, encode_fn, encode_target_fn))
        return pairs

    def _token_ids(self, sources: Sequence[str], targets: Sequence[str], encode_fn: Callable[[str], str],
                   encode_target_fn: Callable[[str], str]) -> List[Pair]:
        src, tgt = self.task.source_dictionary, self.task.target_dictionary
        return [(src.encode_line(encode_fn(s), add_if_not_exist=False).long(),
                 tgt.encode_line(encode_target_fn(t), add_if_not_exist=False).long())
                for s, t in zip(sources, targets)]

    def _unknown(self, pairs: Sequence[Pair]) -> Tuple[int, int]:
        """``(words outside the model's dictionaries, words)`` of ``pairs``."""
        words = unknown = 0
        for source, target in pairs:
            for tokens, dictionary in ((source, self.task.source_dictionary), (target, self.task.target_dictionary)):
                body = tokens[:-1]  # </s> is not a word
                words += int(body.numel())
                unknown += int((body == dictionary.unk()).sum())
        return unknown, words

    def _nfd(self, sources: Sequence[str], targets: Sequence[str], encode_fn: Callable[[str], str],
             encode_target_fn: Callable[[str], str]) -> Optional[str]:
        """Why the words of text with many unknown words are unknown, when it is that the text is not in Unicode
        NFC (an accent written as a character of its own, NFD: macOS file names, some editors) and the same text in
        NFC has fewer unknown words: which side and line, and how to convert it; None otherwise."""
        first = {side: next((i for i, text in enumerate(texts, 1) if not unicodedata.is_normalized("NFC", text)), None)
                 for side, texts in (("source", sources), ("target", targets))}
        if not any(first.values()):
            return None
        nfc = [unicodedata.normalize("NFC", text) for text in sources], [unicodedata.normalize("NFC", text)
                                                                           for text in targets]
        if self._unknown(self._token_ids(*nfc, encode_fn, encode_target_fn))[0] >= \
                self._unknown(self._token_ids(sources, targets, encode_fn, encode_target_fn))[0]:
            return None
        sides = " and ".join(f"the {side} text (from its line {line})" for side, line in first.items() if line)
        return (f"{sides} is in Unicode NFD, an accent written as a character of its own, while the model's words are "
                f"NFC: convert the file(s) to NFC, e.g. python -c \"import sys, unicodedata; "
                f"sys.stdout.write(unicodedata.normalize('NFC', sys.stdin.read()))\" < FILE > FILE.nfc "
                f"(or uconv -x NFC < FILE > FILE.nfc), and give those")

    def check_unknown_words(self, pairs: Sequence[Pair], where: str = "the adaptation sentences",
                            nfd: Optional[Callable[[], Optional[str]]] = None) -> float:
        """The share of words of ``pairs`` outside the model's dictionaries (``<unk>``), refused above
        :attr:`max_unknown_rate`: text in another form than the training data's (not tokenized, other casing,
        no BPE, NFD rather than NFC: ``nfd`` tells that one) would teach the speaker to say ``<unk>``."""
        unknown, words = self._unknown(pairs)
        rate = unknown / max(words, 1)
        if rate > self.max_unknown_rate:
            found = f"{where}: {100 * rate:.0f}% of the words ({unknown} of {words}) are not in the model's " \
                    f"dictionaries (more than {100 * self.max_unknown_rate:.0f}%): "
            why = nfd() if nfd is not None else None
            if why:
                raise OnboardingError(found + why)
            raise OnboardingError(
                found + "the text is probably not in the form of the training data (tokenized, lowercased, "
                "BPE-encoded); give the model's --tokenizer / --bpe options (and --bpe-codes), or prepare the text as "
                "the training data was; a max_unknown_rate of 1 (--max-unknown-rate 1 on the command line) accepts "
                "it as it is")
        return rate

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

    def neighbours_start(self, chunks: List[Scored]) -> Optional[Dict[str, Tensor]]:
        """The weighted mean rows of the speakers whose words are most like those of ``chunks``' targets, among the
        speakers the model had when the adapter was made; None for a model without its speakers' words, or when no
        such speaker shares a word."""
        words = speaker_words_of(self.model)
        if words is None:
            return None
        if self._words_index is None or self._words_index[0] is not words:
            # the known speakers' words as they are now: the speakers added later are no one's neighbours, so their
            # words need no new index (at a million speakers a new one takes 40 ms: a product over everyone's words)
            self._words_index = (words, words.index())
        rows, weights = words.most_like([c.target for c in chunks], among=self.known_speakers,
                                        index=self._words_index[1])
        if not len(rows):
            return None
        table = self.bias.export_speakers(rows.tolist())
        weights = torch.from_numpy(weights).float()
        return {name: torch.tensordot(weights.to(value.device), value.float(), dims=1).unsqueeze(0).to(value.dtype)
                for name, value in table.items()}

    def likely_start(self, chunks: List[Scored]) -> Optional[Dict[str, Tensor]]:
        """The known speakers whose output bias makes the target words of ``chunks`` most probable, and their mean
        rows weighted by that probability: None for a variant without an output bias of its speakers' own (or one
        that reads the source).

        Speaker t's probability of the words is taken, to the first order, as that of a unigram model: the target
        words' frequencies in training (u), reweighted by the speaker's bias away from the known speakers' mean bias
        (c_t = b_t - mean b), so that for target words y_1..y_T::

            score(t) = sum_i c_t(y_i) - T log sum_w u(w) exp(c_t(w))

        and the LIKELY_K best known speakers are weighted by softmax(score). At most LIKELY_CANDIDATES known speakers
        are read, evenly spaced through the table."""
        likely = self._likely_candidates()
        if likely is None:
            return None
        ids, centre, lognorm = likely
        batches = [c for c in chunks if isinstance(c, DecoderBatch)]  # a fit through the decoder's: its batches
        targets = torch.cat([c.target[c.target.ne(c.pad)].reshape(-1) for c in batches]).cpu()
        counts = torch.bincount(targets, minlength=centre.numel()).to(centre.dtype)
        words = counts.nonzero().squeeze(1)
        counts = counts[words]
        at_words = torch.cat(list(self._output_biases(ids, words)))
        scores = (at_words - centre[words]) @ counts - counts.sum() * lognorm
        best = scores.topk(min(LIKELY_K, len(ids)))
        weights = torch.softmax(best.values, 0)
        table = self.bias.export_speakers(ids[best.indices].tolist())
        return {name: torch.tensordot(weights.to(value.device), value.float(), dims=1).unsqueeze(0).to(value.dtype)
                for name, value in table.items()}

    def share_starts(self, other: "SpeakerAdapter") -> None:
        """Take ``other``'s known speakers for :meth:`likely_start`, if it has made them and this adapter has not (an
        adapter of a copy of ``other``'s model: the same known speakers, whose normalizers cost a pass over their
        bias rows to make)."""
        if self._likely is None and other._likely is not None:
            self._likely = other._likely

    def _output_biases(self, ids: Tensor, words: Optional[Tensor] = None):
        """The output bias rows ``[n, V]`` (float, on the CPU) of the known speakers ``ids``, or their columns at
        ``words`` only ``[n, W]``, LIKELY_CHUNK speakers at a time."""
        device = next(self.bias.parameters()).device
        with torch.no_grad():
            for chunk in ids.split(LIKELY_CHUNK):
                chunk = chunk.to(device)
                rows = self.bias.lookup(chunk) if words is None else self.bias.lookup_words(chunk, words.to(device))
                assert rows is not None  # a variant with an output bias of its speakers' own
                yield rows.float().cpu()

    def _likely_candidates(self) -> Optional[Tuple[Tensor, ...]]:
        """:meth:`likely_start`'s known speakers, their mean bias and each one's normalizer, made at its first call
        (the known speakers do not change; the speakers added later are no one's start)."""
        if self._likely is None:
            bias, known = self.bias, self.known_speakers
            if not bias.acts_on_output or bias.reads_source or not bias.speaker_parameters() or known < 1:
                self._likely = ()
                return None
            ids = torch.arange(0, known, max(1, math.ceil(known / LIKELY_CANDIDATES)))
            centre = sum(rows.sum(0) for rows in self._output_biases(ids)) / len(ids)
            dictionary = self.task.target_dictionary
            frequency = torch.tensor(dictionary.count, dtype=torch.float64)[:centre.numel()]
            frequency[:dictionary.nspecial] = 0.0  # padding, beginning, end, unknown: not words of a speaker's
            log_u = torch.log(frequency / frequency.sum()).to(centre.dtype) if frequency.sum() > 0 else \
                torch.full_like(centre, -math.log(centre.numel()))
            lognorm = torch.cat([torch.logsumexp(rows - centre + log_u, dim=1) for rows in self._output_biases(ids)])
            self._likely = (ids, centre, lognorm)
        return self._likely or None

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
        # the rows were refitted on all the speaker's sentences: they keep the words known, and take the new ones
        replace_speakers(self.model, self.task, [name], rows[0], keep_words=True)
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


# -- reading the adaptation files ---------------------------------------------------------------------


def read_adaptation_files(prefix: str, source_lang: str, target_lang: str,
                          speaker_suffix: str) -> Tuple[List[str], List[str], List[str]]:
    """The sentences and labels of ``PREFIX.{src}``, ``PREFIX.{tgt}``, ``PREFIX.{suffix}``, checked to align."""
    paths = [f"{prefix}.{source_lang}", f"{prefix}.{target_lang}"]
    sources, targets = (read_lines(p) for p in paths)
    if len(sources) != len(targets):
        raise OnboardingError(f"{paths[0]} has {len(sources)} lines but {paths[1]} has {len(targets)}: "
                              f"they must hold the same sentences, one a line, in the same order")
    if not sources:
        raise OnboardingError(f"{paths[0]} is empty: there are no sentences to adapt on")
    for path, lines in zip(paths, (sources, targets)):
        for number, line in enumerate(lines, 1):
            problem = sentence_problem(line)
            if problem:  # a speaker fitted on an empty pair learns the end of sentence alone
                raise OnboardingError(f"{path}:{number}: the sentence is {problem}: give the sentence, or remove the "
                                      f"line from the three files")
    labels = read_speaker_file(f"{prefix}.{speaker_suffix}", len(sources),
                               hint=f"; put the speaker of each line of {paths[0]} on the same line")
    return sources, targets, labels


def check_pair_counts(sources: Sequence[str], targets: Sequence[str],
                      named: Tuple[str, str] = ("source sentences", "target sentences")) -> None:
    """Refuse sentence pairs whose two lists differ in length; ``named``: the lists' names in the message."""
    if len(sources) != len(targets):
        raise OnboardingError(f"{len(sources)} {named[0]} but {len(targets)} {named[1]}: give one target sentence for "
                              f"each source sentence")


def group_by_speaker(labels: Sequence[str], pairs: Sequence[Pair]) -> Dict[str, List[Pair]]:
    grouped: Dict[str, List[Pair]] = {}
    for label, pair in zip(labels, pairs):
        grouped.setdefault(label, []).append(pair)
    return grouped


# -- the command ------------------------------------------------------------------------------------


