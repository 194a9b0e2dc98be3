"""The speaker classifier of the paper's Appendix C: who said this sentence?

A continuous bag of unigrams and bigrams: the mean of the n-grams' vectors
(``hidden`` = 128 units) and a linear layer over the speakers, trained with
Adam on the target side of the training set. Its accuracy on the references
and on each system's output of the test set (the paper's Figure 2) measures how
much of the speakers' style a translation keeps.

The sentences are turned into n-gram ids once, into one padded matrix, and the
n-gram table is an ``EmbeddingBag`` with sparse gradients (``SparseAdam``), so a
step costs the rows of its batch and SATED's 180k sentences train in minutes
on a CPU.
"""

import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Union

import torch
from torch import Tensor, nn

logger = logging.getLogger(__name__)

PAD = 0  # the padding n-gram id, ignored by the mean


def ngrams(sentence: str) -> List[str]:
    words = sentence.split()
    return words + [f"{a} {b}" for a, b in zip(words, words[1:])]


@dataclass
class NgramVocabulary:
    """n-gram -> id (1-based; 0 pads). Built from training sentences, most frequent first."""

    index: Dict[str, int]

    @classmethod
    def build(cls, sentences: Sequence[str], max_size: int = 500000, min_count: int = 1) -> "NgramVocabulary":
        counts = Counter(g for s in sentences for g in ngrams(s))
        kept = [g for g, n in counts.most_common(max_size) if n >= min_count]
        return cls({g: i + 1 for i, g in enumerate(kept)})

    def __len__(self) -> int:
        return len(self.index) + 1

    def encode(self, sentences: Sequence[str]) -> Tensor:
        """``[len(sentences), longest]`` n-gram ids, padded with 0; unknown n-grams are left out."""
        rows = [[self.index[g] for g in ngrams(s) if g in self.index] for s in sentences]
        width = max((len(r) for r in rows), default=0) or 1
        out = torch.zeros(len(rows), width, dtype=torch.long)
        for i, row in enumerate(rows):
            out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
        return out


class SpeakerClassifier(nn.Module):
    """Mean of n-gram vectors ``[batch, hidden]`` -> speaker logits ``[batch, num_speakers]``."""

    def __init__(self, num_ngrams: int, num_speakers: int, hidden: int = 128):
        super().__init__()
        self.embed = nn.EmbeddingBag(num_ngrams, hidden, mode="mean", sparse=True, padding_idx=PAD)
        self.out = nn.Linear(hidden, num_speakers)

    def forward(self, ngram_ids: Tensor) -> Tensor:
        return self.out(self.embed(ngram_ids))


@dataclass
class TrainedClassifier:
    model: SpeakerClassifier
    vocabulary: NgramVocabulary
    speakers: List[str]

    def predict(self, sentences: Sequence[str], batch_size: int = 1024) -> List[str]:
        ids = self.vocabulary.encode(sentences)
        self.model.eval()
        with torch.no_grad():
            best: Union[torch.Tensor, List[int]] = torch.cat(
                [self.model(chunk).argmax(1) for chunk in ids.split(batch_size)]) if len(ids) else []
        return [self.speakers[int(i)] for i in best]

    def accuracy(self, sentences: Sequence[str], speakers: Sequence[str]) -> float:
        """Share of sentences attributed to their speaker (a speaker unknown to the classifier is a miss)."""
        if len(sentences) != len(speakers):
            raise ValueError(f"{len(sentences)} sentences but {len(speakers)} speaker labels")
        predicted = self.predict(sentences)
        return sum(p == s for p, s in zip(predicted, speakers)) / max(len(speakers), 1)

    def save(self, path: str) -> None:
        torch.save({"model": self.model.state_dict(), "ngrams": list(self.vocabulary.index),
                    "speakers": self.speakers, "hidden": self.model.out.in_features}, path)

    @classmethod
    def load(cls, path: str) -> "TrainedClassifier":
        state = torch.load(path, weights_only=True)
        vocabulary = NgramVocabulary({g: i + 1 for i, g in enumerate(state["ngrams"])})
        model = SpeakerClassifier(len(vocabulary), len(state["speakers"]), state["hidden"])
        model.load_state_dict(state["model"])
        return cls(model, vocabulary, state["speakers"])


def train_classifier(sentences: Sequence[str], speakers: Sequence[str], epochs: int = 50, batch_size: int = 32,
                     lr: float = 1e-3, hidden: int = 128, seed: int = 1, max_ngrams: int = 500000,
                     progress: Optional[str] = "speaker classifier") -> TrainedClassifier:
    """Train on (sentence, speaker) pairs with Adam; ``progress`` names the log lines (None: quiet)."""
    if len(sentences) != len(speakers):
        raise ValueError(f"{len(sentences)} training sentences but {len(speakers)} speaker labels")
    generator = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    names = sorted(set(speakers))
    label_of = {name: i for i, name in enumerate(names)}
    vocabulary = NgramVocabulary.build(sentences, max_size=max_ngrams)
    inputs = vocabulary.encode(sentences)
    labels = torch.tensor([label_of[s] for s in speakers])
    model = SpeakerClassifier(len(vocabulary), len(names), hidden)
    sparse = torch.optim.SparseAdam(list(model.embed.parameters()), lr=lr)
    dense = torch.optim.Adam(list(model.out.parameters()), lr=lr)
    loss_fn = nn.CrossEntropyLoss()
    started = time.time()
    model.train()
    for epoch in range(1, epochs + 1):
        total = 0.0
        for batch in torch.randperm(len(labels), generator=generator).split(batch_size):
            sparse.zero_grad()
            dense.zero_grad()
            loss = loss_fn(model(inputs[batch]), labels[batch])
            loss.backward()
            sparse.step()
            dense.step()
            total += loss.item() * len(batch)
        if progress and (epoch == 1 or epoch % 10 == 0 or epoch == epochs):
            logger.info(f"{progress}: epoch {epoch}/{epochs}, loss {total / len(labels):.3f}, "
                        f"{time.time() - started:.0f} s")
    return TrainedClassifier(model.eval(), vocabulary, names)
