"""The speaker task's decoding: each input sentence's speaker, fairseq-interactive's input lines, and the generator.

:class:`SpeakerInferenceMixin` is the part of :class:`~fairseq_speaker.tasks.speaker_translation.SpeakerTranslationTask`
that fairseq-generate, fairseq-interactive and the hub interface (``SpeakerTranslator``) call to decode: the speakers of
the sentences given for inference (``--speaker``, ``--speaker-per-line``, ``set_inference_speakers``), the input lines
answered by an empty translation, the generator (``--beam-stop``, the speakers' words fused into each step, the
searches refused), and ``inference_step``. Its state is made by :meth:`SpeakerInferenceMixin.init_inference`, which the
task's ``__init__`` calls; the rest of the task (the speaker dictionary, the speaker token) it reads from the task.
"""

import logging
import re
import sys
from collections import deque
from typing import Deque, Dict, List, Optional, Tuple

import torch
from fairseq import utils

from fairseq_speaker.allowed_tokens import check_ended, restricted
from fairseq_speaker.data import SpeakerDataError, SpeakerDataset
from fairseq_speaker.data.sentence_checks import sentence_problem
from fairseq_speaker.data.speaker_labels import is_retired_name, label_problem, live_names, retired_among
from fairseq_speaker.runtime import fairseq_command

# the task's logger: its messages (the input's lines, the speakers) keep the name a user filters them by
logger = logging.getLogger("fairseq_speaker.tasks.speaker_translation")

#: when the beam search ends a sentence (``--beam-stop``): ``fairseq``, once ``beam`` hypotheses have ended (fairseq's
#: own rule); ``unbeaten``, once ``beam`` have ended and no live one scores better than the worst of them
#: (:class:`fairseq_speaker.sequence_generator.UnbeatenStopGenerator`)
BEAM_STOPS = ["fairseq", "unbeaten"]

#: the byte-order mark some editors write at the start of a UTF-8 file: fairseq-interactive reads it as part of the
#: first line's first word (or of its speaker's label with --speaker-per-line)
BOM = "\ufeff"


class SpeakerInferenceMixin:
    """Decoding with speakers; mixed into the speaker task before fairseq's translation task (see the module's text)."""

    # what it reads of the task: fairseq's TranslationTask (cfg, src_dict, tgt_dict, source_dictionary,
    # target_dictionary, max_positions) and the speaker task (speaker_dictionary, uses_speaker_token,
    # speaker_token_ids, _speaker_prefix, take_restored_speakers); and super() is fairseq's TranslationTask
    # (pyproject.toml's mypy section)

    def init_inference(self) -> None:
        """The state of decoding: called by the task's ``__init__``."""
        # fairseq-interactive drops net_input["speakers"] between batching and
        # inference_step: the batches' speakers wait here, checked against their tokens
        self._pending: Deque[Tuple[torch.Tensor, torch.Tensor]] = deque()
        self._interactive_labels: Optional[List[str]] = None
        self._interactive_numbers: Optional[List[int]] = None  # their input line numbers
        self._interactive_positions: Optional[List[int]] = None  # their places in fairseq-interactive's buffer
        self._input_lines = 0
        self._emptied_lines = 0  # input lines emptied (too long, not UTF-8) not yet answered
        self._model_positions: List = []  # each built model's max_positions()

    def note_model_positions(self, model) -> None:
        """A model the task built: its ``max_positions()`` bound fairseq-interactive's longest source."""
        self._model_positions.append(model.max_positions())

    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        """fairseq-interactive's input lines, counted from the start of the input (for messages). With
        --speaker-per-line, a line without 'SPEAKER<TAB>' or with a label that is not one is reported and
        skipped; the session goes on."""
        if self.cfg.speaker_file is not None:  # read for a binarized split only: the input lines' speakers are others
            raise SpeakerDataError(
                f"--speaker-file {self.cfg.speaker_file} gives the speakers of a binarized split (fairseq-generate); "
                f"fairseq-interactive's input lines take --speaker NAME or --speaker-per-line: leave it out")
        first = self._input_lines + 1
        self._input_lines += len(lines)
        if first == 1 and lines and lines[0].startswith(BOM):  # an editor's mark of the input's encoding, no word
            lines = [lines[0][len(BOM):], *lines[1:]]
        numbers = list(range(first, first + len(lines)))
        if self.cfg.speaker_per_line:
            labels, sentences, kept = [], [], []
            for number, line in zip(numbers, lines):
                label, sep, sentence = line.partition("\t")
                label = label.strip()
                problem = label_problem(label) if sep else "expected 'SPEAKER<TAB>sentence' (--speaker-per-line)"
                problem = problem or self._lookalike_problem(label)
                if problem:
                    logger.warning(f"<input>:{number}: {problem}, got {line!r}; line skipped")
                    continue
                labels.append(label)
                sentences.append(sentence)
                kept.append(number)
            self._interactive_labels, numbers, lines = labels, kept, sentences
        self._interactive_numbers = numbers
        # a sentence's id is its line's place in the buffer, skipped lines counted (fairseq adds the buffer's start,
        # which counts them): H-1 was the translation of the buffer's 3rd line, and line 1 the skipped one
        self._interactive_positions = [number - first for number in numbers]
        tokens, lengths = super().get_interactive_tokens_and_lengths(lines, encode_fn)
        limit = self._source_positions()
        for k, (number, line) in enumerate(zip(numbers, lines)):
            problem = untranslatable_line(line, lengths[k], limit)
            if problem:  # answered by an empty translation (empty_sources_left_empty), as an empty line
                logger.warning(f"<input>:{number}: translated as an empty sentence: {problem}")
                tokens[k], lengths[k] = tokens[k].new_tensor([self.source_dictionary.eos()]), 1
                self._emptied_lines += 1
        return tokens, lengths

    def _source_positions(self) -> Optional[int]:
        """The most source tokens the task and the models it built take (fairseq's max_positions), or None."""
        limits = utils.resolve_max_positions(self.max_positions(), *self._model_positions)
        source = limits[0] if isinstance(limits, tuple) else limits
        return int(source) if source is not None and source < float("inf") else None

    def set_inference_speakers(self, labels: List[str]) -> None:
        """The speakers of the sentences given to the next :meth:`build_dataset_for_inference` (as fairseq's
        hub interface builds it: ``GeneratorHubInterface.translate``), one label per sentence."""
        self._interactive_labels = list(labels)
        self._interactive_numbers = self._interactive_positions = None

    def _default_labels(self, n: int) -> List[str]:
        if self.cfg.speaker is None:
            raise SpeakerDataError(
                "no speaker given for the input: pass --speaker NAME, or --speaker-per-line "
                "with input lines 'SPEAKER<TAB>sentence'"
            )
        problem = self._lookalike_problem(self.cfg.speaker)
        if problem:
            raise SpeakerDataError(f"--speaker: {problem}")
        return [self.cfg.speaker] * n

    def _lookalike_problem(self, label: str) -> Optional[str]:
        """Why ``label``, not a speaker of the model, must not get the unknown-speaker policy: it looks like one of
        them (docs/reliability.md, "Speaker labels"), or it is empty; None otherwise."""
        if label in self.speaker_dictionary:
            if is_retired_name(label):  # saved with a model by SpeakerTranslator.save after retire_speakers
                return (f"{label!r} names the rows of a retired speaker, not a speaker (SpeakerTranslator."
                        f"retire_speakers): restore it (restore_speakers) to translate as it")
            return None
        if not label.strip():
            return "an empty speaker name: give a speaker's name"
        twin = self.speaker_dictionary.lookalike(label)
        if twin is not None:
            return (f"speaker {label!r} looks like {twin!r}, a speaker of the model, but is not it (invisible "
                    f"characters, another space or another Unicode normalization): write {twin!r}")
        return None

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        self.take_restored_speakers()  # a model loaded since: its speakers are the ones the labels name
        dataset = super().build_dataset_for_inference(src_tokens, src_lengths, constraints=constraints)
        labels, numbers, positions = self._interactive_labels, self._interactive_numbers, self._interactive_positions
        self._interactive_labels = self._interactive_numbers = self._interactive_positions = None
        if labels is None:
            labels = self._default_labels(len(dataset))
        elif len(labels) != len(dataset):
            raise SpeakerDataError(
                f"{len(labels)} speakers for {len(dataset)} sentences: give one speaker per sentence")
        policy = self.cfg.unknown_speaker
        if numbers is None or len(numbers) != len(labels):  # the Python API's speakers: their places in its list
            hub = True
            places = [f"speakers[{i}]" for i in range(len(labels))]
            ids = self.speaker_dictionary.encode(labels, policy, places=places, advice=(
                "give from_pretrained unknown_speaker='mean' (the mean speaker) or 'none' (no bias) to translate "
                "unseen speakers"))
        else:  # fairseq-interactive's input lines
            hub, places = False, [str(number) for number in numbers]
            ids = self.speaker_dictionary.encode(labels, policy, source="<input>", lines=numbers)
        unknown: Dict[str, List[str]] = {}  # one warning per label, naming its lines
        for place, label, i in zip(places, labels, ids.tolist()):
            if i < 0:
                unknown.setdefault(label, []).append(place)
        speakers = self.speaker_dictionary
        for label, where in unknown.items():
            more = f" and {len(where) - 3} more{'' if hub else ' lines'}" if len(where) > 3 else ""
            shown = ", ".join(where[:3]) + more if hub else "<input>:" + ",".join(where[:3]) + more
            how = f"unknown_speaker='{policy}'" if hub else f"--unknown-speaker {policy}"
            logger.warning(f"{shown}: speaker {label!r} is not among the model's {len(live_names(speakers.names))} "
                           f"speakers: translated with {how}{retired_among([label], speakers.names)}")
        if positions is not None and (len(positions) != len(dataset) or positions == list(range(len(dataset)))):
            positions = None  # not fairseq-interactive's lines, or none skipped: the ids are the sentences' places
        return _InferenceSpeakerDataset(dataset, ids, self._pending, positions)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        _check_inference_input(generator, sample, constraints)
        net_input = sample["net_input"]
        if "speakers" not in net_input:
            net_input["speakers"] = self._speakers_of(net_input["src_tokens"])
        elif self._pending and torch.equal(self._pending[0][0], net_input["src_tokens"].cpu()):
            self._pending.popleft()  # a caller that kept the speakers of a batch built here
        if not self.uses_speaker_token:
            return self._ended(generator, sample, super().inference_step(
                generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints
            ))
        # force each sentence's speaker token; an unseen speaker's (pad) is left to the model
        speaker_prefix = self._speaker_prefix(net_input["speakers"], self.tgt_dict.pad()).unsqueeze(1)
        if prefix_tokens is None:
            prefix_tokens = speaker_prefix
        elif bool(prefix_tokens[:, 0].eq(self.tgt_dict.pad()).all()):
            # fairseq-generate's --prefix-size: the references' first words, whose speaker token is padding in the
            # targets (an input, not a prediction: SpeakerDataset); left so, the search chose any speaker's token
            prefix_tokens = torch.cat([speaker_prefix.to(prefix_tokens), prefix_tokens[:, 1:]], dim=1)
        else:  # a caller's prefix of words (the hub's inference_step_args): the speaker token goes before them
            prefix_tokens = torch.cat([speaker_prefix.to(prefix_tokens), prefix_tokens], dim=1)
        hypos = self._ended(generator, sample, super().inference_step(
            generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints
        ))
        speaker_tokens = self.speaker_token_ids()
        for sentence in hypos:
            for hypo in sentence:
                if len(hypo["tokens"]) and bool((speaker_tokens == hypo["tokens"][0].cpu()).any()):
                    _strip_first_token(hypo)
        return hypos

    def _ended(self, generator, sample, hypos):
        """The search's hypotheses, each empty source answered by an empty translation, and a sentence no
        translation of which could end refused (:func:`check_ended`)."""
        from fairseq.sequence_generator import SequenceGenerator

        from fairseq_speaker.sequence_generator import empty_source_rows, empty_sources_left_empty

        reported = 0
        if self._emptied_lines and isinstance(generator, SequenceGenerator):  # lines emptied and logged below
            reported = min(self._emptied_lines, len(empty_source_rows(sample, self.src_dict)))
            self._emptied_lines -= reported
        hypos = empty_sources_left_empty(generator, sample, hypos, self.src_dict, self.tgt_dict, reported=reported)
        return check_ended(generator, sample, hypos)

    def build_generator(self, models, args, seq_gen_cls=None, extra_gen_cls_kwargs=None, **kwargs):
        self.take_restored_speakers()  # the models were loaded: the loaded split's labels name their speakers
        if self.cfg.speaker_per_line and self.cfg.speaker is not None:
            raise SpeakerDataError(
                f"--speaker {self.cfg.speaker} and --speaker-per-line both give the input's speakers (every line's, "
                f"or each line's own): give one of them")
        if self.cfg.speaker_per_line and getattr(args, "constraints", None):
            # fairseq-interactive cuts each line at its tabs for the constraints before the task sees it: the
            # speaker label would be translated and the sentence taken for a constraint
            raise SpeakerDataError(
                "--speaker-per-line and --constraints both read tab-separated fields of the input lines: give the "
                "speaker with --speaker NAME (every line), or leave out --constraints")
        if self.uses_speaker_token:
            # fairseq-generate strips these from the references (T- lines) and from hypotheses
            extra_gen_cls_kwargs = dict(extra_gen_cls_kwargs or {})
            strip = set(extra_gen_cls_kwargs.get("symbols_to_strip_from_output") or ())
            extra_gen_cls_kwargs["symbols_to_strip_from_output"] = strip | set(self.speaker_token_ids().tolist())
        from fairseq_speaker.sequence_generator import (
            UnbeatenStopGenerator,
            accepts_tokens_to_suppress,
            by_position,
            check_interactive,
            check_search,
            filler_symbols,
        )

        fillers = filler_symbols(self.target_dictionary)
        if fillers and accepts_tokens_to_suppress(seq_gen_cls):
            # the words fairseq pads the dictionary with are never a translation's: a beam seldom reaches them, but
            # sampling drew them (a tiny model at temperature 1 wrote "madeupword0004")
            extra_gen_cls_kwargs = dict(extra_gen_cls_kwargs or {})
            given = list(extra_gen_cls_kwargs.get("tokens_to_suppress") or ())
            extra_gen_cls_kwargs["tokens_to_suppress"] = given + [f for f in fillers if f not in given]

        check_search(args, len(self.target_dictionary))
        if fairseq_command() == "interactive":
            check_interactive(args, sys.argv[1:])
        # the task's option (fairseq-generate, -interactive) or the generation's (SpeakerTranslator's beam_stop=)
        beam_stop = getattr(args, "beam_stop", None) or self.cfg.beam_stop
        if beam_stop not in BEAM_STOPS:
            raise SpeakerDataError(f"beam_stop must be one of {', '.join(BEAM_STOPS)}, got {beam_stop!r}")
        if beam_stop == "unbeaten":
            if getattr(args, "score_reference", False):  # fairseq's scorer of the references: no search to stop
                raise SpeakerDataError(
                    "--beam-stop unbeaten says when a beam search ends a sentence, and --score-reference runs none "
                    "(it scores the references): leave out --beam-stop, or --score-reference")
            if seq_gen_cls is not None or getattr(args, "print_alignment", False):
                raise SpeakerDataError(
                    "--beam-stop unbeaten changes fairseq's beam search, and this generator is another "
                    f"({'--print-alignment' if seq_gen_cls is None else seq_gen_cls.__name__}'s): leave out "
                    "--beam-stop, or --print-alignment")
            if getattr(args, "sampling", False):
                # sampling draws each hypothesis's words: searching on for better ones would keep the likeliest of
                # more draws (no longer samples), and ends in fairseq's assertion where every draw ended at once
                raise SpeakerDataError(
                    "--beam-stop unbeaten searches on for better hypotheses, and --sampling draws them: the best of "
                    "more draws would no longer be samples; leave out --beam-stop unbeaten, or --sampling")
            seq_gen_cls = UnbeatenStopGenerator
        models = self._with_speaker_words(models, args, seq_gen_cls)
        generator = super().build_generator(
            models, args, seq_gen_cls=seq_gen_cls, extra_gen_cls_kwargs=extra_gen_cls_kwargs, **kwargs
        )
        hidden = self.speaker_token_ids().tolist() if self.uses_speaker_token else ()
        return restricted(by_position(generator, self.target_dictionary), args, kwargs.get("prefix_allowed_tokens_fn"),
                          self.target_dictionary, hidden)

    @staticmethod
    def _with_speaker_words(models, args, seq_gen_cls):
        """``models`` as the ensemble that fuses the speakers' words into each step (fairseq_speaker/
        sequence_generator.py), where the generator is fairseq's beam search (sampling from the fused step
        normalized); a generator of another kind (``--print-alignment``'s, ``--score-reference``'s scorer, one a
        caller passes) is refused for a model whose words would be left out, and so is an ensemble whose models
        remember different words."""
        from fairseq.sequence_generator import EnsembleModel, SequenceGenerator

        from fairseq_speaker.sequence_generator import SpeakerWordsEnsemble, ensemble_memory

        if isinstance(models, EnsembleModel):
            return models
        words = ensemble_memory(models)
        if words is not None and getattr(args, "score_reference", False):
            raise SpeakerDataError(
                "this model remembers its speakers' words (fairseq-speaker-words), and --score-reference scores the "
                "references with the network alone: leave out --score-reference, or score with the checkpoint the "
                "words were written from")
        from fairseq_speaker.sequence_generator import UnbeatenStopGenerator

        if seq_gen_cls in (None, SequenceGenerator, UnbeatenStopGenerator) and not getattr(args, "print_alignment",
                                                                                            False):
            return SpeakerWordsEnsemble(models, normalize=bool(getattr(args, "sampling", False)))
        if words is not None:
            raise SpeakerDataError(
                "this model remembers its speakers' words (fairseq-speaker-words), which only fairseq's beam search "
                "adds to its steps: leave out --print-alignment, or decode the checkpoint the words were written from")
        return models

    def _inference_with_bleu(self, generator, sample, model):  # a private method of fairseq's (fairseq_patches)
        if self.uses_speaker_token:  # the references start with the speaker token too
            sample = dict(sample, target=sample["target"][:, 1:])
        return super()._inference_with_bleu(generator, sample, model)

    def _speakers_of(self, src_tokens: torch.Tensor) -> torch.Tensor:
        """The speakers of a batch built by :meth:`build_dataset_for_inference` and passed on without them."""
        if self._pending:
            tokens, speakers = self._pending.popleft()
            if torch.equal(tokens, src_tokens.cpu()):
                return speakers.to(src_tokens.device)
            raise RuntimeError("internal error: the batch to translate is not the batch last built")
        labels = self._default_labels(src_tokens.size(0))
        return self.speaker_dictionary.encode(labels, self.cfg.unknown_speaker, source="--speaker").to(
            src_tokens.device
        )


#: a character Python's surrogateescape gives each byte of standard input that is not UTF-8
_NOT_UTF8 = re.compile("[\udc80-\udcff]")


def untranslatable_line(line: str, length: int, limit: Optional[int]) -> Optional[str]:
    """Why an input line of fairseq-interactive cannot be translated as written (``length``: its tokens with the end
    one; ``limit``: the model's most source positions), or None: bytes that are not UTF-8 (each a word unknown to the
    model), or more tokens than the model takes (fairseq's check ends the session in a traceback)."""
    bad = _NOT_UTF8.search(line)
    if bad:
        return (f"not valid UTF-8 (byte 0x{ord(bad.group()) - 0xDC00:02x} at character {bad.start() + 1}): give "
                f"UTF-8 text (iconv -f latin1 -t utf-8, for example)")
    carriage = line.find("\r")
    if carriage >= 0:  # two lines of a file whose lines end in a lone CR (old Mac): two sentences read as one
        return (f"a carriage return at character {carriage + 1}, which ends a line in some files: the line holds two "
                f"sentences or more; give one a line (tr '\\r' '\\n' turns such line ends into line feeds)")
    blank = sentence_problem(line) if line.strip() else None  # an empty or blank line is answered empty already
    if blank:
        return f"{blank}: give a sentence"
    if limit is not None and length > limit:
        return (f"{length} tokens (with the end of sentence), more than the {limit} source positions the model "
                f"takes: split the line into sentences")
    return None


def _check_inference_input(generator, sample, constraints) -> None:
    """Refuse a search whose input the sentences do not carry: lexical constraints (fairseq-interactive reads them from
    each input line; fairseq-generate's binarized split has none, and fairseq's search fails on None), references to
    score (fairseq-interactive's and the hub's sentences have none)."""
    from fairseq.search import LexicallyConstrainedBeamSearch
    from fairseq.sequence_scorer import SequenceScorer

    if isinstance(getattr(generator, "search", None), LexicallyConstrainedBeamSearch) and constraints is None:
        raise SpeakerDataError(
            "--constraints: these sentences carry no constraints (fairseq-interactive reads them from each input "
            "line, after a tab; a binarized split has none): leave out --constraints")
    if isinstance(generator, SequenceScorer) and sample.get("target") is None:
        raise SpeakerDataError(
            "--score-reference scores the reference translations of a binarized split (fairseq-generate), and these "
            "sentences have none: leave out --score-reference")
    _check_lengths(generator, sample)


def _check_lengths(generator, sample) -> None:
    """Refuse a ``--min-len`` above the longest translation the search allows a batch (fairseq's generator ends in
    an assertion): its maximum, ``--max-len-a`` × the batch's source length + ``--max-len-b`` (at most the model's
    positions), or the source's length with ``--match-source-len``."""
    from fairseq.sequence_generator import SequenceGenerator

    if not isinstance(generator, SequenceGenerator):
        return
    src_tokens, src_lengths = sample["net_input"]["src_tokens"], sample["net_input"].get("src_lengths")
    if getattr(generator, "match_source_len", False) and src_lengths is not None:
        longest, rule = int(src_lengths.max()), "the source's length (--match-source-len)"
    else:
        a, b, src_len = generator.max_len_a, generator.max_len_b, src_tokens.size(1)
        longest = min(int(a * src_len + b), generator.max_len - 1)
        rule = (f"--max-len-a {a:g} x {src_len} source tokens + --max-len-b {b}" +
                (f", within the model's {generator.max_len} positions" if longest == generator.max_len - 1 else ""))
    if generator.min_len > longest:
        raise SpeakerDataError(
            f"--min-len {generator.min_len} (min_len) asks for translations longer than the search allows these "
            f"sentences: at most {longest} tokens ({rule}); lower --min-len, or raise --max-len-b (max_len_b)")


def _strip_first_token(hypo: dict) -> None:
    """Remove the speaker token from a hypothesis of the sequence generator."""
    hypo["tokens"] = hypo["tokens"][1:]
    if hypo.get("positional_scores") is not None:
        hypo["positional_scores"] = hypo["positional_scores"][1:]
    if hypo.get("attention") is not None and hypo["attention"].dim() == 2:
        hypo["attention"] = hypo["attention"][:, 1:]


class _InferenceSpeakerDataset(SpeakerDataset):
    """Also queues each batch's speakers for :meth:`SpeakerTranslationTask.inference_step`."""

    def __init__(self, dataset, speakers, pending: Deque, positions: Optional[List[int]] = None):
        super().__init__(dataset, speakers)
        self.pending = pending
        #: each sentence's place among the input lines (fairseq-interactive's buffer, skipped lines counted), the id
        #: its batch gives it; None: its index
        self.positions = None if positions is None else torch.tensor(positions, dtype=torch.long)

    def batch_by_size(self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
        if len(indices) == 0:  # every line of fairseq-interactive's buffer was skipped (each reported): none to do
            return []
        return super().batch_by_size(indices, max_tokens, max_sentences, required_batch_size_multiple)

    def collater(self, samples):
        batch = super().collater(samples)
        if "net_input" in batch:
            self.pending.append((batch["net_input"]["src_tokens"], batch["net_input"]["speakers"]))
            if self.positions is not None:  # after the speakers, which are looked up by index
                batch["id"] = self.positions.index_select(0, batch["id"])
        return batch
