"""What a speaker bias variant declares and may implement, with the defaults it gets when it does not.

This is the part of :class:`~fairseq_speaker.modules.speaker_bias.base.SpeakerBias` a variant author reads: the class
attributes a variant sets, and every method it may override. What the base class derives from them (the forward
pass and unseen speakers, the speaker / shared split of the parameters, growth, the checkpoint state, export and
inspection) is in the modules beside this one, which a variant does not override.
"""

import math
from dataclasses import fields
from typing import ClassVar, Dict, Iterator, List, Optional, Tuple, Type, TypeVar

import torch
from torch import Tensor, nn

from fairseq_speaker.errors import UserError
from fairseq_speaker.optim.lr_scale import parse_lr_scale

from .options import SpeakerBiasConfig
from .state import SpeakerState, StateSites

EncoderOut = Optional[Dict[str, List[Tensor]]]
_Variant = TypeVar("_Variant", bound="VariantContract")


def source_tokens(encoder_out: EncoderOut) -> Optional[Tensor]:
    """The source sentences ``[B, src_len]`` the speaker plumbing keeps in every encoder output."""
    if not encoder_out or not encoder_out.get("source_tokens"):
        return None
    return encoder_out["source_tokens"][0]


def join_path(prefix: str, name: str) -> str:
    """The name of a nested variant's attribute ``name`` relative to the outer variant (``prefix``: the nested one's
    module path, "" for the outer one itself)."""
    return f"{prefix}.{name}" if prefix else name


class VariantContract(nn.Module):
    """What a variant declares and implements (see the module documentation; the class variants subclass, with its
    arguments, is :class:`~fairseq_speaker.modules.speaker_bias.base.SpeakerBias`)."""

    name: ClassVar[str] = "?"  # set by register_speaker_bias
    config_class: ClassVar[Type[SpeakerBiasConfig]] = SpeakerBiasConfig
    speaker_parameter_names: ClassVar[Tuple[str, ...]] = ()
    #: the speaker parameters read by :meth:`row_lookup`, whose optimizer updates only the rows of a batch's
    #: speakers (see :mod:`fairseq_speaker.optim.speaker_rows`)
    row_sparse_parameter_names: ClassVar[Tuple[str, ...]] = ()
    needs_speakers: ClassVar[bool] = True
    #: whether the bias depends on the source sentence (``encoder_out``)
    reads_source: ClassVar[bool] = False
    #: what :meth:`speaker_vectors` holds, for the inspection report ("mixture weights", ...)
    speaker_vector_label: ClassVar[str] = "speaker parameters"
    #: whether it gives a bias on the logits (:meth:`lookup`)
    acts_on_output: ClassVar[bool] = True
    #: whether it gives a :class:`SpeakerState` (:meth:`state_lookup`): then the model attaches it to a decoder
    #: that offers the sites (:meth:`attach`)
    acts_on_state: ClassVar[bool] = False

    def __init__(self, cfg: SpeakerBiasConfig, num_speakers: int, vocab_size: int):
        super().__init__()
        self.cfg = cfg
        self.num_speakers = num_speakers
        self.vocab_size = vocab_size
        #: the name of each row (the speaker dictionary's labels), saved with the parameters so that a
        #: checkpoint's rows are restored by name; set by the model that owns this bias, None if unknown
        self.speaker_names: Optional[List[str]] = None
        #: whether the optimizer updates the row-sparse parameters row by row (told at its first step)
        self.row_sparse = False
        #: the mean speaker (unseen speakers, a new speaker's start) is the mean of rows [0, mean_of): the
        #: speakers the model was trained with once others are onboarded (:meth:`freeze_mean`); None: all rows
        self.mean_of: Optional[int] = None
        #: the decoder's sites, once attached (:meth:`attach`)
        self.sites: Optional[StateSites] = None
        parse_lr_scale(getattr(cfg, "speaker_lr_scale", None))  # a bad value stops here, naming the option
        weight = getattr(cfg, "speaker_l2", 0.0)
        if weight is not None and not (math.isfinite(weight) and weight >= 0):  # a negative pull pushes apart
            raise UserError(f"--speaker-l2 must be a number >= 0, got {weight}")

    # -- building ----------------------------------------------------------------------------
    @classmethod
    def options(cls, model_cfg) -> SpeakerBiasConfig:
        """The variant's options read from a model config (argparse Namespace, omegaconf or dataclass);
        options the config lacks (an older checkpoint's) keep their defaults."""
        values = {}
        for f in fields(cls.config_class):
            if f.name.startswith("_"):
                continue
            try:
                value = getattr(model_cfg, f.name)
            except AttributeError:  # omegaconf in struct mode raises a subclass of it
                continue
            if value is not None or f.default is None:
                values[f.name] = value
        return cls.config_class(**values)

    @classmethod
    def build(cls: Type[_Variant], cfg, speaker_dictionary, target_dictionary, source_dictionary=None) -> _Variant:
        """Build from the model config and the task's dictionaries (``speaker_dictionary`` may be None)."""
        num_speakers = len(speaker_dictionary) if speaker_dictionary is not None else 0
        return cls(cls.options(cfg), num_speakers, len(target_dictionary))

    @classmethod
    def example_options(cls, workdir: str, source_dictionary) -> Dict[str, object]:
        """Options (beyond the defaults) that build a small working instance, for tests and parameter
        accounting; a variant that needs a file (a topic model) writes a small one in ``workdir``."""
        return {}

    def formula_symbols(self) -> Dict[str, int]:
        """Values of the symbols of the docstring's ``Parameters:`` formula that are neither S, V nor
        an option's ``symbol`` (e.g. a topic model's K; a state variant's D = d_in and H = sum of d_l)."""
        return {}

    def attach(self, sites: StateSites) -> None:
        """Told once, by the model that attaches this variant to its decoder, where a speaker state can act
        (before any optimizer is built and any checkpoint loaded). A state variant creates here the
        parameters whose sizes the decoder decides; the default keeps the sites and does nothing else."""
        if self.sites is not None and self.sites != sites:
            raise ValueError(f"the {self.name!r} speaker variant is attached to a decoder already ({self.sites}); "
                             f"it cannot move to another ({sites})")
        self.sites = sites

    # -- the bias ----------------------------------------------------------------------------
    def lookup(self, speakers: Tensor, encoder_out: EncoderOut = None) -> Optional[Tensor]:
        """The bias ``[B, V]`` of known speakers (ids ``[B]`` in ``[0, S)``), or None for no bias (the default of
        a variant that acts on the decoder's state only)."""
        if not self.acts_on_output:
            return None
        raise NotImplementedError

    def lookup_words(self, speakers: Tensor, words: Tensor) -> Optional[Tensor]:
        """The bias of known speakers (ids ``[B]``) at ``words`` (ids ``[W]``) only, ``[B, W]``: the columns of
        :meth:`lookup` (None for no bias), which a variant may compute without making its whole rows (onboarding
        scores every known speaker's bias at a new speaker's words)."""
        rows = self.lookup(speakers)
        return None if rows is None else rows.index_select(1, words)

    def mean_bias(self) -> Optional[Tensor]:
        """The mean of every speaker's bias ``[V]`` (without source), for speakers never seen (None for a
        variant without a bias); over the speakers of :attr:`mean_of`. The default is a pass over every speaker;
        a variant linear in its rows overrides it with the closed form."""
        total = None
        count = self.num_speakers if self.mean_of is None else self.mean_of
        ids = torch.arange(count, device=self._device())
        for chunk in ids.split(1024):
            part = self.lookup(chunk)
            if part is None:
                return None
            total = part.sum(0) if total is None else total + part.sum(0)
        assert total is not None, "the mean of no speakers"
        return total / max(count, 1)

    # -- the state -----------------------------------------------------------------------------
    def state_of_rows(self, rows: Dict[str, Tensor]) -> Optional[SpeakerState]:
        """The state of speakers whose rows of this variant's own speaker parameters are ``rows`` (name ->
        ``[B, ...]``); None for a variant that does not act on the state."""
        return None

    def mean_state(self) -> Optional[SpeakerState]:
        """The mean speaker's state: the state of the mean of the speakers' rows, the row a new speaker starts
        from (:meth:`mean_speaker_row`; a variant that overrides one overrides both). Where the state is not
        linear in the rows (LHUC's 2 sigmoid(a)), this is not the mean of the speakers' states."""
        if not self.acts_on_state or self.sites is None:
            return None
        return self.state_of_rows({name: self.mean_rows(getattr(self, name)).mean(dim=0, keepdim=True)
                                   for name in self.speaker_parameter_names})

    # -- the mean speaker: unseen speakers, and where a new one starts ---------------------------
    def mean_rows(self, table: Tensor) -> Tensor:
        """The rows of a speaker table ``[S, ...]`` whose mean is the mean speaker's (see :attr:`mean_of`)."""
        return table if self.mean_of is None else table[: self.mean_of]

    def mean_speaker_row(self, name: str) -> Tensor:
        """The row ``[1, ...]`` of this variant's own speaker parameter ``name`` that gives the mean
        speaker's bias. The mean of the rows does for variants linear in their speaker parameters."""
        param = self.mean_rows(self.get_parameter(name))
        if param.size(0) == 0:
            return param.new_zeros(1, *param.shape[1:])
        return param.detach().mean(dim=0, keepdim=True)

    # -- the regularizers ----------------------------------------------------------------------
    def aux_losses(self, speakers: Optional[Tensor], bias: Optional[Tensor],
                   encoder_out: EncoderOut = None) -> Dict[str, Tensor]:
        """The variant's regularizers for a batch: name -> scalar, a mean over the batch's sentences.

        The criterion adds ``sample_size * value`` to the loss (so a weight means the same
        whatever the batch size) and logs each under its name. The default is the L2 pull
        ``speaker_l2 * mean ||bias||^2``, logged as ``<variant>_l2``.
        """
        weight = getattr(self.cfg, "speaker_l2", 0.0)
        if bias is None or not weight:
            return {}
        return {f"{self.name}_l2": weight * bias.float().pow(2).sum(dim=1).mean()}

    def state_aux_losses(self, speakers: Optional[Tensor], state: SpeakerState) -> Dict[str, Tensor]:
        """The regularizers of the state (as :meth:`aux_losses`' of the bias). The default is the L2 pull of
        ``--speaker-l2`` towards no state, ``speaker_l2 * mean (||offset||^2 + sum_l ||scale_l - 1||^2)``,
        logged as ``<variant>_l2`` (added to the bias's own pull for a variant with both)."""
        weight = getattr(self.cfg, "speaker_l2", 0.0)
        deviation = state.deviation()
        if not weight or deviation is None:
            return {}
        return {f"{self.name}_l2": weight * deviation.mean()}

    # -- what inspection shows -----------------------------------------------------------------
    def own_speaker_vectors(self) -> Optional[Tensor]:
        """This variant's own part of :meth:`speaker_vectors`; default: its speaker rows, flattened."""
        params = [self.get_parameter(name) for name in self.speaker_parameter_names]
        if not params:
            return None
        return torch.cat([p.detach().float().reshape(p.size(0), -1) for p in params], dim=1)

    def own_vocabulary_vectors(self) -> Dict[str, Tensor]:
        """This variant's own shared vocabulary vectors (see :meth:`vocabulary_vectors`)."""
        return {}

    # -- what the parts beside this module use -------------------------------------------------
    def named_variants(self) -> Iterator[Tuple[str, "VariantContract"]]:
        """This variant (prefix "") and every variant nested in it, with their module paths."""
        for prefix, module in self.named_modules():
            if isinstance(module, VariantContract):
                yield prefix, module

    def _sparse_updates(self) -> bool:
        return not getattr(self.cfg, "speaker_dense_updates", False)

    def _dtype(self) -> torch.dtype:
        for p in self.parameters():
            return p.dtype
        return torch.get_default_dtype()

    def _device(self) -> torch.device:
        for p in self.parameters():
            return p.device
        for b in self.buffers():
            return b.device
        return torch.device("cpu")
