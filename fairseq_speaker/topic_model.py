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
import math
import os
import re
import sys
import zipfile
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch
from torch import Tensor

from fairseq_speaker.atomic_write import atomic_path, check_not_an_input
from fairseq_speaker.command_registry import program_name
from fairseq_speaker.data import SpeakerDataError, dictionary_hash
from fairseq_speaker.errors import UserError, command
from fairseq_speaker.runtime import add_runtime_arguments, check_threads, configure_output, parse_seed, start_threads

PROG = program_name(__name__)
FORMAT_VERSION = 1
#: the fields of a topic model file
FIELDS = ("format_version", "exp_topic_word", "doc_topic_prior", "max_doc_update_iter", "mean_change_tol",
          "nspecial", "dictionary_hash")


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
        """Read a file written by :meth:`save`; anything else (another kind of file, a damaged or edited one)
        is refused with the file and what is wrong in it."""
        if os.path.isdir(path):
            raise SpeakerDataError(f"{path} is a directory: give the topic model file fairseq-speaker-topics wrote")
        if not os.path.isfile(path):
            raise SpeakerDataError(f"topic model not found: expected {path} (fairseq-speaker-topics writes it)")
        again = "fit it again with fairseq-speaker-topics DATA_DIR --topics K --out FILE"
        try:
            with np.load(path, allow_pickle=False) as f:
                if not hasattr(f, "files"):  # a lone .npy array
                    raise ValueError("a single array, not the fields of a topic model")
                missing = [k for k in FIELDS if k not in f.files]
                if missing:
                    raise SpeakerDataError(f"{path}: not a topic model written by fairseq-speaker-topics (no "
                                           f"{', '.join(missing)}); {again}")
                version = int(f["format_version"])
                if version != FORMAT_VERSION:
                    raise SpeakerDataError(f"{path}: topic model format {version}, this version reads "
                                           f"{FORMAT_VERSION}; fit it again with fairseq-speaker-topics")
                model = cls(np.asarray(f["exp_topic_word"]), float(f["doc_topic_prior"]),
                            int(f["max_doc_update_iter"]), float(f["mean_change_tol"]), int(f["nspecial"]),
                            str(f["dictionary_hash"]))
        except SpeakerDataError:
            raise
        except (EOFError, zipfile.BadZipFile):
            raise SpeakerDataError(f"{path}: an empty or cut-short file, not a whole topic model; {again}") from None
        except (OSError, ValueError, KeyError, TypeError) as e:
            what = "a pickle or a text file" if "pickle" in str(e) else f"{type(e).__name__}: {str(e)[:100]}"
            raise SpeakerDataError(f"{path}: not a topic model written by fairseq-speaker-topics ({what}); "
                                   f"{again}") from None
        problem = model.problem()
        if problem:
            raise SpeakerDataError(f"{path}: {problem}; {again}")
        model.exp_topic_word = model.exp_topic_word.astype(np.float32)
        return model

    def problem(self) -> Optional[str]:
        """What makes these values unusable for inference (a damaged or edited file), or None."""
        words = self.exp_topic_word
        if words.ndim != 2 or words.shape[0] < 1 or words.shape[1] <= self.nspecial:
            return (f"exp_topic_word has shape {list(words.shape)}, not [topics, source words] with at least one "
                    f"topic and one word after the {self.nspecial} special symbols")
        if not np.issubdtype(words.dtype, np.floating):
            return f"exp_topic_word holds {words.dtype} values, not floating-point numbers"
        if not np.isfinite(words).all() or (words < 0).any():
            return "exp_topic_word holds values that are not finite, non-negative numbers (NaN, inf or < 0)"
        if not (math.isfinite(self.doc_topic_prior) and self.doc_topic_prior > 0):
            return f"doc_topic_prior is {self.doc_topic_prior}, not a positive number"
        if self.max_doc_update_iter < 1:
            return f"max_doc_update_iter is {self.max_doc_update_iter}, not at least 1"
        if not (math.isfinite(self.mean_change_tol) and self.mean_change_tol >= 0):
            return f"mean_change_tol is {self.mean_change_tol}, not a number >= 0"
        if self.nspecial < 0:
            return f"nspecial is {self.nspecial}, not a number >= 0"
        if not re.fullmatch(r"[0-9a-f]{40}", self.dictionary_hash):
            return f"dictionary_hash {self.dictionary_hash[:60]!r} is not the SHA-1 of a dictionary"
        return None


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
    words = len(dictionary) - dictionary.nspecial
    if num_topics > min(words, len(sentences)):  # fitted for ever (100000 on 104 words), and none identifiable
        raise ValueError(f"--topics {num_topics}: more topics than the training sources have "
                         f"{'words' if words <= len(sentences) else 'sentences'} ({min(words, len(sentences))}); a "
                         f"topic is a distribution over the source words: give at most {min(words, len(sentences))}")
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


@command()
def main(argv=None) -> None:
    from fairseq.data import Dictionary, data_utils

    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0])
    parser.add_argument("data", help="a data directory binarized by fairseq-preprocess")
    parser.add_argument("--source-lang")
    parser.add_argument("--target-lang")
    parser.add_argument("--train-subset", default="train")
    parser.add_argument("--topics", type=int, default=20, help="K, the number of topics")
    parser.add_argument("--max-iter", type=int, default=10, help="passes over the data (scikit-learn's max_iter)")
    parser.add_argument("--seed", type=parse_seed, default=1)
    parser.add_argument("--out", required=True, help="the topic model file to write (.npz)")
    parser.add_argument("--top-words", type=int, default=8, help="words to print per topic")
    add_runtime_arguments(parser)
    args = parser.parse_args(argv)
    configure_output(args.verbose)
    check_threads(parser, args)
    for name in ("topics", "max_iter"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.top_words < 0:
        parser.error(f"--top-words must be 0 (print none) or more, got {args.top_words}")

    if not os.path.isdir(args.data):
        raise UserError(f"data directory not found: {args.data} (a folder binarized by fairseq-preprocess)")
    out_dir = os.path.dirname(os.path.abspath(args.out))
    if os.path.isdir(args.out):
        raise UserError(f"--out {args.out} is a directory: give the path of the file to write (e.g. "
                        f"{args.out}/topics.npz)")
    if not os.path.isdir(out_dir):
        raise UserError(f"--out {args.out}: the folder {out_dir} does not exist")
    check_not_an_input(args.out, "--out", folders=[("the data folder", args.data.split(os.pathsep)[0])])
    src, tgt = args.source_lang, args.target_lang
    if src is None or tgt is None:
        src, tgt = data_utils.infer_language_pair(args.data)
    if src is None:
        raise UserError(f"could not infer the language pair in {args.data}: pass --source-lang and --target-lang")
    dict_path = os.path.join(args.data, f"dict.{src}.txt")
    if not os.path.isfile(dict_path):
        raise UserError(f"source dictionary not found: expected {dict_path} (is --source-lang right?)")
    dictionary = Dictionary.load(dict_path)
    dataset = None
    for pair in (f"{src}-{tgt}", f"{tgt}-{src}"):
        prefix = os.path.join(args.data, f"{args.train_subset}.{pair}.{src}")
        dataset = data_utils.load_indexed_dataset(prefix, dictionary)
        if dataset is not None:
            break
    if dataset is None:
        raise UserError(f"no binarized {args.train_subset} data for {src} in {args.data}")
    sentences = [dataset[i].numpy() for i in range(len(dataset))]
    start_threads(args.threads)
    print(f"[topics] fitting {args.topics} topics on {len(sentences):,} {src} sentences ({len(dictionary):,} words)",
          file=sys.stderr, flush=True)
    try:
        model, lda = fit(sentences, dictionary, args.topics, seed=args.seed, max_iter=args.max_iter)
    except (SpeakerDataError, ValueError) as e:
        raise UserError(f"{args.data}: {e}") from None
    model.save(args.out)
    for k, weights in enumerate(lda.components_ if args.top_words else []):  # --top-words 0: no topic lines
        top = np.argsort(-weights)[: args.top_words]
        print(f"topic {k}: " + " ".join(dictionary[int(i)] for i in top))
    print(f"wrote {args.out} ({model.num_topics} topics over {len(dictionary):,} source words)")


if __name__ == "__main__":
    main()
