"""Synthetic tasks and corpora for the benchmarks: the cost of a step does not depend on which words."""

import os
from typing import List, Tuple

import numpy as np
import torch

from fairseq_speaker.data import SpeakerDictionary


def write_dictionaries(folder: str, vocab: int, speakers: int, langs=("src", "tgt")) -> None:
    """``dict.{lang}.txt`` of ``vocab`` words each (fairseq's 4 special symbols included) and a
    ``dict.spk.txt`` of ``speakers`` labels."""
    for lang in langs:
        with open(os.path.join(folder, f"dict.{lang}.txt"), "w", encoding="utf-8") as f:
            f.writelines(f"w{i} 1\n" for i in range(vocab - 4))
    SpeakerDictionary([f"spk{i}" for i in range(speakers)], [1] * speakers).save(os.path.join(folder, "dict.spk.txt"))


def make_task(folder: str, vocab: int, speakers: int):
    """A speaker_translation task over dictionaries of ``vocab`` words and ``speakers`` speakers."""
    from fairseq_speaker.tasks.speaker_translation import SpeakerTranslationConfig, SpeakerTranslationTask

    write_dictionaries(folder, vocab, speakers)
    cfg = SpeakerTranslationConfig(data=folder, source_lang="src", target_lang="tgt")
    return SpeakerTranslationTask.setup_task(cfg)


def zipf_sentences(lengths: np.ndarray, vocab: int, seed: int) -> List[torch.Tensor]:
    """Sentences of the given lengths of word ids (Zipfian over the ``vocab - 4`` real words), each
    ending with </s>."""
    rng = np.random.default_rng(seed)
    words = vocab - 4
    p = 1.0 / np.arange(1, words + 1)
    p /= p.sum()
    ids = rng.choice(words, size=int(lengths.sum()), p=p) + 4
    out, start = [], 0
    for length in lengths:
        out.append(torch.from_numpy(np.append(ids[start:start + length], 2)).long())
        start += length
    return out


def corpus(n: int, vocab: int, speakers: int, min_len: int, max_len: int, seed: int
           ) -> Tuple[List[torch.Tensor], List[torch.Tensor], torch.Tensor]:
    """Source sentences (lengths uniform in [min_len, max_len]), their targets (a length within 2 words
    of the source's, as translations go) and a speaker id per pair (uniform over the table)."""
    rng = np.random.default_rng(seed + 3)
    src_lengths = rng.integers(min_len, max_len + 1, size=n)
    tgt_lengths = np.clip(src_lengths + rng.integers(-2, 3, size=n), 1, None)
    src = zipf_sentences(src_lengths, vocab, seed)
    tgt = zipf_sentences(tgt_lengths, vocab, seed + 1)
    spk = torch.from_numpy(np.random.default_rng(seed + 2).integers(0, max(speakers, 1), size=n)).long()
    return src, tgt, spk


def language_pair_dataset(src, tgt, src_dict, tgt_dict):
    """fairseq's LanguagePairDataset over in-memory sentences (left-padded sources, as fairseq-train)."""
    from fairseq.data import LanguagePairDataset

    return LanguagePairDataset(
        src, torch.tensor([len(s) for s in src]), src_dict, tgt, torch.tensor([len(t) for t in tgt]), tgt_dict,
        left_pad_source=True, left_pad_target=False,
    )
