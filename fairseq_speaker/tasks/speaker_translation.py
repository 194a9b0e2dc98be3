"""The ``speaker_translation`` task: fairseq's translation task plus a speaker per sentence."""

import copy
import logging
import os
import weakref
from collections import Counter
from typing import Dict, List, Optional, Tuple

import torch
from fairseq import utils
from fairseq.data import data_utils
from fairseq.logging import metrics
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationTask

from fairseq_speaker.checkpoint_dictionaries import check_language_model, check_vocabulary, dictionaries_record
from fairseq_speaker.checkpoints import AS_READ_KEY, DICTIONARIES_KEY
from fairseq_speaker.data import (
    SpeakerDataError,
    SpeakerDataset,
    SpeakerDictionary,
    preprocessing,
    read_speaker_file,
)
from fairseq_speaker.data.speaker_labels import retired_among
from fairseq_speaker.data.text_files import check_not_a_pipe
from fairseq_speaker.errors import UserError
from fairseq_speaker.fairseq_patches import epoch_iterator_is_cached, read_interactive_input
from fairseq_speaker.modules.speaker_bias import parse_variant_name
from fairseq_speaker.modules.speaker_plumbing import SpeakerModelMixin
from fairseq_speaker.modules.speaker_words import speaker_words_of
from fairseq_speaker.optim.speaker_progress import SpeakerProgress
from fairseq_speaker.runtime import threads_for_fairseq_command
from fairseq_speaker.tasks.data_files import SPEAKER_DICT_FILE, check_dictionary_files, dev_name
from fairseq_speaker.tasks.inference import SpeakerInferenceMixin
from fairseq_speaker.tasks.task_config import SpeakerTranslationConfig

logger = logging.getLogger(__name__)

#: the task state's record of the training data's text preprocessing (:mod:`fairseq_speaker.data.preprocessing`)
PREPROCESSING_KEY = "preprocessing"
#: the target-dictionary symbol naming a speaker with --speaker-token
SPEAKER_TOKEN = "<spk:{}>"


def check_training_options(cfg) -> None:
    """Refuse the model options of a training command line that would be ignored: an empty ``--speaker-bias`` (a
    model without speakers, or the preset's variant, without a word) and a ``--topic-model`` without the ``topic``
    variant (release 0.7.0's checkpoints carry one, unused, in their options: not checked when they are read)."""
    name = getattr(cfg, "speaker_bias", None)
    if name is None:
        return
    parts = parse_variant_name(name)
    topic_model = getattr(cfg, "topic_model", None)
    if topic_model and "topic" not in parts:
        raise UserError(f"--topic-model {topic_model} is read by the topic variant only, and --speaker-bias is "
                        f"{name!r}: add topic to it (e.g. --speaker-bias {name}+topic), or leave --topic-model out")


class SplitNotFound(SpeakerDataError):
    """A split the data folder has no binarized files of (other errors of a split's files are other user errors)."""


class EmptySplit(SpeakerDataError):
    """A split whose binarized files hold no sentence (fairseq cannot open an empty file: a traceback otherwise)."""


@register_task("speaker_translation", dataclass=SpeakerTranslationConfig)
class SpeakerTranslationTask(SpeakerInferenceMixin, TranslationTask):
    """Translation in which every sentence has a speaker.

    Speaker labels come from plain-text files beside the binarized data
    (``{split}.spk``, one label a line). The speaker dictionary is built from
    the training labels the first time it is needed, written to
    ``dict.spk.txt`` in the data directory, and kept in the task state, which
    fairseq saves in every checkpoint: a checkpoint maps labels to speakers by
    name, whatever the data directory holds when it is used. Every batch
    carries ``net_input["speakers"]``, a LongTensor ``[batch]``. Decoding (the speakers of the sentences to
    translate, fairseq-interactive's input, the generator) is :class:`SpeakerInferenceMixin`'s.
    """

    cfg: SpeakerTranslationConfig

    @classmethod
    def setup_task(cls, cfg, **kwargs):
        suffix = getattr(cfg, "speaker_suffix", "spk")
        if not suffix or os.sep in suffix or suffix.startswith("."):  # 'valid.' or 'valid.../raw/test.spk' were read
            raise UserError(f"--speaker-suffix {suffix!r}: the extension of the speaker files ({{split}}.SUFFIX, e.g. "
                            f"spk, or usr for SATED): give a non-empty name without '/' or a leading '.'")
        check_dictionary_files(cfg)
        return super().setup_task(cfg, **kwargs)

    def __init__(self, cfg: SpeakerTranslationConfig, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        threads_for_fairseq_command()  # fairseq-train/-generate/-interactive: threads that do not oversubscribe
        read_interactive_input()  # fairseq-interactive: its input's lines as written, bytes that are not UTF-8 reported
        self.state.add_factory("speaker_dictionary", self._build_speaker_dictionary)
        #: the dictionaries as the data folder's files hold them (before any speaker token is added): kept in every
        #: checkpoint, and compared with a loaded checkpoint's record of its own
        #: (checkpoint_dictionaries.check_vocabulary)
        self.data_dictionaries = dictionaries_record(src_dict, tgt_dict)
        self.state.merge_state_dict({DICTIONARIES_KEY: self.data_dictionaries})
        self._speaker_dictionary: Optional[Tuple[dict, SpeakerDictionary]] = None
        #: the data folder's dict.spk.txt the speaker dictionary was read from, and what it held: its counts are the
        #: training split's, while the task's dictionary is still it (a restored checkpoint's table replaces it)
        self._speaker_dict_file: Optional[Tuple[str, dict]] = None
        #: the split --speaker-file gave the speakers of (one file is one split's labels)
        self._speaker_file_split: Optional[str] = None
        self._speaker_tokens: Optional[Tuple[SpeakerDictionary, torch.Tensor]] = None
        if cfg.speaker_token:
            # kept in the checkpoint, so that generation knows without being told
            self.state.merge_state_dict({"speaker_token": True})
        self.init_inference()
        #: the labels of every loaded split, to map them again if the speaker table changes
        self._split_labels: Dict[str, Tuple[List[str], str]] = {}
        self._progress = SpeakerProgress()
        #: the checkpoint whose task state was loaded (None: a task being trained), for messages
        self._checkpoint: Optional[str] = None
        self._from_checkpoint = False
        #: whether this task built a model from its options (fairseq-train), not from a checkpoint: its training
        #: split's speakers are the data folder's, whatever --speaker-file says
        self._trains = False
        self._said_words_left_out = False  # valid_step's warning, once
        #: the speaker models this task built, whose restored checkpoints it takes (take_restored_speakers); weak:
        #: the task does not keep a model alive
        self._built_models: List[weakref.ref] = []

    # -- whether the speakers are learned -------------------------------------------------
    def begin_epoch(self, epoch, model):
        self.take_restored_speakers()
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
            self._speaker_dict_file = (dict_path, dictionary.state_dict())  # its counts: checked as train is read
            return dictionary.state_dict()
        labels = []
        for path in paths:
            labels += self._read_speakers(path, self.cfg.train_subset, training=True)
        dictionary = SpeakerDictionary.from_labels(labels)
        try:
            dictionary.save(dict_path)
            logger.info(f"speaker dictionary: {len(dictionary)} speakers, saved to {dict_path}")
        except OSError as e:  # a read-only data directory: the checkpoint keeps the dictionary anyway
            logger.warning(f"could not save the speaker dictionary to {dict_path}: {e}")
        return dictionary.state_dict()

    def take_restored_speakers(self) -> None:
        """Take what the models this task built restored from a checkpoint since it last looked (their
        :class:`~fairseq_speaker.modules.speaker_plumbing.RestoredSpeakers`): the checkpoint's dictionaries are
        compared with the data folder's, and a speaker table other than the task's is adopted, every loaded split
        mapped to it. The task asks before it reads or batches a split, starts an epoch or decodes: fairseq-train's
        ``--restore-file`` and ``--finetune-from-model`` load the parameters after the model is built and before the
        training split is read (a model never calls its task)."""
        for ref in self._built_models:
            model = ref()
            restored = None if model is None else getattr(model, "restored_speakers", None)
            if model is None or restored is None:
                continue
            model.restored_speakers = None
            check_vocabulary(restored.as_read, model, self)  # the checkpoint's words are the data's
            if restored.saved is None or list(self.speaker_dictionary.names) != restored.built:
                continue  # the same table, or the task's has moved on since (onboarding adopted its own)
            self._check_speaker_table_change(restored.saved, restored.built)
            self.adopt_speaker_names(restored.names, new_counts=restored.counts)

    def _check_speaker_table_change(self, saved: List[str], current: List[str]) -> None:
        """A model restored a checkpoint whose speakers are ``saved`` while this task's are ``current``: refuse
        what cannot be mapped by name."""
        if self.uses_speaker_token:
            raise SpeakerDataError(
                f"the checkpoint's {len(saved)} speakers are not the data's {len(current)} (or not in the same "
                f"order), and with --speaker-token the speakers are rows of the word embeddings, which cannot "
                f"be restored by name: train on the checkpoint's speaker dictionary (its speakers in its order)"
            )

    def copy_with_own_speakers(self) -> "SpeakerTranslationTask":
        """A copy of the task with a speaker dictionary of its own (what onboarding a speaker changes), sharing the
        rest (the dictionaries, the options); no loaded split of the copy is mapped to its speakers again."""
        from fairseq.tasks.fairseq_task import StatefulContainer

        names = self.speaker_dictionary  # noqa: F841  (made now if made lazily: the copy starts with it)
        copied = copy.copy(self)
        copied.state = StatefulContainer()
        copied.state.merge_state_dict(dict(self.state.state_dict))
        copied._split_labels = {}
        return copied

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
        if not from_checkpoint:  # fairseq-train's command line (a checkpoint's options were checked when it trained)
            check_training_options(cfg)
            self._trains = True
        if self.uses_speaker_token:
            self.speaker_token_ids()  # the embedding tables must include the speaker tokens
        model = super().build_model(cfg, from_checkpoint)
        if not isinstance(model, SpeakerModelMixin):  # its encoder would be handed the speakers and refuse them
            arch = getattr(cfg, "arch", None) or getattr(cfg, "_name", None)
            raise UserError(
                f"--arch {arch}: {type(model).__name__} is a model without speakers (fairseq's own), which the speaker "
                f"task cannot feed: train a speaker model (--arch lstm_fact_bias, lstm_speaker, transformer_speaker, "
                f"...), or decode a checkpoint trained with fairseq's translation task with --task translation")
        self.note_model_positions(model)  # fairseq-interactive's longest source
        self._built_models = [ref for ref in self._built_models if ref() is not None] + [weakref.ref(model)]
        # a checkpoint whose task state was just loaded: its dictionaries must be this data folder's
        as_read, self._checkpoint_as_read = getattr(self, "_checkpoint_as_read", None), None
        check_vocabulary(as_read, model, self)
        return model

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
    def _speaker_path(self, data_path: str, split: str, training: Optional[bool] = None) -> str:
        """``{split}.{suffix}``; for fairseq's validation split (``valid``, ``valid1``, ...) without one,
        the same file under SATED's name for it (``dev.{suffix}``, ``dev1.{suffix}``) if there is one;
        ``--speaker-file`` for a split that is not trained on (``training``: whether the split is read as training
        data; by default, whether it is the training split of a task that trains; fairseq-generate --gen-subset train
        reads the file)."""
        if training is None:
            training = self._trains and split == self.cfg.train_subset
        if self.cfg.speaker_file is not None and not training:
            if self._speaker_file_split not in (None, split):  # test was scored with valid's speakers, silently
                raise SpeakerDataError(f"--speaker-file {self.cfg.speaker_file} gives the speakers of one split, read "
                                       f"for {self._speaker_file_split!r} and now asked for {split!r} too "
                                       f"(--valid-subset or --gen-subset names two): give one split, or put each "
                                       f"split's speaker file in the data folder ({split}.{self.cfg.speaker_suffix}) "
                                       f"and leave the option out")
            self._check_not_another_splits(data_path, split)
            self._speaker_file_split = split
            return self.cfg.speaker_file
        path = os.path.join(data_path, f"{split}.{self.cfg.speaker_suffix}")
        dev = dev_name(split)
        if dev and not os.path.exists(path):
            dev_path = os.path.join(data_path, f"{dev}.{self.cfg.speaker_suffix}")
            if os.path.exists(dev_path):
                return dev_path
        return path

    def _check_not_another_splits(self, data_path: str, split: str) -> None:
        """Refuse a ``--speaker-file`` that is the data folder's speaker file of another binarized split: of as many
        sentences, it was read without a word (``--gen-subset valid --speaker-file DATA/test.spk``: BLEU 89.7 ->
        69.6)."""
        path, suffix = self.cfg.speaker_file, self.cfg.speaker_suffix
        if not path or not path.endswith(f".{suffix}") or not os.path.isfile(path) \
                or not os.path.samefile(os.path.dirname(os.path.abspath(path)), data_path):
            return
        other = os.path.basename(path)[: -len(suffix) - 1]
        if other in (split, dev_name(split)) or self._num_sentences(data_path, other) is None:
            return  # the split's own file, or no split of that name: a file of the user's own
        raise SpeakerDataError(f"--speaker-file {path} is the speaker file of the {other!r} split of {data_path}, and "
                               f"the {split!r} split is read: give the {split} split's speakers (or leave the option "
                               f"out: {os.path.join(data_path, f'{split}.{suffix}')} is read)")

    def _num_sentences(self, data_path: str, split: str) -> Optional[int]:
        src, tgt = self.cfg.source_lang, self.cfg.target_lang
        for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
            prefix = os.path.join(data_path, f"{split}.{pair}.{src}")
            dataset = data_utils.load_indexed_dataset(prefix, self.src_dict, self.cfg.dataset_impl)
            if dataset is not None:
                return len(dataset)
        return None

    def _read_speakers(self, data_path: str, split: str, num_sentences: Optional[int] = None,
                       training: Optional[bool] = None) -> List[str]:
        path = self._speaker_path(data_path, split, training)
        if num_sentences is None:
            num_sentences = self._num_sentences(data_path, split)
        suffix, dev = self.cfg.speaker_suffix, dev_name(split)
        if dev and os.path.basename(path) == f"{dev}.{suffix}" and path != self.cfg.speaker_file:
            logger.info(f"{split}: no {split}.{suffix}, speaker labels read from {path} (SATED's name for the split)")
        hint = f"; put one speaker label per sentence of the {split} split there"
        if path == self.cfg.speaker_file:  # the user's own file: no advice on the data folder, nor to pass the option
            if not path:
                raise SpeakerDataError(f"--speaker-file is empty: give the speaker file of the {split} split, or leave "
                                       f"the option out")
            if not os.path.exists(path):
                raise SpeakerDataError(f"--speaker-file {path}: no such file{hint}")
            check_not_a_pipe(path, "--speaker-file")
        elif dev:
            hint += f" or in {data_path}/{dev}.{suffix} (SATED's name for that split)"
        hint += f" (e.g. cp raw/{split}.{suffix} {data_path}/)"
        if split != self.cfg.train_subset:
            hint += " or pass --speaker-file"
        if suffix == "spk":
            hint += "; SATED's .usr files are read with --speaker-suffix usr"
        return read_speaker_file(path, num_sentences, hint=hint, split=split if path == self.cfg.speaker_file else None)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        self.take_restored_speakers()  # the split's labels are mapped to a restored checkpoint's speakers
        self._check_no_input_speaker(split)
        check_language_model(self.cfg, self.data_dictionaries["target"], self.uses_speaker_token)  # loaded next
        self._check_not_empty(split, epoch)
        try:
            super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        except FileNotFoundError as e:  # fairseq's "Dataset not found: SPLIT (DATA)", a traceback otherwise
            if self.cfg.dataset_impl == "raw":  # its text files, one sentence a line: not fairseq-preprocess's
                src, tgt = self.cfg.source_lang, self.cfg.target_lang
                raise SplitNotFound(f"{e}: no raw text of the split {split!r} there (--dataset-impl raw reads "
                                    f"{split}.{src}-{tgt}.{src} and {split}.{src}-{tgt}.{tgt}, one sentence a line); "
                                    f"give the split's name (--gen-subset, --valid-subset, --train-subset) or the "
                                    f"data folder that has it, or leave out --dataset-impl raw for a binarized "
                                    f"one") from None
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

    def _check_no_input_speaker(self, split: str) -> None:
        """Refuse fairseq-interactive's speaker options where a binarized split is read (fairseq-train, -generate,
        -validate): they name the speakers of input lines, and a split's speakers are its speaker file's, so they
        would be ignored. A checkpoint's saved options never reach here with them (onboarding.checkpoint clears
        them)."""
        given = [f"--speaker {self.cfg.speaker}"] if self.cfg.speaker is not None else []
        given += ["--speaker-per-line"] if self.cfg.speaker_per_line else []
        if given:
            path = f"{os.path.join(utils.split_paths(self.cfg.data)[0], split)}.{self.cfg.speaker_suffix}"
            raise SpeakerDataError(
                f"{' and '.join(given)}: fairseq-interactive's speakers of its input lines; the {split} split's "
                f"speakers are read from its speaker file ({path}, or --speaker-file): leave "
                f"{'them' if len(given) > 1 else 'it'} out")

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

    def valid_step(self, sample, model, criterion):
        """fairseq's; a model that remembers its speakers' words is said, once, to be scored without them (they act
        in decoding only: fairseq-validate gave the loss of the model without its words, without a word)."""
        if not self._said_words_left_out and speaker_words_of(model) is not None:
            self._said_words_left_out = True
            logger.warning("this model remembers its speakers' words (fairseq-speaker-words), which act in decoding "
                           "only: the loss is the network's, without them")
        return super().valid_step(sample, model, criterion)

    def get_batch_iterator(self, dataset, *args, **kwargs):
        """fairseq's batch iterator, whose batches do not depend on where a run was resumed.

        fairseq sorts the sentences by length, ties broken by a permutation seeded with ``--seed`` +
        epoch, and cuts them into batches once: a run that goes through keeps the batches made at
        epoch 1 for every epoch (only their order changes), but a run resumed in epoch e made its
        batches with seed + e and trained on other batches. Here a resumed run makes epoch 1's batches
        too (fairseq then sets the iterator to the checkpoint's epoch and position), so that it trains
        on the batches, in the order, of a run that went through. Iterators made anew each epoch
        (sharded data, ``--update-epoch-batch-itr``) are left as fairseq makes them."""
        self.take_restored_speakers()
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
            if self._speaker_dict_file is not None and not self._from_checkpoint \
                    and self.speaker_dictionary.state_dict() == self._speaker_dict_file[1]:
                self._check_counts(split, labels, source, self._speaker_dict_file[0])
                self._speaker_dict_file = None  # checked: not again each epoch (sharded data read every shard's file)
        else:
            speakers = self.speaker_dictionary.encode(labels, self.cfg.unknown_speaker, source=source)
        unseen = int((speakers < 0).sum())
        if unseen:
            also = retired_among([label for label in dict.fromkeys(labels) if label not in self.speaker_dictionary],
                                 self.speaker_dictionary.names)
            logger.warning(
                f"{split}: {unseen} of {len(speakers)} sentences have speakers unseen in training "
                f"(--unknown-speaker {self.cfg.unknown_speaker}){also}"
            )
        return speakers

    def _check_counts(self, split: str, labels: List[str], source: str, dict_path: str) -> None:
        """Refuse a ``dict.spk.txt`` whose counts are not the training split's (of every shard, as it is built): written
        from other labels (a speaker it lists with no training sentence kept an untrained row, listed as trained on its
        old count). A count of 0 is none recorded (a list of names written by hand, to set their order)."""
        paths = utils.split_paths(self.cfg.data)
        if len(paths) > 1:  # sharded data: the dictionary was built from every shard's training labels
            labels = [label for path in paths for label in self._read_speakers(path, split, training=True)]
            source = " and ".join(dict.fromkeys(self._speaker_path(path, split, training=True) for path in paths))
        mismatch = self._count_mismatch(Counter(labels))
        if mismatch is None:
            return
        name, count, found = mismatch
        default = "train"
        if split != default and self.cfg.speaker_file is None \
                and all(os.path.exists(self._speaker_path(path, default, training=True)) for path in paths):
            try:
                other = Counter(label for path in paths for label in self._read_speakers(path, default, training=True))
            except SpeakerDataError:
                other = Counter()
            if self._count_mismatch(other) is None:  # a correct file for train: deleting it would lose that
                raise SpeakerDataError(
                    f"{dict_path} holds the speakers of the {default} split with their counts, and --train-subset "
                    f"{split} trains on {source}: the speaker dictionary must be the training split's; train on a copy "
                    f"of the data folder without dict.spk.txt (it is rebuilt there from the {split} split), or on the "
                    f"{default} split")
        raise SpeakerDataError(
            f"{dict_path} was written from other training labels than {source}: it gives speaker {name!r} {count} "
            f"sentences, {source} {found}: delete {dict_path} to rebuild it from the training labels")

    def _count_mismatch(self, counts: Counter) -> Optional[Tuple[str, int, int]]:
        """The first speaker whose recorded count (not 0) is not ``counts``'s: (name, recorded, counted), or None."""
        dictionary = self.speaker_dictionary
        for name, count in zip(dictionary.names, dictionary.counts):
            if count and counts.get(name, 0) != count:
                return name, count, counts.get(name, 0)
        return None

    def _target_prefix(self, speakers: torch.Tensor) -> Optional[torch.Tensor]:
        # a validation sentence of an unseen speaker starts with <unk>: there is no token to name them
        return self._speaker_prefix(speakers, self.tgt_dict.unk()) if self.uses_speaker_token else None
