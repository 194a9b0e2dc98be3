"""Parameter accounting: what each part of a speaker_lstm model costs, and what a speaker costs.

Builds the model on PyTorch's ``meta`` device (no memory is allocated, so the
paper's 40k vocabulary and thousands of speakers cost nothing) from a data
directory or from vocabulary sizes and a speaker count, and prints the
parameters of every component, the speaker-side parameters, the cost of one
more speaker in parameters and bytes, and full_bias against fact_bias.

Usage::

    fairseq-speaker-params --data bin --arch lstm_fact_bias
    fairseq-speaker-params --src-vocab 40000 --tgt-vocab 40000 --speakers 1887 --speaker-rank 10
"""

import argparse
import os
from dataclasses import dataclass, fields
from types import SimpleNamespace
from typing import Dict, List, Optional, Tuple

import torch
from fairseq.data import Dictionary, data_utils

from fairseq_speaker.data import SpeakerDictionary, read_speaker_file
from fairseq_speaker.models.speaker_lstm import SpeakerLSTMConfig, SpeakerLSTMModel

#: the modules of a speaker_lstm, in the order of the paper's description
COMPONENTS: List[Tuple[str, str]] = [
    ("source embeddings E_S", "encoder.embed_tokens"),
    ("encoder BiLSTM", "encoder.lstm"),
    ("decoder initial state W_p", "decoder.init_hidden"),
    ("decoder LSTM (input feeding)", "decoder.cell"),
    ("MLP attention", "decoder.attention"),
    ("output layer W_o, b_o (eq. 6)", "decoder.output_projection"),
    ("target embeddings E_T (= softmax)", "decoder.embed_tokens"),
    ("softmax bias b_T", "decoder.output_bias"),
    ("speaker bias", "decoder.speaker_bias"),
]
BYTES_PER_PARAMETER = 4  # float32


@dataclass
class Accounting:
    components: Dict[str, int]
    speaker: int  # parameters of the speaker bias (all speakers)
    total: int
    num_speakers: int
    vocab_size: int
    rank: int

    @property
    def base(self) -> int:
        """The speaker-agnostic part of the model."""
        return self.total - self.speaker

    @property
    def full_bias(self) -> int:
        return self.num_speakers * self.vocab_size

    @property
    def fact_bias(self) -> int:
        return self.rank * (self.num_speakers + self.vocab_size)

    @property
    def fact_saving(self) -> float:
        """Share of full_bias's speaker parameters that fact_bias does without."""
        return 1.0 - self.fact_bias / self.full_bias


def _count(model: torch.nn.Module, path: str) -> int:
    try:
        return sum(p.numel() for p in model.get_submodule(path).parameters())
    except AttributeError:  # a parameter, not a module
        return model.get_parameter(path).numel()


def _sized_dictionary(size: int) -> Dictionary:
    d = Dictionary()
    for i in range(size - len(d)):
        d.add_symbol(f"w{i}")
    return d


def count_parameters(src_vocab: int, tgt_vocab: int, num_speakers: int, **model_options) -> Accounting:
    """Build a ``speaker_lstm`` on the meta device and count its parameters by component.

    ``model_options`` are fields of :class:`SpeakerLSTMConfig`; the rest keep the paper's defaults.
    Vocabulary sizes include fairseq's 4 special symbols.
    """
    cfg = SpeakerLSTMModel.speaker_options()(**model_options)
    task = SimpleNamespace(
        source_dictionary=_sized_dictionary(src_vocab),
        target_dictionary=_sized_dictionary(tgt_vocab),
        speaker_dictionary=SpeakerDictionary([str(i) for i in range(num_speakers)]),
    )
    with torch.device("meta"):
        model = SpeakerLSTMModel.build_model(cfg, task)
    components = {name: _count(model, path) for name, path in COMPONENTS}
    total = sum(p.numel() for p in model.parameters())
    assert sum(components.values()) == total, "a parameter is outside the listed components"
    return Accounting(components, components["speaker bias"], total, num_speakers, tgt_vocab, cfg.speaker_rank)


def sizes_from_data(data: str, source_lang: Optional[str], target_lang: Optional[str],
                    speaker_suffix: str) -> Tuple[int, int, int]:
    """Vocabulary sizes from ``dict.{lang}.txt``; speakers from ``dict.spk.txt`` or the training labels."""
    if source_lang is None or target_lang is None:
        source_lang, target_lang = data_utils.infer_language_pair(data)
    if source_lang is None:
        raise SystemExit(f"could not infer the language pair in {data}: pass --source-lang and --target-lang")
    src = len(Dictionary.load(os.path.join(data, f"dict.{source_lang}.txt")))
    tgt = len(Dictionary.load(os.path.join(data, f"dict.{target_lang}.txt")))
    spk_dict = os.path.join(data, "dict.spk.txt")
    if os.path.exists(spk_dict):
        speakers = len(SpeakerDictionary.load(spk_dict))
    else:
        speakers = len(SpeakerDictionary.from_labels(read_speaker_file(os.path.join(data, f"train.{speaker_suffix}"))))
    return src, tgt, speakers


def format_report(acc: Accounting, arch: str) -> str:
    def row(label, n, of=None):
        share = f"{100 * n / of:8.3f}%" if of else ""
        return f"  {label:<38}{n:>14,}  {share}"

    lines = [f"{arch}: {acc.total:,} parameters ({acc.total * BYTES_PER_PARAMETER / 2**20:,.1f} MiB in float32)"]
    lines += [row(name, n, acc.total) for name, n in acc.components.items()]
    lines += [
        "",
        row("speaker-agnostic part (base model)", acc.base),
        row(f"speaker side ({acc.num_speakers:,} speakers)", acc.speaker, acc.total),
        "",
        f"one more speaker, for V = {acc.vocab_size:,} target words (relative to the base model):",
        f"  full_bias: {acc.vocab_size:,} parameters = {acc.vocab_size * BYTES_PER_PARAMETER:,} bytes "
        f"({100 * acc.vocab_size / acc.base:.3f}%)",
        f"  fact_bias: {acc.rank} parameters = {acc.rank * BYTES_PER_PARAMETER:,} bytes "
        f"({100 * acc.rank / acc.base:.5f}%), plus {acc.vocab_size * acc.rank:,} shared by all speakers",
        "",
        f"all {acc.num_speakers:,} speakers: full_bias {acc.full_bias:,}, fact_bias (r = {acc.rank}) "
        f"{acc.fact_bias:,}: fact_bias saves {100 * acc.fact_saving:.2f}% of full_bias's speaker parameters",
    ]
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", help="a data directory binarized by fairseq-preprocess, with speaker files")
    parser.add_argument("--source-lang")
    parser.add_argument("--target-lang")
    parser.add_argument("--speaker-suffix", default="spk")
    parser.add_argument("--src-vocab", type=int, help="source vocabulary size, without --data")
    parser.add_argument("--tgt-vocab", type=int, help="target vocabulary size, without --data")
    parser.add_argument("--speakers", type=int, help="number of speakers, without --data")
    parser.add_argument("--arch", default="lstm_fact_bias", choices=["lstm_base", "lstm_full_bias", "lstm_fact_bias"])
    for f in fields(SpeakerLSTMConfig):
        if f.type is int and f.name not in ("max_source_positions", "max_target_positions"):
            parser.add_argument("--" + f.name.replace("_", "-"), type=int, default=None)
    args = parser.parse_args(argv)

    if args.data:
        src, tgt, speakers = sizes_from_data(args.data, args.source_lang, args.target_lang, args.speaker_suffix)
    elif args.src_vocab and args.tgt_vocab and args.speakers:
        src, tgt, speakers = args.src_vocab, args.tgt_vocab, args.speakers
    else:
        parser.error("give --data, or --src-vocab, --tgt-vocab and --speakers")
    options = {f.name: getattr(args, f.name) for f in fields(SpeakerLSTMConfig)
               if getattr(args, f.name, None) is not None}
    options["speaker_bias"] = {"lstm_base": "none", "lstm_full_bias": "full", "lstm_fact_bias": "fact"}[args.arch]
    print(format_report(count_parameters(src, tgt, speakers, **options), args.arch))


if __name__ == "__main__":
    main()
