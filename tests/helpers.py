"""Tiny dictionaries, models and batches for the unit tests (8-16 dims, a dozen words)."""

import argparse
import tempfile
from types import SimpleNamespace
from typing import Dict, List, Optional

import torch
from fairseq.data import Dictionary
from fairseq.data.data_utils import collate_tokens

from fairseq_speaker.data import SpeakerDictionary
from fairseq_speaker.models import SpeakerLSTMModel, SpeakerTransformerModel
from fairseq_speaker.models.speaker_lstm import base_architecture as lstm_defaults
from fairseq_speaker.models.speaker_transformer import architecture as transformer_defaults
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY, build_speaker_bias, parse_variant_name

FAMILIES = ("lstm", "transformer")
TINY_LSTM = dict(encoder_embed_dim=8, encoder_hidden_size=8, decoder_embed_dim=8, decoder_hidden_size=16,
                 attention_dim=8, dropout=0.0, lstm_dropout=0.0, target_word_dropout=0.0)
TINY_TRANSFORMER = dict(encoder_embed_dim=16, decoder_embed_dim=16, encoder_ffn_embed_dim=32,
                        decoder_ffn_embed_dim=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                        decoder_attention_heads=2, dropout=0.0)
#: small options of every variant for the unit tests
TINY_VARIANT_OPTIONS = dict(speaker_rank=3, speaker_embed_dim=3)


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


def variant_options(name: str, task, workdir: Optional[str] = None) -> Dict:
    """Options to build variant ``name`` (or ``a+b``) small: the tiny defaults, plus what each variant
    says it needs to be built (``SpeakerBias.example_options``, e.g. a topic model file)."""
    options = dict(TINY_VARIANT_OPTIONS)
    workdir = workdir or tempfile.mkdtemp(prefix="speaker-bias-")
    for part in parse_variant_name(name):
        options.update(SPEAKER_BIAS_REGISTRY[part].example_options(workdir, task.source_dictionary))
    return options


def randomize(module: torch.nn.Module, std: float = 2.0) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.normal_(0.0, std)


def build_bias(name: str, task, randomize_parameters: bool = True, **overrides):
    """The variant ``name`` on its own, for ``task``'s dictionaries."""
    cfg = argparse.Namespace(**{**variant_options(name, task), **overrides})
    bias = build_speaker_bias(name, cfg, task.speaker_dictionary, task.target_dictionary, task.source_dictionary)
    if randomize_parameters:
        randomize(bias)
    return bias


def make_model(speaker_bias: str = "full", num_speakers: int = 4, task=None, randomize_bias: bool = True,
               family: str = "lstm", **overrides):
    """A model with tiny dims; speaker-bias parameters random unless ``randomize_bias`` is False."""
    task = task or make_task(num_speakers)
    options = dict(TINY_LSTM if family == "lstm" else TINY_TRANSFORMER)
    options.update(variant_options(speaker_bias, task))
    options.update(overrides)
    args = argparse.Namespace(speaker_bias=speaker_bias, **options)
    if family == "lstm":
        lstm_defaults(args)
        model = SpeakerLSTMModel.build_model(args, task)
    else:
        transformer_defaults(args)
        model = SpeakerTransformerModel.build_model(args, task)
    if randomize_bias:
        randomize(model.speaker_bias)
    return model.eval()


def random_batch(dictionary: Dictionary, lengths: List[int], left_pad: bool = True,
                 generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Sentences of random words ending in EOS, padded to a tensor ``[batch, max_len]``."""
    rows = []
    for n in lengths:
        words = torch.randint(dictionary.nspecial, len(dictionary), (n - 1,), generator=generator)
        rows.append(torch.cat([words, torch.tensor([dictionary.eos()])]))
    return collate_tokens(rows, dictionary.pad(), left_pad=left_pad)
