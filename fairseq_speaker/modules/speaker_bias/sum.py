from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from torch import Tensor, nn

from fairseq_speaker.errors import UserError

from .base import EncoderOut, SpeakerBias, SpeakerBiasConfig, SpeakerState, StateSites
from .registry import SPEAKER_BIAS_REGISTRY, parse_variant_name, register_speaker_bias


@dataclass
class SumSpeakerBiasConfig(SpeakerBiasConfig):
    sum_parts: str = field(
        default="fact+full",
        metadata={"help": "sum: the variants to add, joined by '+' (--speaker-bias fact+topic is short for "
                  "--speaker-bias sum --sum-parts fact+topic)"},
    )


def _added(tensors: List[Tensor]) -> Tensor:
    """``sum(tensors)``, typed: 0 plus the first, then each other added (a new tensor, never the first itself)."""
    total = 0 + tensors[0]
    for tensor in tensors[1:]:
        total = total + tensor
    return total


@register_speaker_bias("sum", dataclass=SumSpeakerBiasConfig)
class SumSpeakerBias(SpeakerBias):
    """A combinator: the bias of two (or more) registered variants added, e.g. ``fact+topic``.

    Parameters: the sum of its parts'

    Parts that act on the decoder's state compose too (``fact+hyper_lhuc``): their input offsets
    add and their layer scales multiply (:meth:`SpeakerState.compose`); each part is attached to
    the decoder's sites.

    Each part reads its own options (``--speaker-rank`` for fact, ``--topic-model`` for
    topic) and keeps its parameters under ``parts.<name>.`` (``decoder.speaker_bias.parts.fact.
    speaker_weights``); its speaker parameters, regularizers (logged under the part's
    name) and inspection vectors are the parts' own. An unseen speaker gets each part's
    answer for unseen speakers.
    """

    def __init__(self, cfg: SumSpeakerBiasConfig, num_speakers: int, vocab_size: int,
                 parts: Dict[str, SpeakerBias]):
        super().__init__(cfg, num_speakers, vocab_size)
        if len(parts) < 2:
            raise UserError("sum needs at least two variants, e.g. --speaker-bias fact+topic")
        self.parts = nn.ModuleDict(parts)

    def _variants(self) -> List[SpeakerBias]:
        """The parts, in order (the ``nn.ModuleDict`` that holds them types them as modules)."""
        return [part for part in self.parts.values() if isinstance(part, SpeakerBias)]

    @property
    def needs_speakers(self) -> bool:  # type: ignore[override]
        return any(part.needs_speakers for part in self._variants())

    @property
    def reads_source(self) -> bool:  # type: ignore[override]
        return any(part.reads_source for part in self._variants())

    @property
    def acts_on_output(self) -> bool:  # type: ignore[override]
        return any(part.acts_on_output for part in self._variants())

    @property
    def acts_on_state(self) -> bool:  # type: ignore[override]
        return any(part.acts_on_state for part in self._variants())

    def attach(self, sites: StateSites) -> None:
        super().attach(sites)
        for part in self._variants():
            part.attach(sites)

    def formula_symbols(self) -> Dict[str, int]:
        return {k: v for part in self._variants() for k, v in part.formula_symbols().items()}

    @classmethod
    def build(cls, cfg, speaker_dictionary, target_dictionary, source_dictionary=None) -> "SumSpeakerBias":
        return cls.build_parts(parse_variant_name(cls.options(cfg).sum_parts, "--sum-parts"), cfg, speaker_dictionary,
                               target_dictionary, source_dictionary)

    @classmethod
    def build_parts(cls, names: List[str], cfg, speaker_dictionary, target_dictionary,
                    source_dictionary=None) -> "SumSpeakerBias":
        if "sum" in names:
            raise UserError("sum cannot contain sum: list the variants to add, e.g. --speaker-bias fact+full+topic")
        parts = {name: SPEAKER_BIAS_REGISTRY[name].build(cfg, speaker_dictionary, target_dictionary,
                                                         source_dictionary) for name in names}
        options = cls.options(cfg)
        options.sum_parts = "+".join(names)
        num_speakers = len(speaker_dictionary) if speaker_dictionary is not None else 0
        return cls(options, num_speakers, len(target_dictionary), parts)

    def forward(self, speakers: Optional[Tensor], encoder_out: EncoderOut = None) -> Optional[Tensor]:
        return self.bias_and_aux_losses(speakers, encoder_out, with_aux=False)[0]

    def bias_and_aux_losses(self, speakers: Optional[Tensor], encoder_out: EncoderOut = None,
                            with_aux: bool = True) -> Tuple[Optional[Tensor], Dict[str, Tensor]]:
        total: Optional[Tensor] = None
        losses: Dict[str, Tensor] = {}
        for part in self._variants():
            if with_aux:
                bias, part_losses = part.bias_and_aux_losses(speakers, encoder_out)
                losses.update(part_losses)
            else:
                bias = part(speakers, encoder_out)
            if bias is not None:
                total = bias if total is None else total + bias
        return total, losses

    def outputs_and_aux_losses(self, speakers: Optional[Tensor], encoder_out: EncoderOut = None,
                               with_aux: bool = True
                               ) -> Tuple[Optional[Tensor], Optional[SpeakerState], Dict[str, Tensor]]:
        total: Optional[Tensor] = None
        state: Optional[SpeakerState] = None
        losses: Dict[str, Tensor] = {}
        for part in self._variants():
            bias, part_state, part_losses = part.outputs_and_aux_losses(speakers, encoder_out, with_aux)
            losses.update(part_losses)
            if bias is not None:
                total = bias if total is None else total + bias
            state = SpeakerState.compose(state, part_state)
        return total, state, losses

    def speaker_state(self, speakers: Optional[Tensor], encoder_out: EncoderOut = None) -> Optional[SpeakerState]:
        state: Optional[SpeakerState] = None
        for part in self._variants():
            state = SpeakerState.compose(state, part.speaker_state(speakers, encoder_out))
        return state

    def lookup(self, speakers: Tensor, encoder_out: EncoderOut = None) -> Optional[Tensor]:
        return self(speakers, encoder_out)

    def lookup_words(self, speakers: Tensor, words: Tensor) -> Optional[Tensor]:
        parts = [bias for bias in (part.lookup_words(speakers, words) for part in self._variants()) if bias is not None]
        return _added(parts) if parts else None

    def mean_bias(self) -> Optional[Tensor]:
        means = [mean for mean in (part.mean_bias() for part in self._variants()) if mean is not None]
        return _added(means) if means else None

    def mean_state(self) -> Optional[SpeakerState]:
        state: Optional[SpeakerState] = None
        for part in self._variants():
            state = SpeakerState.compose(state, part.mean_state())
        return state
