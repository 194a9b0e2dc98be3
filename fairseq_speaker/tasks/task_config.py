"""The options of the ``speaker_translation`` task (:class:`SpeakerTranslationConfig`): fairseq's translation options
plus the speakers' (their files, the unknown speaker's policy, the speaker token), the search's stop and the text
preprocessing; the task itself is :mod:`fairseq_speaker.tasks.speaker_translation`."""

from dataclasses import dataclass, field
from typing import Optional

from fairseq.dataclass import ChoiceEnum
from fairseq.tasks.translation import TranslationConfig
from omegaconf import II

from fairseq_speaker.data import UNKNOWN_SPEAKER_POLICIES
from fairseq_speaker.tasks.inference import BEAM_STOPS


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
            "{data}/{split}.{suffix} for every split but the one fairseq-train trains on"
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
