"""SpeakerDataset: speakers follow their sentences into batches; a target prefix is read, not predicted."""

import pytest
import torch
from fairseq.data import LanguagePairDataset

from fairseq_speaker.data import SpeakerDataset
from tests.helpers import make_dictionary


def pairs(dictionary, lengths):
    torch.manual_seed(1)
    return [torch.cat([torch.randint(4, len(dictionary), (n - 1,)), torch.tensor([dictionary.eos()])])
            for n in lengths]


@pytest.mark.parametrize("left_pad_target", [False, True])
def test_the_prefix_is_an_input_not_a_prediction_target(left_pad_target):
    d = make_dictionary(10)
    src, tgt = pairs(d, [4, 2, 5]), pairs(d, [3, 5, 2])
    base = LanguagePairDataset(src, [len(s) for s in src], d, tgt, [len(t) for t in tgt], d,
                               left_pad_target=left_pad_target)
    speakers = torch.tensor([2, 0, 1])
    prefix = torch.tensor([11, 12, 13])  # each sentence's speaker token
    dataset = SpeakerDataset(base, speakers, target_prefix=prefix)
    batch = dataset.collater([dataset[i] for i in range(3)])
    plain = base.collater([base[i] for i in range(3)])
    order = batch["id"].tolist()
    assert batch["net_input"]["speakers"].tolist() == speakers[order].tolist()
    for row, i in enumerate(order):
        words = tgt[i].tolist()
        target = [t for t in batch["target"][row].tolist() if t != d.pad()]
        assert target == words  # the prefix left the targets
        inputs = [t for t in batch["net_input"]["prev_output_tokens"][row].tolist() if t != d.pad()]
        assert inputs == [d.eos(), int(prefix[i])] + words[:-1]  # and is the first word read
    assert batch["ntokens"] == plain["ntokens"] == sum(len(t) for t in tgt)


def test_without_prefix_the_batch_is_the_wrapped_datasets_plus_speakers():
    d = make_dictionary(10)
    src, tgt = pairs(d, [4, 2]), pairs(d, [3, 5])
    base = LanguagePairDataset(src, [4, 2], d, tgt, [3, 5], d)
    batch = SpeakerDataset(base, torch.tensor([1, 0])).collater([base[0], base[1]])
    plain = base.collater([base[0], base[1]])
    assert torch.equal(batch["target"], plain["target"]) and batch["ntokens"] == plain["ntokens"]
    assert batch["net_input"]["speakers"].tolist() == torch.tensor([1, 0])[batch["id"]].tolist()
