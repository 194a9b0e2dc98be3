"""Parameter accounting: what each part of a speaker model costs, and what a speaker costs.

Builds any speaker preset (``lstm_*``, ``transformer_*``) on PyTorch's ``meta``
device (no memory is allocated, so the paper's 40k vocabulary and millions of
speakers cost nothing), from a data directory or from vocabulary sizes and a
speaker count, with any model flag of fairseq's own parser (``--encoder-layers 3``,
``--speaker-bias simplex``, ``--speaker-rank 4``). Prints the parameters of every
component, the speaker side (from the variant contract: the parameters that
belong to speakers and those shared), what one more speaker costs, and every
registered variant side by side at the same number of speakers and words.

Usage::

    fairseq-speaker-params --data bin --arch lstm_fact_bias
    fairseq-speaker-params --src-vocab 40000 --tgt-vocab 40000 --speakers 1887 --arch transformer_fact_bias
"""

import argparse
import os
import tempfile
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Dict, List, Optional, Sequence, Tuple

import torch
from fairseq import options
from fairseq.data import Dictionary, data_utils
from fairseq.models import ARCH_MODEL_NAME_REGISTRY, ARCH_MODEL_REGISTRY

from fairseq_speaker.data import SpeakerDictionary, read_speaker_file
from fairseq_speaker.models import speaker_presets
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY, SpeakerBias, build_speaker_bias

#: names for the modules of the paper's LSTM (model name -> module path -> name), in the order of the
#: paper's description; other modules are listed by their path
LABELS: Dict[str, Dict[str, str]] = {"speaker_lstm": {
    "encoder.embed_tokens": "source embeddings E_S",
    "encoder.lstm": "encoder BiLSTM",
    "decoder.init_hidden": "decoder initial state W_p",
    "decoder.cell": "decoder LSTM (input feeding)",
    "decoder.attention": "MLP attention",
    "decoder.output_projection": "output layer W_o, b_o (eq. 6)",
    "decoder.embed_tokens": "target embeddings E_T (= softmax)",
    "decoder.output_bias": "softmax bias b_T",
    "decoder.speaker_bias": "speaker bias",
}}
BYTES_PER_PARAMETER = 4  # float32


@dataclass
class VariantCost:
    name: str
    per_speaker: int  # parameters of one speaker
    shared: int  # parameters shared by all speakers
    num_speakers: int

    @property
    def total(self) -> int:
        return self.per_speaker * self.num_speakers + self.shared


@dataclass
class Accounting:
    arch: str
    components: Dict[str, int]  # label -> parameters (tied parameters counted once)
    total: int
    speaker_bias: VariantCost  # the model's own variant
    vocab_size: int

    @property
    def speaker(self) -> int:
        """Parameters of the speaker bias (all speakers, and what they share)."""
        return self.speaker_bias.total

    @property
    def base(self) -> int:
        """The speaker-agnostic part of the model."""
        return self.total - self.speaker


def sized_dictionary(size: int) -> Dictionary:
    """A dictionary of ``size`` entries, fairseq's 4 special symbols included."""
    d = Dictionary()
    for i in range(size - len(d)):
        d.add_symbol(f"w{i}")
    return d


def _component(name: str, labels: Dict[str, str]) -> str:
    """The label of a parameter's module: the named one it belongs to, or its path to depth 2."""
    parts = name.split(".")
    for depth in (2, 1):
        path = ".".join(parts[:depth])
        if path in labels:
            return labels[path]
    return ".".join(parts[:2])


def variant_cost(bias: SpeakerBias, name: str) -> VariantCost:
    return VariantCost(name, bias.parameters_per_speaker(), sum(p.numel() for p in bias.shared_parameters().values()),
                       bias.num_speakers)


def count_parameters(src_vocab: int, tgt_vocab: int, num_speakers: int, arch: str = "lstm_fact_bias",
                     model_args: Sequence[str] = ()) -> Accounting:
    """Build ``arch`` on the meta device and count its parameters by component.

    ``model_args`` are fairseq-train flags (``--speaker-rank 4``, ``--encoder-layers 3``); the rest keep
    the preset's defaults. Vocabulary sizes include fairseq's 4 special symbols.
    """
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "data-bin", "--task", "speaker_translation", "--arch", arch, *model_args])
    task = SimpleNamespace(
        source_dictionary=sized_dictionary(src_vocab),
        target_dictionary=sized_dictionary(tgt_vocab),
        speaker_dictionary=SpeakerDictionary([str(i) for i in range(num_speakers)]),
    )
    with torch.device("meta"):
        model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
    labels = LABELS.get(ARCH_MODEL_NAME_REGISTRY[arch], {})
    components: Dict[str, int] = {label: 0 for label in labels.values()}  # in the paper's order
    for name, p in model.named_parameters():  # named_parameters yields a tied parameter once
        label = _component(name, labels)
        components[label] = components.get(label, 0) + p.numel()
    components = {label: n for label, n in components.items() if n}
    total = sum(p.numel() for p in model.parameters())
    return Accounting(arch, components, total, variant_cost(model.speaker_bias, args.speaker_bias), tgt_vocab)


def compare_variants(tgt_vocab: int, num_speakers: int, arch: str = "lstm_base",
                     model_args: Sequence[str] = ()) -> List[VariantCost]:
    """Every registered variant at the same S and V, with the options of ``model_args``.

    Combinators of other variants (``sum``) are left out: they cost the sum of their parts.
    A variant that needs a file to be built (``topic``) is built from its small example
    (``example_options``) and marked so.
    """
    args = options.parse_args_and_arch(options.get_training_parser(), [
        "data-bin", "--task", "speaker_translation", "--arch", arch, *model_args])
    speakers = SpeakerDictionary([str(i) for i in range(num_speakers)])
    target = sized_dictionary(tgt_vocab)
    costs = []
    with tempfile.TemporaryDirectory() as workdir:
        source = sized_dictionary(16)
        for name, cls in sorted(SPEAKER_BIAS_REGISTRY.items()):
            example = cls.example_options(workdir, source)
            cfg = argparse.Namespace(**{**vars(args), **example})
            with torch.device("meta"):
                bias = build_speaker_bias(name, cfg, speakers, target, None)
            if len(list(bias.named_variants())) > 1:
                continue
            costs.append(variant_cost(bias, f"{name} (example)" if example else name))
    return costs


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


def _row(label: str, n: int, of: Optional[int] = None) -> str:
    share = f"{100 * n / of:8.3f}%" if of else ""
    return f"  {label:<40}{n:>16,}  {share}".rstrip()


def format_report(acc: Accounting, variants: List[VariantCost]) -> str:
    cost = acc.speaker_bias
    lines = [f"{acc.arch} (speaker bias {cost.name!r}): {acc.total:,} parameters "
             f"({acc.total * BYTES_PER_PARAMETER / 2**20:,.1f} MiB in float32)"]
    lines += [_row(name, n, acc.total) for name, n in acc.components.items()]
    lines += [
        "",
        _row("speaker-agnostic part (base model)", acc.base),
        _row(f"speaker side ({cost.num_speakers:,} speakers)", acc.speaker, acc.total),
        _row("  of which shared by all speakers", cost.shared),
        "",
        f"one more speaker, for V = {acc.vocab_size:,} target words: {cost.per_speaker:,} parameters = "
        f"{cost.per_speaker * BYTES_PER_PARAMETER:,} bytes ({100 * cost.per_speaker / acc.base:.5f}% of the base model)",
        "",
        f"every variant for {cost.num_speakers:,} speakers and V = {acc.vocab_size:,}, with the options given "
        f"(a+b costs the sum of its parts; '(example)': built from a small example file):",
        f"  {'variant':<28}{'per speaker':>14}{'shared':>14}{'all speakers':>16}{'vs the largest':>16}",
    ]
    largest = max(v.total for v in variants) or 1
    for v in variants:
        lines.append(f"  {v.name:<28}{v.per_speaker:>14,}{v.shared:>14,}{v.total:>16,}"
                     f"{100 * (v.total - largest) / largest:>15.2f}%")
    return "\n".join(lines)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="Any other flag is a model flag of fairseq-train (--encoder-layers 3, "
                                            "--speaker-bias simplex, --speaker-rank 4, ...).")
    parser.add_argument("--data", help="a data directory binarized by fairseq-preprocess, with speaker files")
    parser.add_argument("--source-lang")
    parser.add_argument("--target-lang")
    parser.add_argument("--speaker-suffix", default="spk")
    parser.add_argument("--src-vocab", type=int, help="source vocabulary size, without --data")
    parser.add_argument("--tgt-vocab", type=int, help="target vocabulary size, without --data")
    parser.add_argument("--speakers", type=int, help="number of speakers, without --data")
    parser.add_argument("--arch", default="lstm_fact_bias", choices=speaker_presets())
    parser.add_argument("--user-dir", help="a package registering more speaker bias variants (fairseq's --user-dir)")
    args, model_args = parser.parse_known_args(argv)
    if args.user_dir:
        from fairseq import utils

        utils.import_user_module(args)

    if args.data:
        src, tgt, speakers = sizes_from_data(args.data, args.source_lang, args.target_lang, args.speaker_suffix)
    elif args.src_vocab and args.tgt_vocab and args.speakers:
        src, tgt, speakers = args.src_vocab, args.tgt_vocab, args.speakers
    else:
        parser.error("give --data, or --src-vocab, --tgt-vocab and --speakers")
    accounting = count_parameters(src, tgt, speakers, args.arch, model_args)
    print(format_report(accounting, compare_variants(tgt, speakers, args.arch, model_args)))


if __name__ == "__main__":
    main()
