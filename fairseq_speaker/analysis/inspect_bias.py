"""What a speaker's bias learned, read from a checkpoint.

For a speaker: the target words the bias raises and lowers most. For
fact_bias: the words each of the r shared bias vectors favours, a 2-D
projection of the speakers' mixture weights, and each speaker's nearest
speakers by those weights (cosine). For full_bias the projection and the
neighbours use the bias vectors themselves.
"""

import os
from dataclasses import dataclass
from functools import cached_property
from typing import List, Optional, Tuple

import torch
from fairseq.data import Dictionary
from torch import Tensor

import fairseq_speaker.checkpoints  # noqa: F401  (weights_only loading of fairseq checkpoints)
from fairseq_speaker.tasks.speaker_translation import SPEAKER_TOKEN

WordScores = List[Tuple[str, float]]


@dataclass
class BiasInspection:
    variant: str  # "full" or "fact"
    speakers: List[str]
    words: List[str]  # the target vocabulary, index = logit position
    full_weight: Optional[Tensor] = None  # S x V
    speaker_weights: Optional[Tensor] = None  # S x r
    shared_biases: Optional[Tensor] = None  # V x r

    @classmethod
    def from_checkpoint(cls, checkpoint: str, target_dictionary: Optional[str] = None,
                        data: Optional[str] = None) -> "BiasInspection":
        """``target_dictionary``: the ``dict.{tgt}.txt`` the model was trained with; without it,
        ``{data}/dict.{target_lang}.txt`` with the target language read from the checkpoint."""
        state = torch.load(checkpoint, map_location="cpu", weights_only=True)
        if target_dictionary is None:
            if data is None:
                raise ValueError("give the target dictionary or the data directory of the checkpoint")
            target_dictionary = _target_dictionary(data, state)
        model_cfg = state["cfg"]["model"]
        variant = model_cfg.get("speaker_bias")
        if variant not in ("full", "fact"):
            raise ValueError(f"{checkpoint}: a {variant!r} model has no speaker bias to inspect "
                             f"(full_bias and fact_bias checkpoints have)")
        speakers = state["task_state"]["speaker_dictionary"]["names"]
        dictionary = Dictionary.load(target_dictionary)
        if state["task_state"].get("speaker_token"):
            for name in speakers:
                dictionary.add_symbol(SPEAKER_TOKEN.format(name))
        words = [dictionary[i] for i in range(len(dictionary))]
        params = state["model"]
        vocab_size = params["decoder.output_bias"].numel()
        if vocab_size != len(words):
            raise ValueError(f"{target_dictionary} has {len(words)} words but {checkpoint} was trained with "
                             f"{vocab_size}: give the target dictionary of the model's data directory")
        if variant == "full":
            return cls(variant, speakers, words, full_weight=params["decoder.speaker_bias.weight"].float())
        return cls(variant, speakers, words,
                   speaker_weights=params["decoder.speaker_bias.speaker_weights"].float(),
                   shared_biases=params["decoder.speaker_bias.shared_biases"].float())

    def _index(self, speaker: str) -> int:
        try:
            return self.speakers.index(speaker)
        except ValueError:
            raise ValueError(f"speaker {speaker!r} is not among the model's {len(self.speakers)} speakers") from None

    def bias(self, speaker: str) -> Tensor:
        """b_s ``[V]``."""
        s = self._index(speaker)
        if self.variant == "full":
            return self.full_weight[s]
        return self.shared_biases @ self.speaker_weights[s]

    @cached_property
    def _real_words(self) -> Tensor:
        """Mask of the vocabulary entries worth listing (no special or padding symbols)."""
        return torch.tensor([not (w.startswith("<") and w.endswith(">")) and not w.startswith("madeupword")
                             and w not in ("<s>", "<pad>", "</s>", "<unk>") for w in self.words])

    def _extremes(self, values: Tensor, k: int) -> Tuple[WordScores, WordScores]:
        mask = self._real_words
        up = values.masked_fill(~mask, float("-inf")).topk(min(k, int(mask.sum())))
        down = values.masked_fill(~mask, float("inf")).topk(min(k, int(mask.sum())), largest=False)
        return ([(self.words[i], float(v)) for v, i in zip(up.values, up.indices)],
                [(self.words[i], float(v)) for v, i in zip(down.values, down.indices)])

    def top_words(self, speaker: str, k: int = 10) -> Tuple[WordScores, WordScores]:
        """The words the speaker's bias raises most, and those it lowers most."""
        return self._extremes(self.bias(speaker), k)

    def shared_vector_words(self, k: int = 10) -> List[Tuple[WordScores, WordScores]]:
        """fact_bias: for each of the r shared bias vectors, its highest and lowest words."""
        if self.shared_biases is None:
            raise ValueError("only fact_bias has shared bias vectors")
        return [self._extremes(self.shared_biases[:, j], k) for j in range(self.shared_biases.size(1))]

    def speaker_vectors(self) -> Tensor:
        """What speakers are compared by: mixture weights (fact) or bias vectors (full), ``[S, d]``."""
        return self.speaker_weights if self.variant == "fact" else self.full_weight

    def projection(self) -> Tensor:
        """A 2-D PCA projection of the speakers ``[S, 2]``."""
        x = self.speaker_vectors()
        x = x - x.mean(0, keepdim=True)
        if x.size(1) < 2 or x.size(0) < 2:
            return torch.cat([x[:, :1], torch.zeros(x.size(0), 2 - min(x.size(1), 1))], dim=1)[:, :2]
        _, _, v = torch.pca_lowrank(x, q=2, center=False)
        return x @ v

    def nearest(self, speaker: str, k: int = 5) -> List[Tuple[str, float]]:
        """The k speakers closest to ``speaker`` by cosine similarity."""
        x = torch.nn.functional.normalize(self.speaker_vectors(), dim=1)
        s = self._index(speaker)
        similarity = x @ x[s]
        similarity[s] = float("-inf")
        best = similarity.topk(min(k, len(self.speakers) - 1))
        return [(self.speakers[i], float(v)) for v, i in zip(best.values, best.indices)]


def _target_dictionary(data: str, state: dict) -> str:
    """``{data}/dict.{target_lang}.txt``, the target language read from a loaded checkpoint."""
    lang = state["cfg"]["task"].get("target_lang")
    if not lang:
        from fairseq.data import data_utils

        _, lang = data_utils.infer_language_pair(data)
    path = os.path.join(data, f"dict.{lang}.txt")
    if not os.path.exists(path):
        raise ValueError(f"target dictionary not found: expected {path}")
    return path
