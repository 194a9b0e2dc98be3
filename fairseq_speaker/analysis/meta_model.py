"""Speaker models built on PyTorch's ``meta`` device, for counting what they cost without allocating them.

A model is built as fairseq-train builds it (:func:`model_options`: fairseq's own parser, the preset's defaults and
any model flag), with dictionaries that only have a size (:class:`CountingDictionary`: a vocabulary of 40 million
words costs nothing to spell out) and at most two speakers, whose tables are then resized on the meta device
(:func:`resize_speakers`): a hundred million speakers are arithmetic, not labels. Options a variant needs and the
command line does not give (topic's ``--topic-model``) come from the variants' small examples
(:func:`with_examples`). Used by the parameter accounting (:mod:`fairseq_speaker.analysis.parameter_counts`) and the
training benchmark.
"""

import argparse
import tempfile
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Dict, Optional, Sequence, Tuple, Union

import torch
from fairseq import options
from fairseq.data import Dictionary
from fairseq.models import ARCH_MODEL_REGISTRY

from fairseq_speaker.data import SpeakerDictionary
from fairseq_speaker.errors import UserError
from fairseq_speaker.modules.speaker_bias import SPEAKER_BIAS_REGISTRY, parse_variant_name

if TYPE_CHECKING:
    from fairseq.models import BaseFairseqModel


def sized_dictionary(size: int) -> Dictionary:
    """A dictionary of ``size`` entries, fairseq's 4 special symbols included."""
    d = Dictionary()
    for i in range(size - len(d)):
        d.add_symbol(f"w{i}")
    return d


class CountingDictionary(Dictionary):
    """``size`` entries to what counts them (``len``), fairseq's special symbols alone held: a model built with it on
    the meta device has the shapes it has with a real dictionary of that size, without a string a word (a vocabulary
    of 40 million words took a minute and gigabytes of memory to spell out before anything was counted)."""

    def __init__(self, size: int):
        super().__init__()
        self._size = max(int(size), len(self.symbols))

    def __len__(self) -> int:
        return self._size


def dictionary_of(vocab: Union[int, Dictionary]) -> Dictionary:
    """``vocab`` itself if it is a dictionary, else a :class:`CountingDictionary` of that size."""
    return vocab if isinstance(vocab, Dictionary) else CountingDictionary(vocab)


def model_options(arch: str, model_args: Sequence[str] = ()) -> argparse.Namespace:
    """The options fairseq-train would build ``arch`` with, given the model flags ``model_args``; a flag that is no
    option of fairseq-train with ``arch`` is refused naming it (fairseq's parser printed fairseq-train's whole usage,
    with a ``data`` argument no command here has)."""
    args, unknown = options.parse_args_and_arch(options.get_training_parser(), [
        "data-bin", "--task", "speaker_translation", "--arch", arch, *model_args], parse_known=True)
    if unknown:
        raise UserError(f"{' '.join(unknown)}: no option of fairseq-train with --arch {arch} (fairseq-train --task "
                        f"speaker_translation --arch {arch} --help lists them)")
    return args


def with_examples(args: argparse.Namespace, arch: str, workdir: str, source_dictionary: Dictionary,
                  variants: Optional[Sequence[str]] = None) -> Tuple[argparse.Namespace, Dict[str, object]]:
    """``args`` with the example options of every registered variant (or of ``variants``) (``example_options``,
    which may write a small file in ``workdir``, sized by ``source_dictionary``) for those the command line left at
    their defaults; and what was filled in. The command line's options win, so that e.g. a real ``--topic-model`` is
    counted."""
    defaults = vars(model_options(arch))
    given = {k for k, v in vars(args).items() if k not in defaults or defaults[k] != v}
    filled: Dict[str, object] = {}
    for name, cls in SPEAKER_BIAS_REGISTRY.items():
        if variants is not None and name not in variants:
            continue
        filled.update({k: v for k, v in cls.example_options(workdir, source_dictionary).items() if k not in given})
    return argparse.Namespace(**{**vars(args), **filled}), filled


@dataclass
class MetaModel:
    """A model built on the meta device, with the options it was built with."""

    model: "BaseFairseqModel"
    args: argparse.Namespace  # fairseq-train's options
    filled: Dict[str, object]  # options taken from the variants' examples
    vocab_size: int


def build_meta_model(src_vocab: Union[int, Dictionary], tgt_vocab: Union[int, Dictionary], num_speakers: int,
                     arch: str = "lstm_fact_bias", model_args: Sequence[str] = ()) -> MetaModel:
    """``arch`` as fairseq-train builds it with the flags ``model_args``, on the meta device (nothing allocated).

    ``src_vocab`` / ``tgt_vocab``: vocabulary sizes (fairseq's 4 special symbols included) or the
    dictionaries themselves. ``model_args`` are fairseq-train flags (``--speaker-rank 4``,
    ``--encoder-layers 3``, ``--speaker-bias simplex``, ``--optimizer sgd``); the rest keep the preset's defaults.
    """
    task = SimpleNamespace(
        source_dictionary=dictionary_of(src_vocab),
        target_dictionary=dictionary_of(tgt_vocab),
        speaker_dictionary=few_speakers(num_speakers),
    )
    with tempfile.TemporaryDirectory() as workdir:  # files of the examples are read while the model is built
        args = model_options(arch, model_args)
        # the examples of the variants built alone: another's may be sized by the source vocabulary (topic's model
        # of the source words, three floats a word), which a model without it does not count
        named = parse_variant_name(args.speaker_bias) if getattr(args, "speaker_bias", None) else []
        args, filled = with_examples(args, arch, workdir, task.source_dictionary, variants=named)
        try:
            with torch.device("meta"):
                model = ARCH_MODEL_REGISTRY[arch].build_model(args, task)
                resize_speakers(model.decoder.speaker_bias, num_speakers)
        except AssertionError as e:  # fairseq's checks of sizes (those below 1 are refused by the build itself)
            raise UserError(f"--arch {arch}: the model cannot be built with these sizes ({e}): give sizes that fit "
                            f"each other (a Transformer's embedding size a multiple of its attention heads)") from None
    return MetaModel(model, args, filled, len(task.target_dictionary))


#: a model for the accounting is built with at most this many speakers, then its tables are resized (on the
#: meta device, nothing allocated): the count of speakers is arithmetic, a hundred million labels are not
_BUILT_SPEAKERS = 2


def few_speakers(num_speakers: int) -> SpeakerDictionary:
    """The speaker dictionary a model is built with: ``num_speakers`` speakers, at most :data:`_BUILT_SPEAKERS`."""
    return SpeakerDictionary([str(i) for i in range(min(num_speakers, _BUILT_SPEAKERS))])


def resize_speakers(bias, num_speakers: int) -> None:
    """Resize the speaker tables of the variant ``bias`` (built with :func:`few_speakers`) to ``num_speakers``."""
    if num_speakers > bias.num_speakers:
        bias.resize_table(num_speakers)
