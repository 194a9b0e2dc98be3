import logging
import os
from dataclasses import dataclass, field
from typing import Dict, Optional

import torch
from torch import Tensor, nn

from fairseq_speaker.data import SpeakerDataError, dictionary_hash
from fairseq_speaker.topic_model import TopicModel, random_topic_model, topic_mixture

from .base import EncoderOut, SpeakerBias, SpeakerBiasConfig, source_tokens
from .registry import register_speaker_bias

logger = logging.getLogger(__name__)


@dataclass
class TopicSpeakerBiasConfig(SpeakerBiasConfig):
    topic_model: Optional[str] = field(
        default=None,
        metadata={"help": "topic: the LDA model of the source side written by fairseq-speaker-topics (.npz); "
                  "the checkpoint keeps a copy, so generation does not need the file"},
    )


@register_speaker_bias("topic", dataclass=TopicSpeakerBiasConfig)
class TopicBias(SpeakerBias):
    """A topic-informed bias (Wei et al., AAAI 2019): b = theta(src) . Phi, whoever the speaker.

    Parameters: K * V

    theta(src) ``[B, K]`` is the topic mixture of the source sentence under an LDA model
    fitted beforehand on the training sources (``fairseq-speaker-topics``, scikit-learn;
    inferred here with the same E-step, in torch). Phi (``topic_words``, ``[K, V]``) is
    learned and starts at zero. The LDA model itself is a buffer (kept in checkpoints, not
    trained). It needs no speaker labels; add it to a speaker variant with ``fact+topic``.
    """

    needs_speakers = False
    reads_source = True
    exp_topic_word: Tensor  # buffers
    lda_settings: Tensor

    def __init__(self, cfg: TopicSpeakerBiasConfig, num_speakers: int, vocab_size: int,
                 topics: Optional[TopicModel]):
        super().__init__(cfg, num_speakers, vocab_size)
        self.missing_model = topics is None  # to come from a checkpoint's state dict
        num_topics = topics.num_topics if topics is not None else 0
        self.topic_words = nn.Parameter(torch.zeros(num_topics, vocab_size))  # K x V
        exp_topic_word = torch.from_numpy(topics.exp_topic_word) if topics is not None else torch.zeros(0, 0)
        self.register_buffer("exp_topic_word", exp_topic_word)  # K x W (source words)
        settings = [topics.doc_topic_prior, topics.max_doc_update_iter, topics.mean_change_tol, topics.nspecial] \
            if topics is not None else [0.0, 0, 0.0, 0]
        # alpha, E-step iterations, E-step tolerance, first real source id
        self.register_buffer("lda_settings", torch.tensor(settings, dtype=torch.float64))

    @property
    def num_topics(self) -> int:
        return self.topic_words.size(0)

    @classmethod
    def build(cls, cfg, speaker_dictionary, target_dictionary, source_dictionary=None) -> "TopicBias":
        options = cls.options(cfg)
        if not options.topic_model:
            raise SpeakerDataError("--speaker-bias topic needs --topic-model FILE: fit one on the training sources "
                                   "with `fairseq-speaker-topics DATA_DIR --topics 20 --out FILE`")
        topics = None
        if os.path.exists(options.topic_model):
            topics = TopicModel.load(options.topic_model)
            if source_dictionary is not None and topics.dictionary_hash != dictionary_hash(source_dictionary):
                raise SpeakerDataError(f"{options.topic_model}: the topic model was fitted on another source "
                                       f"dictionary than this model's; fit it again on this data directory")
        else:
            logger.info(f"topic model {options.topic_model} not found: it must come from the checkpoint loaded next")
        num_speakers = len(speaker_dictionary) if speaker_dictionary is not None else 0
        return cls(options, num_speakers, len(target_dictionary), topics)

    @classmethod
    def example_options(cls, workdir: str, source_dictionary) -> Dict[str, object]:
        path = os.path.join(workdir, "example_topics.npz")
        if not os.path.exists(path):
            random_topic_model(source_dictionary, num_topics=3).save(path)
        return {"topic_model": path}

    def formula_symbols(self) -> Dict[str, int]:
        return {"K": self.num_topics}

    def topic_mixture(self, tokens: Tensor) -> Tensor:
        """theta ``[B, K]`` of source sentences ``[B, src_len]``."""
        if self.missing_model:
            raise SpeakerDataError(f"topic model {self.cfg.topic_model} not found and no checkpoint gave one")
        alpha, max_iter, tol, nspecial = self.lda_settings.tolist()
        return topic_mixture(tokens, self.exp_topic_word, alpha, int(max_iter), tol, int(nspecial))

    def forward(self, speakers: Optional[Tensor], encoder_out: EncoderOut = None) -> Optional[Tensor]:
        if speakers is not None:
            self.check_speakers(speakers)
        tokens = source_tokens(encoder_out)
        if tokens is None:
            return None
        theta = self.topic_mixture(tokens)  # B x K
        return theta.to(self.topic_words) @ self.topic_words  # B x V

    def lookup(self, speakers: Tensor, encoder_out: EncoderOut = None) -> Optional[Tensor]:
        return self(speakers, encoder_out)

    def mean_bias(self) -> Tensor:
        return torch.zeros(self.vocab_size, device=self.topic_words.device, dtype=self.topic_words.dtype)

    def own_vocabulary_vectors(self) -> Dict[str, Tensor]:
        return {"topics": self.topic_words.detach().float().t()}

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # the checkpoint's topic model is the one the model was trained with: take its shapes
        saved = state_dict.get(prefix + "topic_words")
        if saved is not None and saved.shape != self.topic_words.shape:
            if not self.missing_model:
                logger.warning(f"{self.cfg.topic_model} has {self.num_topics} topics, the checkpoint "
                               f"{saved.size(0)}: using the checkpoint's topic model")
            self.topic_words = nn.Parameter(torch.empty_like(saved, device=self.topic_words.device))
            self.exp_topic_word = torch.empty_like(state_dict[prefix + "exp_topic_word"])
        if saved is not None:
            self.missing_model = False
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
