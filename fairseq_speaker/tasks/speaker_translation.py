"""The ``speaker_translation`` task: fairseq's translation task plus a speaker per sentence."""

import logging
import os
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Deque, Dict, List, Optional, Tuple

import torch
from fairseq import utils
from fairseq.data import data_utils
from fairseq.dataclass import ChoiceEnum
from fairseq.logging import metrics
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask
from omegaconf import II

from fairseq_speaker.allowed_tokens import check_ended, restricted
from fairseq_speaker.checkpoints import (
    AS_READ_KEY,
    DICTIONARIES_KEY,
    check_language_model,
    check_vocabulary,
    dictionaries_record,
)
from fairseq_speaker.data import (
    UNKNOWN_SPEAKER_POLICIES,
    SpeakerDataError,
    SpeakerDataset,
    SpeakerDictionary,
    preprocessing,
    read_speaker_file,
)
from fairseq_speaker.data.speaker_dictionary import label_problem
from fairseq_speaker.fairseq_patches import epoch_iterator_is_cached
from fairseq_speaker.optim.speaker_progress import SpeakerProgress
from fairseq_speaker.runtime import threads_for_fairseq_command

logger = logging.getLogger(__name__)

SPEAKER_DICT_FILE = "dict.spk.txt"
#: the task state's record of the training data's text preprocessing (:mod:`fairseq_speaker.data.preprocessing`)
PREPROCESSING_KEY = "preprocessing"
#: the target-dictionary symbol naming a speaker with --speaker-token
SPEAKER_TOKEN = "<spk:{}>"


class SplitNotFound(SpeakerDataError):
    """A split the data folder has no binarized files of (other errors of a split's files are other user errors)."""


class EmptySplit(SpeakerDataError):
    """A split whose binarized files hold no sentence (fairseq cannot open an empty file: a traceback otherwise)."""


#: when the beam search ends a sentence (``--beam-stop``): ``fairseq``, once ``beam`` hypotheses have ended (fairseq's
#: own rule); ``unbeaten``, once ``beam`` have ended and no live one scores better than the worst of them
#: (:class:`fairseq_speaker.sequence_generator.UnbeatenStopGenerator`)
BEAM_STOPS = ["fairseq", "unbeaten"]


@dataclass
class SpeakerTranslationConfig(TranslationConfig):
    speaker_suffix: str = field(
        default="spk",
        metadata={"help": "speaker files are {split}.{suffix} in the data directory (SATED: usr)"},
    )
    speaker_file: Optional[str] = field(
        default=None,
        metadata={
            "help": "speaker labels (one a line) of the split being generated; overrides "
            "{data}/{split}.{suffix} for every split but the training one"
        },
    )
    unknown_speaker: ChoiceEnum(UNKNOWN_SPEAKER_POLICIES) = field(  # type: ignore[valid-type]
        default="mean",
        metadata={
            "help": "speakers outside the training speakers, when translating or validating: "
            "'mean' uses the mean speaker bias, 'none' no bias, 'fail' stops with an error"
        },
    )
    speaker: Optional[str] = field(
        default=None,
        metadata={"help": "fairseq-interactive: translate every input line as this speaker"},
    )
    speaker_per_line: bool = field(
        default=False,
        metadata={"help": "fairseq-interactive: every input line is SPEAKER<TAB>sentence"},
    )
    speaker_token: bool = field(
        default=False,
        metadata={
            "help": "the spk_token baseline: every target sentence starts with a token naming its speaker "
            "(added to the target dictionary), forced as the first word when decoding and stripped "
            "from the output"
        },
    )
    beam_stop: ChoiceEnum(BEAM_STOPS) = field(  # type: ignore[valid-type]
        default="fairseq",
        metadata={
            "help": "when the beam search ends a sentence: 'fairseq' once --beam hypotheses have ended (fairseq's "
            "rule), 'unbeaten' once --beam have ended and no live hypothesis scores better than the worst of them "
            "(docs/speaker_learning.md: fairseq's rule can return a sentence cut short)"
        },
    )
    preprocessing: ChoiceEnum(["auto", "none"]) = field(  # type: ignore[valid-type]
        default="auto",
        metadata={
            "help": "raw text in, raw text out: 'auto' keeps the training data's preprocessing "
            "(DATA/preprocessing.json, written by examples/sated/prepare.py) in the checkpoint, and applies the "
            "checkpoint's to the input and undoes it on the output when translating, unless --tokenizer/--bpe "
            "are given; 'none' records nothing when training and applies nothing when translating (input "
            "already in the model's tokens)"
        },
    )
    #: fairseq-generate's --lm-path, a generation option: its language model reads its dictionary from the data folder
    #: (load_dataset checks it there first)
    lm_path: Optional[str] = II("generation.lm_path")


@register_task("speaker_translation", dataclass=SpeakerTranslationConfig)
class SpeakerTranslationTask(TranslationTask):
    """Translation in which every sentence has a speaker.

    Speaker labels come from plain-text files beside the binarized data
    (``{split}.spk``, one label a line). The speaker dictionary is built from
    the training labels the first time it is needed, written to
    ``dict.spk.txt`` in the data directory, and kept in the task state, which
    fairseq saves in every checkpoint: a checkpoint maps labels to speakers by
    name, whatever the data directory holds when it is used. Every batch
    carries ``net_input["speakers"]``, a LongTensor ``[batch]``.
    """

    cfg: SpeakerTranslationConfig

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        check_data_folder(cfg)
        return super().setup_task(cfg, **kwargs)

    def __init__(self, cfg: SpeakerTranslationConfig, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        threads_for_fairseq_command()  # fairseq-train/-generate/-interactive: threads that do not oversubscribe
        self.state.add_factory("speaker_dictionary", self._build_speaker_dictionary)
        #: the dictionaries as the data folder's files hold them (before any speaker token is added): kept in every
        #: checkpoint, and compared with a loaded checkpoint's record of its own (checkpoints.check_vocabulary)
        self.data_dictionaries = dictionaries_record(src_dict, tgt_dict)
        self.state.merge_state_dict({DICTIONARIES_KEY: self.data_dictionaries})
        self._speaker_dictionary: Optional[Tuple[dict, SpeakerDictionary]] = None
        self._speaker_tokens: Optional[Tuple[SpeakerDictionary, torch.Tensor]] = None
        if cfg.speaker_token:
            # kept in the checkpoint, so that generation knows without being told
            self.state.merge_state_dict({"speaker_token": True})
        # fairseq-interactive drops net_input["speakers"] between batching and
        # inference_step: the batches' speakers wait here, checked against their tokens
        self._pending: Deque[Tuple[torch.Tensor, torch.Tensor]] = deque()
        self._interactive_labels: Optional[List[str]] = None
        self._interactive_numbers: Optional[List[int]] = None  # their input line numbers
        self._input_lines = 0
        self._emptied_lines = 0  # input lines emptied (too long, not UTF-8) not yet answered
        self._model_positions: List = []  # each built model's max_positions()
        #: the labels of every loaded split, to map them again if the speaker table changes
        self._split_labels: Dict[str, Tuple[List[str], str]] = {}
        self._progress = SpeakerProgress()
        #: the checkpoint whose task state was loaded (None: a task being trained), for messages
        self._checkpoint: Optional[str] = None
        self._from_checkpoint = False

    # -- whether the speakers are learned -------------------------------------------------
    def begin_epoch(self, epoch, model):
        super().begin_epoch(epoch, model)
        bias = getattr(model, "speaker_bias", None)
        if bias is not None:
            self._progress.start(bias)

    def begin_valid_epoch(self, epoch, model):
        """Before each validation, the log says how far the speakers moved (see :class:`SpeakerProgress`)."""
        super().begin_valid_epoch(epoch, model)
        bias = getattr(model, "speaker_bias", None)
        if bias is not None:
            try:  # the epoch's training loss so far (fairseq-train aggregates it under "train")
                loss = metrics.get_smoothed_values("train").get("loss")
            except KeyError:
                loss = None
            self._progress.report(bias, None if loss is None else float(loss), where=f" in epoch {epoch}")

    # -- the speaker dictionary -----------------------------------------------------------
    @property
    def speaker_dictionary(self) -> SpeakerDictionary:
        state = self.state.speaker_dictionary  # a checkpoint's, or built by the factory
        if self._speaker_dictionary is None or self._speaker_dictionary[0] is not state:
            self._speaker_dictionary = (state, SpeakerDictionary.from_state_dict(state))
        return self._speaker_dictionary[1]

    def _build_speaker_dictionary(self) -> dict:
        paths = utils.split_paths(self.cfg.data)
        dict_path = os.path.join(paths[0], SPEAKER_DICT_FILE)
        if os.path.exists(dict_path):
            dictionary = SpeakerDictionary.load(dict_path)
            logger.info(f"speaker dictionary: {len(dictionary)} speakers from {dict_path}")
            return dictionary.state_dict()
        labels = []
        for path in paths:
            labels += self._read_speakers(path, self.cfg.train_subset)
        dictionary = SpeakerDictionary.from_labels(labels)
        try:
            dictionary.save(dict_path)
            logger.info(f"speaker dictionary: {len(dictionary)} speakers, saved to {dict_path}")
        except OSError as e:  # a read-only data directory: the checkpoint keeps the dictionary anyway
            logger.warning(f"could not save the speaker dictionary to {dict_path}: {e}")
        return dictionary.state_dict()

    def check_speaker_table_change(self, saved: List[str], current: List[str]) -> None:
        """Called by a model about to restore a checkpoint whose speakers are ``saved`` while this task's
        are ``current``: refuse what cannot be mapped by name."""
        if self.uses_speaker_token:
            raise SpeakerDataError(
                f"the checkpoint's {len(saved)} speakers are not the data's {len(current)} (or not in the same "
                f"order), and with --speaker-token the speakers are rows of the word embeddings, which cannot "
                f"be restored by name: train on the checkpoint's speaker dictionary (its speakers in its order)"
            )

    def adopt_speaker_names(self, names: List[str], new_counts: Optional[Dict[str, int]] = None) -> None:
        """Use the speaker table of a restored checkpoint (its speakers, then the data's new ones), or
        of a model that onboarded speakers: the speaker dictionary becomes ``names`` (sentence counts
        of speakers it did not know from ``new_counts``) and every loaded split is mapped to it again."""
        old = self.speaker_dictionary
        new_counts = new_counts or {}
        counts = [old.counts[i] if (i := old.index(n)) is not None else new_counts.get(n, 0) for n in names]
        self.state.merge_state_dict({"speaker_dictionary": SpeakerDictionary(names, counts).state_dict()})
        for split, (labels, source) in self._split_labels.items():
            dataset = self.datasets.get(split)
            if isinstance(dataset, SpeakerDataset):
                dataset.speakers = self._encode_split(split, labels, source)

    @property
    def uses_speaker_token(self) -> bool:
        """--speaker-token given now, or given when the loaded checkpoint was trained."""
        return bool(self.cfg.speaker_token or self.state.state_dict.get("speaker_token", False))

    def speaker_token_ids(self) -> torch.Tensor:
        """Target-dictionary ids of the speakers' tokens ``[num_speakers]`` (added to it on first use).

        Called only once the speaker dictionary is final (a checkpoint's, at generation), so
        that the tokens are those of the speakers the model was trained with.
        """
        speakers = self.speaker_dictionary
        if self._speaker_tokens is None or self._speaker_tokens[0] is not speakers:
            ids = [self.tgt_dict.add_symbol(SPEAKER_TOKEN.format(name)) for name in speakers.names]
            self._speaker_tokens = (speakers, torch.tensor(ids, dtype=torch.long))
        return self._speaker_tokens[1]

    def _speaker_prefix(self, speakers: torch.Tensor, unknown: int) -> torch.Tensor:
        """The speaker token of each sentence ``[batch]``; ``unknown`` for speakers outside the dictionary."""
        tokens = self.speaker_token_ids().to(speakers.device)[speakers.clamp(min=0)]
        return tokens.masked_fill(speakers < 0, unknown)

    def build_model(self, cfg, from_checkpoint=False):
        if self.uses_speaker_token:
            self.speaker_token_ids()  # the embedding tables must include the speaker tokens
        model = super().build_model(cfg, from_checkpoint)
        self._model_positions.append(model.max_positions())  # fairseq-interactive's longest source (below)
        # a checkpoint whose task state was just loaded: its dictionaries must be this data folder's
        as_read, self._checkpoint_as_read = getattr(self, "_checkpoint_as_read", None), None
        check_vocabulary(as_read, model, self)
        return model

    def check_restored_dictionaries(self, as_read: Optional[dict], model) -> None:
        """Called by ``model`` restoring a checkpoint's parameters (``as_read``: what the checkpoint reader noted of
        it): fairseq-train ``--restore-file`` and ``--finetune-from-model`` load no task state, so that the
        checkpoint's dictionaries are compared with this data folder's here (see :meth:`build_model`)."""
        check_vocabulary(as_read, model, self)

    def load_state_dict(self, state_dict):
        """fairseq's, keeping aside what the checkpoint reader noted for :meth:`build_model` (never saved again)."""
        self._checkpoint_as_read = state_dict.pop(AS_READ_KEY, None) if isinstance(state_dict, dict) else None
        self._from_checkpoint = True
        if isinstance(self._checkpoint_as_read, dict):
            self._checkpoint = self._checkpoint_as_read.get("path")
        super().load_state_dict(state_dict)

    # -- the text preprocessing -----------------------------------------------------------
    def _record_preprocessing(self, data_path: str) -> None:
        """Keep ``DATA/preprocessing.json`` in the task state (so in every checkpoint) when training a model: not
        for a task that loaded a checkpoint's state (which has the record of its own training data, or none)."""
        if self._from_checkpoint or PREPROCESSING_KEY in self.state.state_dict or self.cfg.preprocessing == "none":
            return
        path = os.path.join(data_path, preprocessing.PREPROCESSING_FILE)
        if not os.path.exists(path):
            return
        record = preprocessing.read_record(path, self.cfg.source_lang, self.cfg.target_lang)
        self.state.merge_state_dict({PREPROCESSING_KEY: record})
        logger.info(f"text preprocessing of {path}, kept in the checkpoints: {preprocessing.describe(record)}")

    @property
    def text_preprocessing(self) -> Optional[dict]:
        """The record of the training data's preprocessing this task applies to raw text (None: none)."""
        if getattr(self.cfg, "preprocessing", "auto") == "none":
            return None
        return self.state.state_dict.get(PREPROCESSING_KEY)

    def build_tokenizer(self, args):
        """fairseq's ``--tokenizer`` when given, else the checkpoint's (see :attr:`text_preprocessing`)."""
        return self._encoder("tokenizer", args, super().build_tokenizer)

    def build_bpe(self, args):
        """fairseq's ``--bpe`` when given, else the checkpoint's (see :attr:`text_preprocessing`)."""
        return self._encoder("bpe", args, super().build_bpe)

    def _encoder(self, kind: str, args, fairseq_build):
        record = self.text_preprocessing
        if record is None or preprocessing.chosen(args, kind):
            return fairseq_build(args)
        return preprocessing.build(kind, record, utils.split_paths(self.cfg.data) if self.cfg.data else [],
                                   checkpoint=self._checkpoint)

    # -- datasets -------------------------------------------------------------------------
    def _speaker_path(self, data_path: str, split: str) -> str:
        """``{split}.{suffix}``; for fairseq's validation split (``valid``, ``valid1``, ...) without one,
        the same file under SATED's name for it (``dev.{suffix}``, ``dev1.{suffix}``) if there is one."""
        if self.cfg.speaker_file and split != self.cfg.train_subset:
            return self.cfg.speaker_file
        path = os.path.join(data_path, f"{split}.{self.cfg.speaker_suffix}")
        dev = _dev_name(split)
        if dev and not os.path.exists(path):
            dev_path = os.path.join(data_path, f"{dev}.{self.cfg.speaker_suffix}")
            if os.path.exists(dev_path):
                return dev_path
        return path

    def _num_sentences(self, data_path: str, split: str) -> Optional[int]:
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
            prefix = os.path.join(data_path, f"{split}.{pair}.{src}")
            dataset = data_utils.load_indexed_dataset(prefix, self.src_dict, self.cfg.dataset_impl)
            if dataset is not None:
                return len(dataset)
        return None

    def _read_speakers(self, data_path: str, split: str, num_sentences: Optional[int] = None) -> List[str]:
        path = self._speaker_path(data_path, split)
        if num_sentences is None:
            num_sentences = self._num_sentences(data_path, split)
        suffix, dev = self.cfg.speaker_suffix, _dev_name(split)
        if dev and os.path.basename(path) == f"{dev}.{suffix}" and path != self.cfg.speaker_file:
            logger.info(f"{split}: no {split}.{suffix}, speaker labels read from {path} (SATED's name for the split)")
        hint = f"; put one speaker label per sentence of the {split} split there"
        if dev:
            hint += f" or in {data_path}/{dev}.{suffix} (SATED's name for that split)"
        hint += f" (e.g. cp raw/{split}.{suffix} {data_path}/)"
        if split != self.cfg.train_subset:
            hint += " or pass --speaker-file"
        if suffix == "spk":
            hint += "; SATED's .usr files are read with --speaker-suffix usr"
        return read_speaker_file(path, num_sentences, hint=hint)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        check_language_model(self.cfg, self.data_dictionaries["target"], self.uses_speaker_token)  # loaded next
        self._check_not_empty(split, epoch)
        try:
            super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        except FileNotFoundError as e:  # fairseq's "Dataset not found: SPLIT (DATA)", a traceback otherwise
            raise SplitNotFound(f"{e}: no binarized split {split!r} there (fairseq-preprocess writes train, valid "
                                   f"and test); give the split's name (--gen-subset, --valid-subset, "
                                   f"--train-subset) or the data folder that has it") from None
        paths = utils.split_paths(self.cfg.data)
        if split == self.cfg.train_subset:
            self._record_preprocessing(paths[0])
        else:
            paths = paths[:1]
        data_path = paths[(epoch - 1) % len(paths)]

        dataset = self.datasets[split]
        labels = self._read_speakers(data_path, split, num_sentences=len(dataset))
        source = self._speaker_path(data_path, split)
        self._split_labels[split] = (labels, source)
        speakers = self._encode_split(split, labels, source)
        self.datasets[split] = SpeakerDataset(dataset, speakers, target_prefix=self._target_prefix(speakers))

    def _check_not_empty(self, split: str, epoch: int) -> None:
        """Refuse a split binarized from empty text: its ``.bin`` files are empty, which fairseq cannot map."""
        paths = utils.split_paths(self.cfg.data)
        paths = paths if split == self.cfg.train_subset else paths[:1]  # as fairseq's load_dataset reads them
        data_path = paths[(epoch - 1) % len(paths)]
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        if src is None or tgt is None:
            return
        for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
            for lang in (src, tgt):
                path = os.path.join(data_path, f"{split}.{pair}.{lang}.bin")
                if os.path.isfile(path) and os.path.getsize(path) == 0:
                    raise EmptySplit(f"{path} is empty: the {split!r} split of {data_path} holds no sentences; "
                                     f"binarize it from text that has some (fairseq-preprocess), or name another split "
                                     f"(--gen-subset, --valid-subset, --train-subset)")

    def get_batch_iterator(self, dataset, *args, **kwargs):
        """fairseq's batch iterator, whose batches do not depend on where a run was resumed.

        fairseq sorts the sentences by length, ties broken by a permutation seeded with ``--seed`` +
        epoch, and cuts them into batches once: a run that goes through keeps the batches made at
        epoch 1 for every epoch (only their order changes), but a run resumed in epoch e made its
        batches with seed + e and trained on other batches. Here a resumed run makes epoch 1's batches
        too (fairseq then sets the iterator to the checkpoint's epoch and position), so that it trains
        on the batches, in the order, of a run that went through. Iterators made anew each epoch
        (sharded data, ``--update-epoch-batch-itr``) are left as fairseq makes them."""
        epoch = kwargs.get("epoch", 1)
        if epoch > 1 and not kwargs.get("disable_iterator_cache") and not kwargs.get("update_epoch_batch_itr") \
                and self.can_reuse_epoch_itr(dataset) and not epoch_iterator_is_cached(self, dataset):
            kwargs["epoch"] = 1
        return super().get_batch_iterator(dataset, *args, **kwargs)

    def _encode_split(self, split: str, labels: List[str], source: str) -> torch.Tensor:
        if split == self.cfg.train_subset:
            dict_path = os.path.join(os.path.dirname(source), SPEAKER_DICT_FILE)
            advice = (f"a training speaker must be in the speaker dictionary: if the training labels changed, "
                      f"delete {dict_path} to rebuild it")
            if self._from_checkpoint:  # the speakers are the checkpoint's, whatever the data folder's dictionary says
                advice = (f"the {split} split's speakers are those of {self._checkpoint or 'the checkpoint'}: give "
                          f"the data folder it was trained on, with the speaker file of its training sentences")
            speakers = self.speaker_dictionary.encode(labels, "fail", source=source, advice=advice)
        else:
            speakers = self.speaker_dictionary.encode(labels, self.cfg.unknown_speaker, source=source)
        unseen = int((speakers < 0).sum())
        if unseen:
            logger.warning(
                f"{split}: {unseen} of {len(speakers)} sentences have speakers unseen in training "
                f"(--unknown-speaker {self.cfg.unknown_speaker})"
            )
        return speakers

    def _target_prefix(self, speakers: torch.Tensor) -> Optional[torch.Tensor]:
        # a validation sentence of an unseen speaker starts with <unk>: there is no token to name them
        return self._speaker_prefix(speakers, self.tgt_dict.unk()) if self.uses_speaker_token else None

    # -- fairseq-interactive --------------------------------------------------------------
    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        """fairseq-interactive's input lines, counted from the start of the input (for messages). With
        --speaker-per-line, a line without 'SPEAKER<TAB>' or with a label that is not one is reported and
        skipped; the session goes on."""
        first = self._input_lines + 1
        self._input_lines += len(lines)
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
        self._interactive_numbers = None

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
            return None
        if not label.strip():
            return "an empty speaker name: give a speaker's name"
        twin = self.speaker_dictionary.lookalike(label)
        if twin is not None:
            return (f"speaker {label!r} looks like {twin!r}, a speaker of the model, but is not it (invisible "
                    f"characters, another space or another Unicode normalization): write {twin!r}")
        return None

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        dataset = super().build_dataset_for_inference(src_tokens, src_lengths, constraints=constraints)
        labels, numbers = self._interactive_labels, self._interactive_numbers
        self._interactive_labels = self._interactive_numbers = None
        if labels is None:
            labels = self._default_labels(len(dataset))
        elif len(labels) != len(dataset):
            raise SpeakerDataError(
                f"{len(labels)} speakers for {len(dataset)} sentences: give one speaker per sentence")
        if numbers is None or len(numbers) != len(labels):  # not fairseq-interactive: positions in the batch
            numbers = list(range(1, len(labels) + 1))
        policy = self.cfg.unknown_speaker
        ids = self.speaker_dictionary.encode(labels, policy, source="<input>", lines=numbers)
        unknown: Dict[str, List[int]] = {}  # one warning per label, naming its lines
        for number, label, i in zip(numbers, labels, ids.tolist()):
            if i < 0:
                unknown.setdefault(label, []).append(number)
        for label, where in unknown.items():
            more = f" and {len(where) - 3} more lines" if len(where) > 3 else ""
            shown = ",".join(str(n) for n in where[:3]) + more
            logger.warning(f"<input>:{shown}: speaker {label!r} is not among the model's "
                           f"{len(self.speaker_dictionary)} speakers: translated with --unknown-speaker {policy}")
        return _InferenceSpeakerDataset(dataset, ids, self._pending)

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
        from fairseq_speaker.sequence_generator import UnbeatenStopGenerator, by_position, check_search

        check_search(args)
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
    if limit is not None and length > limit:
        return (f"{length} tokens (with the end of sentence), more than the {limit} source positions the model "
                f"takes: split the line into sentences")
    return None


def check_data_folder(cfg) -> None:
    """The folder of the dictionaries (the first path of ``cfg.data``) holds ``dict.SRC.txt`` and ``dict.TGT.txt``, and
    the languages are given or can be read from its file names; one message if not, where fairseq's setup ends in an
    ``Exception`` or a ``FileNotFoundError`` with a traceback."""
    paths = utils.split_paths(cfg.data) if cfg.data else []
    if not paths:
        return  # fairseq's own check
    folder = paths[0]
    if not os.path.isdir(folder):
        raise SpeakerDataError(f"data directory not found: {folder} (give the folder fairseq-preprocess wrote, with "
                               f"its dict.SRC.txt and dict.TGT.txt)")
    source, target = cfg.source_lang, cfg.target_lang
    if source is None or target is None:
        inferred = data_utils.infer_language_pair(folder)
        source, target = source or inferred[0], target or inferred[1]
    if source is None or target is None:
        found = sorted(f for f in os.listdir(folder)
                       if f.startswith("dict.") and f.endswith(".txt") and f != SPEAKER_DICT_FILE)
        held = f"only {', '.join(found)}" if found else "no dict.SRC.txt and dict.TGT.txt"
        raise SpeakerDataError(f"{folder}: no binarized split (SPLIT.SRC-TGT.SRC.bin) to read the languages from, "
                               f"and {held}: give the data folder the model was trained on (fairseq-preprocess's "
                               f"output; fairseq's commands also take --source-lang and --target-lang)")
    missing = [f"dict.{lang}.txt" for lang in (source, target)
               if not os.path.isfile(os.path.join(folder, f"dict.{lang}.txt"))]
    if missing:
        raise SpeakerDataError(f"{folder}: no {' and no '.join(missing)} there: give the data folder the model was "
                               f"trained on (fairseq-preprocess's output, with dict.{source}.txt and "
                               f"dict.{target}.txt)")


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


def _dev_name(split: str) -> Optional[str]:
    """SATED's name for a fairseq validation split (``valid`` -> ``dev``, ``valid1`` -> ``dev1``), or None."""
    return "dev" + split[len("valid"):] if split.startswith("valid") else None


def _strip_first_token(hypo: dict) -> None:
    """Remove the speaker token from a hypothesis of the sequence generator."""
    hypo["tokens"] = hypo["tokens"][1:]
    if hypo.get("positional_scores") is not None:
        hypo["positional_scores"] = hypo["positional_scores"][1:]
    if hypo.get("attention") is not None and hypo["attention"].dim() == 2:
        hypo["attention"] = hypo["attention"][:, 1:]


class _InferenceSpeakerDataset(SpeakerDataset):
    """Also queues each batch's speakers for :meth:`SpeakerTranslationTask.inference_step`."""

    def __init__(self, dataset, speakers, pending: Deque):
        super().__init__(dataset, speakers)
        self.pending = pending

    def collater(self, samples):
        batch = super().collater(samples)
        if "net_input" in batch:
            self.pending.append((batch["net_input"]["src_tokens"], batch["net_input"]["speakers"]))
        return batch
