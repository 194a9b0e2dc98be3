"""An LDA topic model of the source side, for the ``topic`` speaker bias.

The ``topic`` variant (Wei et al., AAAI 2019: a topic-informed biased softmax)
adds b = theta(src) . Phi to the logits, theta being the topic mixture of the
source sentence under an LDA model fitted here, once, on the training sources.
Fitting uses scikit-learn's ``LatentDirichletAllocation``; the model is saved as
a plain ``.npz`` (no pickle) holding what inference needs: exp(E[log beta]) over
the source dictionary, the document-topic prior and the E-step settings, plus a
hash of the source dictionary so that a model fitted on another vocabulary is
refused. Inference (:func:`topic_mixture`) is scikit-learn's E-step written in
torch, batched, on the model's device; ``tests/unit/test_topic_model.py`` checks
it against ``LatentDirichletAllocation.transform``.

Usage::

    fairseq-speaker-topics bin --topics 20 --out bin/topics.npz
    fairseq-train bin ... --speaker-bias topic --topic-model bin/topics.npz
"""

import argparse
import logging
import os
import sys
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from fairseq_speaker.atomic_write import atomic_path
from fairseq_speaker.data import SpeakerDataError, dictionary_hash

logger = logging.getLogger(__name__)

FORMAT_VERSION = 1


@dataclass
class TopicModel:
    """What inference needs of a fitted LDA model.

    Attributes:
        exp_topic_word: exp(E[log beta]) ``[K, W]``, W the size of the source dictionary (its
            special symbols' columns are never read).
        doc_topic_prior: alpha, the Dirichlet prior of a sentence's topic mixture.
        max_doc_update_iter, mean_change_tol: the E-step's stopping rule.
        nspecial: source dictionary ids below this are special symbols (pad, eos, unk, bos).
        dictionary_hash: :func:`~fairseq_speaker.data.dictionary_hash` of the source dictionary.
    """

    exp_topic_word: np.ndarray
    doc_topic_prior: float
    max_doc_update_iter: int
    mean_change_tol: float
    nspecial: int
    dictionary_hash: str

    @property
    def num_topics(self) -> int:
        return int(self.exp_topic_word.shape[0])

    def save(self, path: str) -> None:
        """Write atomically: a reader never sees half a file."""
        with atomic_path(path) as tmp, open(tmp, "wb") as f:  # a file object: np.savez adds no ".npz"
            np.savez(f, format_version=np.int64(FORMAT_VERSION), exp_topic_word=self.exp_topic_word.astype(np.float32),
                     doc_topic_prior=np.float64(self.doc_topic_prior),
                     max_doc_update_iter=np.int64(self.max_doc_update_iter),
                     mean_change_tol=np.float64(self.mean_change_tol), nspecial=np.int64(self.nspecial),
                     dictionary_hash=np.array(self.dictionary_hash))

    @classmethod
    def load(cls, path: str) -> "TopicModel":
        if not os.path.isfile(path):
            raise SpeakerDataError(f"topic model not found: expected {path} (fairseq-speaker-topics writes it)")
        try:
            with np.load(path, allow_pickle=False) as f:
                version = int(f["format_version"])
                if version != FORMAT_VERSION:
                    raise SpeakerDataError(f"{path}: topic model format {version}, this version reads "
                                           f"{FORMAT_VERSION}; fit it again with fairseq-speaker-topics")
                return cls(f["exp_topic_word"].astype(np.float32), float(f["doc_topic_prior"]),
                           int(f["max_doc_update_iter"]), float(f["mean_change_tol"]), int(f["nspecial"]),
                           str(f["dictionary_hash"]))
        except (OSError, ValueError, KeyError) as e:
            raise SpeakerDataError(f"{path}: not a topic model written by fairseq-speaker-topics ({e})") from None


def bag_of_words(sentences, vocab_size: int, nspecial: int):
    """A sparse count matrix ``[sentences, vocab_size]`` of token ids, special symbols left out."""
    from scipy import sparse

    rows, cols = [], []
    for i, tokens in enumerate(sentences):
        ids = np.asarray(tokens, dtype=np.int64)
        ids = ids[ids >= nspecial]
        rows.append(np.full(len(ids), i, dtype=np.int64))
        cols.append(ids)
    rows_a = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int64)
    cols_a = np.concatenate(cols) if cols else np.zeros(0, dtype=np.int64)
    data = np.ones(len(rows_a), dtype=np.float64)
    return sparse.csr_matrix((data, (rows_a, cols_a)), shape=(len(sentences), vocab_size))


def fit(sentences, dictionary, num_topics: int, seed: int = 1, max_iter: int = 10):
    """Fit scikit-learn's LDA (online variational Bayes) on token-id sentences of ``dictionary``.

    Returns the :class:`TopicModel` and the fitted ``LatentDirichletAllocation``.
    """
    from sklearn.decomposition import LatentDirichletAllocation

    if num_topics < 1:
        raise ValueError(f"--topics must be at least 1, got {num_topics}")
    counts = bag_of_words(sentences, len(dictionary), dictionary.nspecial)
    if counts.nnz == 0:
        raise SpeakerDataError("the training sources have no words to fit topics on")
    lda = LatentDirichletAllocation(n_components=num_topics, learning_method="online", max_iter=max_iter,
                                    random_state=seed)
    lda.fit(counts)
    model = TopicModel(lda.exp_dirichlet_component_.astype(np.float32), float(lda.doc_topic_prior_),
                       int(lda.max_doc_update_iter), float(lda.mean_change_tol), dictionary.nspecial,
                       dictionary_hash(dictionary))
    return model, lda


def _expectation(gamma: Tensor) -> Tensor:
    """exp(E[log theta]) of Dirichlet parameters ``[B, K]``."""
    return torch.exp(torch.digamma(gamma) - torch.digamma(gamma.sum(dim=1, keepdim=True)))


def topic_mixture(tokens: Tensor, exp_topic_word: Tensor, doc_topic_prior: float, max_iter: int,
                  mean_change_tol: float, nspecial: int) -> Tensor:
    """The topic mixture theta ``[B, K]`` of token-id sentences ``[B, L]`` (any padding).

    scikit-learn's E-step (``_update_doc_distribution`` from a constant start) for a
    batch: each sentence stops updating once its mean change falls below the tolerance,
    as there. Computed in float64.
    """
    beta = exp_topic_word.to(torch.float64)  # K x W
    mask = tokens.ge(nspecial) & tokens.lt(beta.size(1))  # B x L
    words = beta.t()[tokens.clamp(min=0, max=beta.size(1) - 1)] * mask.unsqueeze(2)  # B x L x K
    eps = torch.finfo(torch.float64).eps
    gamma = torch.ones(tokens.size(0), beta.size(0), dtype=torch.float64, device=tokens.device)
    exp_theta = _expectation(gamma)
    active = torch.ones(tokens.size(0), dtype=torch.bool, device=tokens.device)
    for _ in range(max_iter):
        norm = torch.einsum("bk,blk->bl", exp_theta, words) + eps  # B x L
        new = exp_theta * torch.einsum("bl,blk->bk", mask / norm, words) + doc_topic_prior
        change = (new - gamma).abs().mean(dim=1)
        gamma = torch.where(active.unsqueeze(1), new, gamma)
        exp_theta = torch.where(active.unsqueeze(1), _expectation(new), exp_theta)
        active = active & (change >= mean_change_tol)
        if not bool(active.any()):
            break
    return gamma / gamma.sum(dim=1, keepdim=True)


def random_topic_model(dictionary, num_topics: int, seed: int = 0) -> TopicModel:
    """A topic model with random topics over ``dictionary`` (for tests and parameter accounting)."""
    rng = np.random.default_rng(seed)
    return TopicModel(rng.gamma(1.0, 1.0, (num_topics, len(dictionary))).astype(np.float32) / 10,
                      1.0 / num_topics, 100, 1e-3, dictionary.nspecial, dictionary_hash(dictionary))


def main(argv=None) -> None:
    from fairseq.data import Dictionary, data_utils

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", help="a data directory binarized by fairseq-preprocess")
    parser.add_argument("--source-lang")
    parser.add_argument("--target-lang")
    parser.add_argument("--train-subset", default="train")
    parser.add_argument("--topics", type=int, default=20, help="K, the number of topics")
    parser.add_argument("--max-iter", type=int, default=10, help="passes over the data (scikit-learn's max_iter)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True, help="the topic model file to write (.npz)")
    parser.add_argument("--top-words", type=int, default=8, help="words to print per topic")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="[topics] %(message)s", stream=sys.stderr)

    if not os.path.isdir(args.data):
        raise SystemExit(f"data directory not found: {args.data} (a folder binarized by fairseq-preprocess)")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if not os.path.isdir(out_dir):
        raise SystemExit(f"--out {args.out}: the folder {out_dir} does not exist")
    src, tgt = args.source_lang, args.target_lang
    if src is None or tgt is None:
        src, tgt = data_utils.infer_language_pair(args.data)
    if src is None:
        raise SystemExit(f"could not infer the language pair in {args.data}: pass --source-lang and --target-lang")
    dict_path = os.path.join(args.data, f"dict.{src}.txt")
    if not os.path.isfile(dict_path):
        raise SystemExit(f"source dictionary not found: expected {dict_path} (is --source-lang right?)")
    dictionary = Dictionary.load(dict_path)
    dataset = None
    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        prefix = os.path.join(args.data, f"{args.train_subset}.{pair}.{src}")
        dataset = data_utils.load_indexed_dataset(prefix, dictionary)
        if dataset is not None:
            break
    if dataset is None:
        raise SystemExit(f"no binarized {args.train_subset} data for {src} in {args.data}")
    sentences = [dataset[i].numpy() for i in range(len(dataset))]
    logger.info(f"fitting {args.topics} topics on {len(sentences):,} {src} sentences ({len(dictionary):,} words)")
    try:
        model, lda = fit(sentences, dictionary, args.topics, seed=args.seed, max_iter=args.max_iter)
    except (SpeakerDataError, ValueError) as e:
        raise SystemExit(f"{args.data}: {e}") from None
    model.save(args.out)
    for k, weights in enumerate(lda.components_):
        top = np.argsort(-weights)[: args.top_words]
        print(f"topic {k}: " + " ".join(dictionary[int(i)] for i in top))
    print(f"wrote {args.out} ({model.num_topics} topics over {len(dictionary):,} source words)")


if __name__ == "__main__":
    main()
