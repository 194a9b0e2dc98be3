"""Tiny dictionaries, models and batches for the unit tests (8-16 dims, a dozen words)."""

from types import SimpleNamespace
from typing import List, Optional

import torch
from fairseq.data import Dictionary

from fairseq_speaker.data import SpeakerDictionary
from fairseq_speaker.models.speaker_lstm import SpeakerLSTMConfig, SpeakerLSTMModel


def make_dictionary(num_words: int = 12) -> Dictionary:
    d = Dictionary()
    for i in range(num_words):
        d.add_symbol(f"w{i}")
    return d


def make_task(num_speakers: int = 4, num_words: int = 12):
    return SimpleNamespace(
        source_dictionary=make_dictionary(num_words),
        target_dictionary=make_dictionary(num_words + 3),
        speaker_dictionary=SpeakerDictionary([f"spk{i}" for i in range(num_speakers)]),
    )


def make_model(speaker_bias: str = "full", num_speakers: int = 4, task=None, randomize_bias: bool = True,
               **overrides) -> SpeakerLSTMModel:
    """A model with tiny dims; speaker parameters random unless ``randomize_bias`` is False."""
    cfg = SpeakerLSTMConfig(
        encoder_embed_dim=8, encoder_hidden_size=8, decoder_embed_dim=8, decoder_hidden_size=16,
        attention_dim=8, dropout=0.0, speaker_bias=speaker_bias, speaker_rank=3,
    )
    for key, value in overrides.items():
        setattr(cfg, key, value)
    task = task or make_task(num_speakers)
    model = SpeakerLSTMModel.build_model(cfg, task)
    if randomize_bias:
        with torch.no_grad():
            for p in model.speaker_bias.parameters():
                p.normal_(0.0, 2.0)
    return model.eval()


def random_batch(dictionary: Dictionary, lengths: List[int], left_pad: bool = True,
                 generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Sentences of random words ending in EOS, padded to a tensor ``[batch, max_len]``."""
    rows = []
    for n in lengths:
        words = torch.randint(dictionary.nspecial, len(dictionary), (n - 1,), generator=generator)
        rows.append(torch.cat([words, torch.tensor([dictionary.eos()])]))
    from fairseq.data.data_utils import collate_tokens

    return collate_tokens(rows, dictionary.pad(), left_pad=left_pad)
