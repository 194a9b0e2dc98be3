from typing import Dict, List, Optional

import numpy as np
import torch
from fairseq.data import BaseWrapperDataset

from fairseq_speaker.data.text_files import SpeakerDataError


class SpeakerDataset(BaseWrapperDataset):
    """A language-pair dataset whose batches also carry ``net_input["speakers"]``.

    Args:
        dataset: the wrapped :class:`~fairseq.data.LanguagePairDataset`.
        speakers: LongTensor ``[len(dataset)]``, the speaker id of every sentence
            (negative ids for unseen speakers, see :mod:`fairseq_speaker.data.speaker_dictionary`).
        target_prefix: optional LongTensor ``[len(dataset)]``, a token put before every
            target sentence (the speaker token of the spk_token baseline). The decoder reads it
            as its first input; it is not a prediction target (see :meth:`collater`).
    """

    def __init__(self, dataset, speakers: torch.Tensor, target_prefix: Optional[torch.Tensor] = None):
        super().__init__(dataset)
        if len(speakers) != len(dataset):
            raise ValueError(f"{len(speakers)} speaker ids for {len(dataset)} sentences")
        self.speakers = speakers.long()
        self.target_prefix = target_prefix

    def __getitem__(self, index):
        item = self.dataset[index]
        if self.target_prefix is not None and item.get("target") is not None:
            item["target"] = torch.cat([self.target_prefix[index : index + 1].to(item["target"]), item["target"]])
        return item

    def collater(self, samples: List[Dict]) -> Dict:
        batch = self.dataset.collater(samples)
        if "net_input" in batch:
            # the wrapped collater sorts sentences by length: follow it through the ids
            batch["net_input"]["speakers"] = self.speakers.index_select(0, batch["id"])
        if self.target_prefix is not None and batch.get("target") is not None:
            self._unpredict_prefix(batch)
        return batch

    def _unpredict_prefix(self, batch: Dict) -> None:
        """The prefix token is an input, not a prediction target (as in the authors' spk_token system):
        it stays in ``prev_output_tokens`` but becomes padding in ``target``, which every criterion
        ignores, and leaves the token count."""
        target = batch["target"]
        pad = self.dataset.tgt_dict.pad()
        first = target.ne(pad).int().argmax(dim=1)  # the prefix: first real token (right or left padding)
        rows = torch.arange(target.size(0))
        has_prefix = target[rows, first].ne(pad)
        batch["target"] = target.index_put((rows[has_prefix], first[has_prefix]), torch.tensor(pad))
        batch["ntokens"] = int(batch["ntokens"]) - int(has_prefix.sum())

    def batch_by_size(self, indices, max_tokens=None, max_sentences=None, required_batch_size_multiple=1):
        """fairseq's batching, without losing the last sentences.

        fairseq 0.12 drops the last batch when its size is not a multiple of
        ``--required-batch-size-multiple`` (8 by default; fairseq issue 5036):
        ``fairseq-generate`` would silently skip up to 7 test sentences. Those
        sentences are given back here as one smaller final batch.
        """
        if len(indices) == 0:  # fairseq's batching indexes the first sentence (an IndexError)
            raise SpeakerDataError(
                "no sentence of the split is left to translate or train on: every one was skipped as longer than the "
                "model's positions (--skip-invalid-size-inputs-valid-test with --max-source-positions and "
                "--max-target-positions): give larger positions, or leave out --skip-invalid-size-inputs-valid-test")
        batches = list(
            self.dataset.batch_by_size(
                indices,
                max_tokens=max_tokens,
                max_sentences=max_sentences,
                required_batch_size_multiple=required_batch_size_multiple,
            )
        )
        if sum(len(b) for b in batches) < len(indices):
            indices = np.asarray(indices, dtype=np.int64)
            batched = np.concatenate(batches) if batches else np.empty(0, dtype=np.int64)
            batches.append(indices[~np.isin(indices, batched)])
        return batches
