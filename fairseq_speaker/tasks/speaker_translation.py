"""The ``speaker_translation`` task: fairseq's translation task plus a speaker per sentence."""

import logging
import os
from collections import deque
from dataclasses import dataclass, field
from typing import Deque, List, Optional, Tuple

import torch
from fairseq import utils
from fairseq.data import data_utils
from fairseq.dataclass import ChoiceEnum
from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

from fairseq_speaker.data import (
    UNKNOWN_SPEAKER_POLICIES,
    SpeakerDataError,
    SpeakerDataset,
    SpeakerDictionary,
    read_speaker_file,
)

logger = logging.getLogger(__name__)

SPEAKER_DICT_FILE = "dict.spk.txt"


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

    def __init__(self, cfg: SpeakerTranslationConfig, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self.state.add_factory("speaker_dictionary", self._build_speaker_dictionary)
        self._speaker_dictionary: Optional[Tuple[dict, SpeakerDictionary]] = None
        # fairseq-interactive drops net_input["speakers"] between batching and
        # inference_step: the batches' speakers wait here, checked against their tokens
        self._pending: Deque[Tuple[torch.Tensor, torch.Tensor]] = deque()
        self._interactive_labels: Optional[List[str]] = None
        self._input_lines = 0

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

    # -- datasets -------------------------------------------------------------------------
    def _speaker_path(self, data_path: str, split: str) -> str:
        if self.cfg.speaker_file and split != self.cfg.train_subset:
            return self.cfg.speaker_file
        return os.path.join(data_path, f"{split}.{self.cfg.speaker_suffix}")

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
        hint = (
            f"; put one speaker label per sentence of the {split} split there "
            f"(e.g. cp raw/{split}.{self.cfg.speaker_suffix} {data_path}/)"
        )
        if split != self.cfg.train_subset:
            hint += " or pass --speaker-file"
        if self.cfg.speaker_suffix == "spk":
            hint += "; SATED's .usr files are read with --speaker-suffix usr"
        return read_speaker_file(path, num_sentences, hint=hint)

    def load_dataset(self, split, epoch=1, combine=False, **kwargs):
        super().load_dataset(split, epoch=epoch, combine=combine, **kwargs)
        paths = utils.split_paths(self.cfg.data)
        if split != self.cfg.train_subset:
            paths = paths[:1]
        data_path = paths[(epoch - 1) % len(paths)]

        dataset = self.datasets[split]
        labels = self._read_speakers(data_path, split, num_sentences=len(dataset))
        source = self._speaker_path(data_path, split)
        if split == self.cfg.train_subset:
            try:
                speakers = self.speaker_dictionary.encode(labels, "fail", source=source)
            except SpeakerDataError as e:
                raise SpeakerDataError(
                    f"{e}\n(a training speaker is missing from the speaker dictionary: if the training "
                    f"labels changed, delete {os.path.join(data_path, SPEAKER_DICT_FILE)} to rebuild it)"
                ) from None
        else:
            speakers = self.speaker_dictionary.encode(labels, self.cfg.unknown_speaker, source=source)
        unseen = int((speakers < 0).sum())
        if unseen:
            logger.warning(
                f"{split}: {unseen} of {len(speakers)} sentences have speakers unseen in training "
                f"(--unknown-speaker {self.cfg.unknown_speaker})"
            )
        self.datasets[split] = SpeakerDataset(dataset, speakers)

    # -- fairseq-interactive --------------------------------------------------------------
    def get_interactive_tokens_and_lengths(self, lines, encode_fn):
        if self.cfg.speaker_per_line:
            labels, sentences = [], []
            for line in lines:
                self._input_lines += 1
                label, sep, sentence = line.partition("\t")
                if not sep or not label.strip():
                    raise SpeakerDataError(
                        f"<input>:{self._input_lines}: expected 'SPEAKER<TAB>sentence' "
                        f"(--speaker-per-line), got {line!r}"
                    )
                labels.append(label.strip())
                sentences.append(sentence)
            self._interactive_labels = labels
            lines = sentences
        return super().get_interactive_tokens_and_lengths(lines, encode_fn)

    def _default_labels(self, n: int) -> List[str]:
        if self.cfg.speaker is None:
            raise SpeakerDataError(
                "no speaker given for the input: pass --speaker NAME, or --speaker-per-line "
                "with input lines 'SPEAKER<TAB>sentence'"
            )
        return [self.cfg.speaker] * n

    def build_dataset_for_inference(self, src_tokens, src_lengths, constraints=None):
        dataset = super().build_dataset_for_inference(src_tokens, src_lengths, constraints=constraints)
        labels = self._interactive_labels
        self._interactive_labels = None
        if labels is None:
            labels = self._default_labels(len(dataset))
        ids = self.speaker_dictionary.encode(labels, self.cfg.unknown_speaker, source="<input>")
        return _InferenceSpeakerDataset(dataset, ids, self._pending)

    def inference_step(self, generator, models, sample, prefix_tokens=None, constraints=None):
        net_input = sample["net_input"]
        if "speakers" not in net_input:
            net_input["speakers"] = self._speakers_of(net_input["src_tokens"])
        elif self._pending and torch.equal(self._pending[0][0], net_input["src_tokens"].cpu()):
            self._pending.popleft()  # a caller that kept the speakers of a batch built here
        return super().inference_step(
            generator, models, sample, prefix_tokens=prefix_tokens, constraints=constraints
        )

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
