"""The contract of a speaker bias variant.

A variant turns the speakers of a batch (and, if it wants, the source
sentences) into a bias over the target vocabulary that the decoder adds to its
logits: ``p_t = softmax(E_T o_t + b_T + bias)``. Shapes: B sentences, V target
words, S speakers.

A variant may also (or instead) act on the decoder's state, through a per-sentence
:class:`SpeakerState`: an offset ``[B, d_in]`` added to the decoder's input (the embedding of
the previous word) at every step, and per decoder layer a scale ``[B, d_l]`` on its hidden
units (LHUC: ``h' = h * scale``). Where that is, and its sizes, the family's decoder says
(:class:`StateSites`, from its ``speaker_state_sites()``); the model gives the sites to the
variant once, when it attaches it (:meth:`SpeakerBias.attach`), before any optimizer is built
and any checkpoint is loaded, so that the variant creates its matrices at the right sizes.

What a variant declares (class attributes):

- ``config_class``: its options, a dataclass deriving from :class:`SpeakerBiasConfig`
  (given to :func:`~fairseq_speaker.modules.speaker_bias.register_speaker_bias`).
  Every field becomes a command-line flag (``speaker_rank`` -> ``--speaker-rank``) and a
  key of the model's hydra config (``model.speaker_rank``) of every speaker model.
- ``speaker_parameter_names``: the parameters whose row i belongs to speaker i
  (dimension 0 has size S). Everything else the variant owns is shared by all
  speakers. Freezing, inspection, export/import, growth and sparse updates go by this.
- ``needs_speakers``: whether it needs speaker ids (False for variants that only read the source);
  ``reads_source``: whether its bias depends on the source sentence.
- ``acts_on_output`` / ``acts_on_state``: whether it gives a bias on the logits (:meth:`lookup`),
  a :class:`SpeakerState` (:meth:`state_lookup`), or both. Output only by default.
- ``speaker_vector_label``: what :meth:`own_speaker_vectors` holds, for the report.
- its parameter count, on a line ``Parameters: <formula>`` of the class docstring, in S, V, the
  ``symbol`` metadata of its options and the names :meth:`formula_symbols` gives (checked by the
  unit tests).

What a variant implements:

- :meth:`lookup` ``(speakers [B] in [0, S), encoder_out) -> [B, V] or None``: the bias of
  known speakers. ``encoder_out`` is the encoder's output dict, or None; it always has
  ``encoder_out["source_tokens"] == [src_tokens [B, src_len]]``. A variant that needs the
  source returns None without it; a variant that acts only on the state returns None.
- a state variant: :meth:`attach` ``(sites)`` (create the parameters whose sizes the decoder
  gives) and :meth:`state_of_rows` ``(rows) -> SpeakerState`` (the state of speakers given their
  rows of the speaker parameters, ``[B, ...]`` each; :meth:`state_lookup` reads the rows with
  :meth:`row_lookup`). The mean speaker's state is that of the mean rows (:meth:`mean_state`).
- optionally :meth:`build` (to read files or check dictionaries), :meth:`mean_bias` (closed
  form of the mean speaker), :meth:`mean_speaker_row` (the parameter row a new speaker starts
  from), :meth:`aux_losses` (its regularizers), :meth:`own_speaker_vectors` and
  :meth:`own_vocabulary_vectors` (what inspection shows), :meth:`example_options` (what a
  small working instance needs, for tests and accounting).

What the base class provides from that: :meth:`forward` and :meth:`speaker_state` (range checks,
unseen speakers: ``MEAN_SPEAKER`` gets the mean speaker's bias and state, ``NO_SPEAKER`` none: no
bias, offset 0, scale 1), the speaker /
shared partition of the parameters, :meth:`grow`, :meth:`export_speakers` /
:meth:`import_speakers`, and the default auxiliary loss (the L2 pull of ``--speaker-l2``).
Variants built of other variants (``sum``) hold them as submodules: the speaker parameters,
rows and vectors of every nested variant are found and named by their path.
``docs/bias_variants.md`` is the guide.
"""

import math
from dataclasses import dataclass, field, fields
from typing import ClassVar, Dict, Iterator, List, Optional, Sequence, Tuple, Type

import torch
import torch.nn.functional as F
from fairseq.dataclass import FairseqDataclass
from torch import Tensor, nn

from fairseq_speaker.data.speaker_dictionary import MEAN_SPEAKER, NO_SPEAKER
from fairseq_speaker.errors import UserError
from fairseq_speaker.fairseq_patches import version_counter
from fairseq_speaker.optim.speaker_rows import mark_row_sparse, parse_lr_scale

EncoderOut = Optional[Dict[str, List[Tensor]]]


@dataclass
class SpeakerBiasConfig(FairseqDataclass):
    """Options every variant has. A variant's own options subclass this."""

    speaker_l2: float = field(
        default=0.0,
        metadata={
            "help": "weight of the L2 pull on the speaker biases the batch used (the default auxiliary loss "
            "of a variant): adds speaker_l2 * mean over sentences of ||bias||^2 to the per-token "
            "(or per-sentence, with --sentence-avg) loss"
        },
    )


@dataclass
class RowSparseConfig(SpeakerBiasConfig):
    """Options of the variants whose speaker tables are updated row by row (``row_sparse_parameter_names``)."""

    speaker_dense_updates: bool = field(
        default=False,
        metadata={"help": "update every row of the speaker table (and its optimizer state) at every update, as a "
                  "dense parameter. By default only the rows of each batch's speakers are updated (with fairseq's "
                  "adam or sgd, as the authors' lookup parameters; a row seen at every update follows the dense "
                  "optimizer exactly)"},
    )
    speaker_lr_scale: Optional[str] = field(
        default=None,
        metadata={"help": "the speaker rows' learning rate, as a multiple of the shared one: 'auto' (the default for "
                  "a new run) divides it by the share of updates in which a speaker is in the batch, with Adam, so "
                  "that a speaker of a few sentences moves as far over training as a shared weight, and gives the "
                  "variant's own shared parameters (fact's shared bias vectors) the rows' mean rate; a number "
                  "multiplies the rows' rate (1: the shared rate, as before 0.5.0). A resumed run keeps the scale "
                  "it started with (its optimizer state records it; runs of 0.4.0 and earlier: 1) unless this is "
                  "given. "
                  "Applies to row-by-row and dense updates, --fp16/--bf16's fp32 copies included"},
    )


@dataclass(frozen=True)
class StateSites:
    """Where a speaker state acts in a decoder, and its sizes (what a family's decoder offers through
    ``speaker_state_sites()``).

    Args:
        input_dim: d_in, the size of the decoder's input the offset is added to (the target word embedding).
        layer_dims: d_l for each decoder layer whose hidden units are scaled (the LSTM's h_t: one layer;
            the Transformer's residual stream after each layer).
    """

    input_dim: int
    layer_dims: Tuple[int, ...]

    def __post_init__(self):
        object.__setattr__(self, "layer_dims", tuple(int(d) for d in self.layer_dims))

    @property
    def hidden_dim(self) -> int:
        """The sum of the layers' sizes: one speaker's LHUC amplitudes for every layer."""
        return sum(self.layer_dims)


@dataclass
class SpeakerState:
    """What a speaker does to the decoder's state, per sentence (``B`` rows; None: nothing there).

    Args:
        input_offset: ``[B, d_in]``, added to the decoder's input (the previous word's embedding) at every step.
        layer_scales: per decoder layer, ``[B, d_l]`` or None: its hidden units are multiplied by it at every step.
    """

    input_offset: Optional[Tensor] = None
    layer_scales: Optional[Tuple[Optional[Tensor], ...]] = None

    def layer_scale(self, layer: int) -> Optional[Tensor]:
        """The scale ``[B, d_l]`` of one layer, or None (a scale of 1)."""
        if self.layer_scales is None or layer >= len(self.layer_scales):
            return None
        return self.layer_scales[layer]

    def tensors(self) -> List[Tensor]:
        return [t for t in [self.input_offset, *(self.layer_scales or ())] if t is not None]

    def _map(self, fn) -> "SpeakerState":
        return SpeakerState(
            None if self.input_offset is None else fn(self.input_offset),
            None if self.layer_scales is None else tuple(None if s is None else fn(s) for s in self.layer_scales))

    def index_select(self, index: Tensor) -> "SpeakerState":
        """The rows ``index`` (the hypotheses of a beam: each keeps its sentence's state)."""
        return self._map(lambda t: t.index_select(0, index))

    def to(self, *args, **kwargs) -> "SpeakerState":
        return self._map(lambda t: t.to(*args, **kwargs))

    def where(self, mask: Tensor, other: Optional["SpeakerState"]) -> "SpeakerState":
        """Rows where ``mask`` ``[B]`` is True take ``other``'s state (one row, for all of them), or none
        (offset 0, scale 1) when ``other`` is None."""
        def pick(mine: Optional[Tensor], theirs: Optional[Tensor], neutral: float) -> Optional[Tensor]:
            if mine is None:
                return None  # the same sites for every row: a variant gives a site to all speakers or to none
            fill = theirs.to(mine).expand_as(mine) if theirs is not None else mine.new_full((), neutral)
            return torch.where(mask.unsqueeze(1), fill, mine)

        scales = None
        if self.layer_scales is not None:
            scales = tuple(pick(s, other.layer_scale(i) if other is not None else None, 1.0)
                           for i, s in enumerate(self.layer_scales))
        return SpeakerState(pick(self.input_offset, other.input_offset if other is not None else None, 0.0), scales)

    def deviation(self) -> Tensor:
        """``[B]``: how far each row is from no state, ``||offset||^2 + sum_l ||scale_l - 1||^2`` (the L2 pull)."""
        total = None
        for t, neutral in [(self.input_offset, 0.0), *((s, 1.0) for s in (self.layer_scales or ()))]:
            if t is not None:
                part = (t.float() - neutral).pow(2).sum(dim=1)
                total = part if total is None else total + part
        assert total is not None, "a speaker state holds an input offset or layer scales"
        return total

    @staticmethod
    def compose(a: Optional["SpeakerState"], b: Optional["SpeakerState"]) -> Optional["SpeakerState"]:
        """Two states acting together (None-safe): offsets add, scales multiply."""
        if a is None or b is None:
            return a if b is None else b

        def join(x: Optional[Tensor], y: Optional[Tensor], op) -> Optional[Tensor]:
            return x if y is None else y if x is None else op(x, y.to(x))

        scales = None
        if a.layer_scales is not None or b.layer_scales is not None:
            n = max(len(a.layer_scales or ()), len(b.layer_scales or ()))
            scales = tuple(join(a.layer_scale(i), b.layer_scale(i), torch.mul) for i in range(n))
        return SpeakerState(join(a.input_offset, b.input_offset, torch.add), scales)


def source_tokens(encoder_out: EncoderOut) -> Optional[Tensor]:
    """The source sentences ``[B, src_len]`` the speaker plumbing keeps in every encoder output."""
    if not encoder_out or not encoder_out.get("source_tokens"):
        return None
    return encoder_out["source_tokens"][0]


class SpeakerBias(nn.Module):
    """Base class of the speaker bias variants; see the module documentation for the contract.

    Args:
        cfg: the variant's options (an instance of ``config_class``).
        num_speakers: S, the size of the speaker dictionary (0 for a task without speakers).
        vocab_size: V, the size of the target dictionary.
    """

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
    def build(cls, cfg, speaker_dictionary, target_dictionary, source_dictionary=None) -> "SpeakerBias":
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

    def mean_rows(self, table: Tensor) -> Tensor:
        """The rows of a speaker table ``[S, ...]`` whose mean is the mean speaker's (see :attr:`mean_of`)."""
        return table if self.mean_of is None else table[: self.mean_of]

    def freeze_mean(self) -> None:
        """Keep the mean speaker as it is now (the mean of today's rows) when speakers are added: onboarding
        must not change what unseen speakers get. Nested variants too; a second call changes nothing."""
        for _, variant in self.named_variants():
            if variant.mean_of is None:
                variant.mean_of = variant.num_speakers

    def mean_bias(self) -> Optional[Tensor]:
        """The mean of every speaker's bias ``[V]`` (without source), for speakers never seen (None for a
        variant without a bias); over the speakers of :attr:`mean_of`."""
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

    def cached_mean_bias(self) -> Tensor:
        """:meth:`mean_bias`, computed again only when a parameter or buffer of the variant has changed
        (moved, replaced, or updated in place: their version counters say so). Where gradients flow to
        the parameters (training), it is computed every time, so that every speaker gets its share."""
        return self._cached("_mean_bias_cache", self.mean_bias)

    def _cached(self, key_name: str, compute):
        tensors = list(self.parameters()) + list(self.buffers())
        if torch.is_grad_enabled() and any(p.requires_grad for p in tensors):
            return compute()
        key = tuple((id(t), version_counter(t), t.data_ptr(), t.dtype, tuple(t.shape)) for t in tensors)
        cached = self.__dict__.get(key_name)
        if cached is None or cached[0] != key:
            value = compute()
            cached = (key, value.detach() if isinstance(value, Tensor) else
                      value._map(Tensor.detach) if isinstance(value, SpeakerState) else value)
            self.__dict__[key_name] = cached
        return cached[1]

    def forward(self, speakers: Optional[Tensor], encoder_out: EncoderOut = None) -> Optional[Tensor]:
        """The bias ``[B, V]`` for speaker ids ``[B]``: ids ``>= 0`` are rows of the speaker dictionary,
        ``MEAN_SPEAKER`` (-1) gets the mean speaker's bias, ``NO_SPEAKER`` (-2) none. None: no bias."""
        if speakers is None:
            if self.needs_speakers:
                raise ValueError(f"the {self.name!r} speaker bias needs the speakers of the batch")
            return None
        self.check_speakers(speakers)
        if self.num_speakers == 0:  # nobody is known, so nobody has a bias (nor does the mean of nobody)
            if not self.acts_on_output:
                return None
            return torch.zeros(len(speakers), self.vocab_size, device=speakers.device, dtype=self._dtype())
        bias = self.lookup(speakers.clamp(min=0), encoder_out)
        if bias is None:
            return None
        mean, none = speakers == MEAN_SPEAKER, speakers == NO_SPEAKER
        if bool(mean.any()):  # the mean is a pass over every speaker: only when asked for
            bias = torch.where(mean.unsqueeze(1), self.cached_mean_bias().to(bias), bias)
        if bool(none.any()):
            bias = bias.masked_fill(none.unsqueeze(1), 0.0)
        return bias

    # -- the state -----------------------------------------------------------------------------
    def state_of_rows(self, rows: Dict[str, Tensor]) -> Optional[SpeakerState]:
        """The state of speakers whose rows of this variant's own speaker parameters are ``rows`` (name ->
        ``[B, ...]``); None for a variant that does not act on the state."""
        return None

    def state_lookup(self, speakers: Tensor, encoder_out: EncoderOut = None) -> Optional[SpeakerState]:
        """The state of known speakers (ids ``[B]`` in ``[0, S)``): :meth:`state_of_rows` of their rows (read
        with :meth:`row_lookup` where the variant updates rows row by row); None before the variant is attached
        to a decoder's sites."""
        if not self.acts_on_state or self.sites is None:
            return None
        rows = {name: (self.row_lookup(name, speakers) if name in self.row_sparse_parameter_names
                       else getattr(self, name).index_select(0, speakers))
                for name in self.speaker_parameter_names}
        return self.state_of_rows(rows)

    def mean_state(self) -> Optional[SpeakerState]:
        """The mean speaker's state: the state of the mean of the speakers' rows, the row a new speaker starts
        from (:meth:`mean_speaker_row`; a variant that overrides one overrides both). Where the state is not
        linear in the rows (LHUC's 2 sigmoid(a)), this is not the mean of the speakers' states."""
        if not self.acts_on_state or self.sites is None:
            return None
        return self.state_of_rows({name: self.mean_rows(getattr(self, name)).mean(dim=0, keepdim=True)
                                   for name in self.speaker_parameter_names})

    def cached_mean_state(self) -> Optional[SpeakerState]:
        """:meth:`mean_state`, kept as :meth:`cached_mean_bias` keeps the mean bias."""
        return self._cached("_mean_state_cache", self.mean_state)

    def speaker_state(self, speakers: Optional[Tensor], encoder_out: EncoderOut = None) -> Optional[SpeakerState]:
        """The :class:`SpeakerState` of speaker ids ``[B]`` (None: no state): ids ``>= 0`` are rows of the
        speaker dictionary, ``MEAN_SPEAKER`` gets the mean speaker's state, ``NO_SPEAKER`` none (offset 0,
        scale 1)."""
        if not self.acts_on_state:
            return None
        if speakers is None:
            if self.needs_speakers:
                raise ValueError(f"the {self.name!r} speaker variant needs the speakers of the batch")
            return None
        self.check_speakers(speakers)
        if self.num_speakers == 0:  # nobody is known: no state (nor has the mean of nobody one)
            return None
        state = self.state_lookup(speakers.clamp(min=0), encoder_out)
        if state is None:
            return None
        mean, none = speakers == MEAN_SPEAKER, speakers == NO_SPEAKER
        if bool(mean.any()):
            state = state.where(mean, self.cached_mean_state())
        if bool(none.any()):
            state = state.where(none, None)
        return state

    def check_speakers(self, speakers: Tensor) -> None:
        if speakers.numel() == 0:
            return
        if int(speakers.max()) >= self.num_speakers:
            raise IndexError(
                f"speaker id {int(speakers.max())} is out of range for a model with {self.num_speakers} speakers"
            )
        if int(speakers.min()) < NO_SPEAKER:
            raise IndexError(f"speaker id {int(speakers.min())} is neither a speaker nor an unseen-speaker id")

    def bias_and_aux_losses(
        self, speakers: Optional[Tensor], encoder_out: EncoderOut = None
    ) -> Tuple[Optional[Tensor], Dict[str, Tensor]]:
        """:meth:`forward` and :meth:`aux_losses` together (combinators override this to reuse their parts')."""
        bias = self(speakers, encoder_out)
        return bias, self.aux_losses(speakers, bias, encoder_out)

    def outputs_and_aux_losses(
        self, speakers: Optional[Tensor], encoder_out: EncoderOut = None, with_aux: bool = True
    ) -> Tuple[Optional[Tensor], Optional[SpeakerState], Dict[str, Tensor]]:
        """The bias (:meth:`forward`), the state (:meth:`speaker_state`) and, ``with_aux``, the regularizers
        (:meth:`aux_losses`, and :meth:`state_aux_losses` where there is a state): what the decoder asks once
        per batch. Combinators override this to reuse their parts'."""
        if not with_aux:
            return self(speakers, encoder_out), self.speaker_state(speakers, encoder_out), {}
        bias, losses = self.bias_and_aux_losses(speakers, encoder_out)
        state = self.speaker_state(speakers, encoder_out)
        if state is not None:
            losses = dict(losses)
            for name, value in self.state_aux_losses(speakers, state).items():
                losses[name] = losses[name] + value if name in losses else value
        return bias, state, losses

    def state_aux_losses(self, speakers: Optional[Tensor], state: SpeakerState) -> Dict[str, Tensor]:
        """The regularizers of the state (as :meth:`aux_losses`' of the bias). The default is the L2 pull of
        ``--speaker-l2`` towards no state, ``speaker_l2 * mean (||offset||^2 + sum_l ||scale_l - 1||^2)``,
        logged as ``<variant>_l2`` (added to the bias's own pull for a variant with both)."""
        weight = getattr(self.cfg, "speaker_l2", 0.0)
        deviation = state.deviation()
        if not weight or deviation is None:
            return {}
        return {f"{self.name}_l2": weight * deviation.mean()}

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

    def row_lookup(self, name: str, speakers: Tensor) -> Tensor:
        """The rows ``speakers`` of the speaker parameter ``name`` (one of :attr:`row_sparse_parameter_names`):
        in training, once the optimizer has said it updates row by row, with a row-sparse gradient."""
        param = getattr(self, name)  # a plain tensor under torch.func.functional_call
        trained = (self.training and torch.is_grad_enabled() and isinstance(param, nn.Parameter)
                   and param.requires_grad)
        if trained:  # the optimizer's step finds the table (and updates it row by row, or densely, scaled), and the
            mark_row_sparse(param, self, self.own_shared_parameters())  # shared parameters that act with its rows
        if trained and self._sparse_updates() and self.row_sparse:
            return F.embedding(speakers, param, sparse=True)
        return param.index_select(0, speakers)

    def row_sparse_ready(self, ready: bool) -> None:
        """Called by the optimizer step: whether the row-sparse parameters are updated row by row."""
        self.row_sparse = ready

    def _sparse_updates(self) -> bool:
        return not getattr(self.cfg, "speaker_dense_updates", False)

    # -- the speakers' parameters --------------------------------------------------------------
    def named_variants(self) -> Iterator[Tuple[str, "SpeakerBias"]]:
        """This variant (prefix "") and every variant nested in it, with their module paths."""
        for prefix, module in self.named_modules():
            if isinstance(module, SpeakerBias):
                yield prefix, module

    def speaker_parameters(self) -> Dict[str, nn.Parameter]:
        """Parameters whose row i belongs to speaker i (``[S, ...]``), by name relative to this module."""
        return {
            _join(prefix, name): variant.get_parameter(name)
            for prefix, variant in self.named_variants()
            for name in variant.speaker_parameter_names
        }

    def own_shared_parameters(self) -> List[nn.Parameter]:
        """This variant's own shared parameters (not its speaker parameters, not those of variants nested in it):
        what acts together with its speaker rows (``fact``'s shared bias vectors, ``proj``'s projection,
        ``hyper_lhuc``'s maps). Under ``--speaker-lr-scale auto`` they take their rows' mean rate
        (:func:`~fairseq_speaker.optim.speaker_rows.shared_scale`)."""
        owned = {id(self.get_parameter(name)) for name in self.speaker_parameter_names}
        found: List[nn.Parameter] = []
        modules: List[nn.Module] = [self]
        while modules:
            module = modules.pop()
            found.extend(p for p in module.parameters(recurse=False) if id(p) not in owned and p.requires_grad)
            modules.extend(child for child in module.children() if not isinstance(child, SpeakerBias))
        return found

    def shared_parameters(self) -> Dict[str, nn.Parameter]:
        """Every other parameter: shared by all speakers."""
        owned = self.speaker_parameters()
        return {name: p for name, p in self.named_parameters() if name not in owned}

    def speaker_row_shapes(self) -> Dict[str, Tuple[int, ...]]:
        """The shape of one speaker's row of each speaker parameter (what one speaker costs)."""
        return {name: tuple(p.shape[1:]) for name, p in self.speaker_parameters().items()}

    def parameters_per_speaker(self) -> int:
        return sum(int(torch.Size(shape).numel()) for shape in self.speaker_row_shapes().values())

    def mean_speaker_row(self, name: str) -> Tensor:
        """The row ``[1, ...]`` of this variant's own speaker parameter ``name`` that gives the mean
        speaker's bias. The mean of the rows does for variants linear in their speaker parameters."""
        param = self.mean_rows(self.get_parameter(name))
        if param.size(0) == 0:
            return param.new_zeros(1, *param.shape[1:])
        return param.detach().mean(dim=0, keepdim=True)

    def new_speaker_rows(self, n: int, init: str = "mean") -> Dict[str, Tensor]:
        """Rows ``[n, ...]`` for n new speakers: the mean speaker's (``init="mean"``) or zeros."""
        if init not in ("mean", "zero"):
            raise ValueError(f"init must be 'mean' or 'zero', got {init!r}")
        rows = {}
        for prefix, variant in self.named_variants():
            for name in variant.speaker_parameter_names:
                param = variant.get_parameter(name)
                row = variant.mean_speaker_row(name) if init == "mean" else param.new_zeros(1, *param.shape[1:])
                rows[_join(prefix, name)] = row.detach().to(param).expand(n, *param.shape[1:]).clone()
        return rows

    def grow(self, n: int, init: str = "mean", names: Optional[Sequence[str]] = None) -> None:
        """Add n speakers at the end of the table (ids S .. S+n-1), starting as the mean speaker or at zero.

        ``names``: the new speakers' labels, required when the table's rows are named
        (:attr:`speaker_names`). Parameters are replaced by larger ones: build optimizers after
        growing (or let :func:`~fairseq_speaker.modules.speaker_plumbing.pad_grown_optimizer_state`
        extend a loaded optimizer state).
        """
        if n < 0:
            raise ValueError(f"cannot grow by {n} speakers")
        new_names = list(names) if names is not None else []
        if self.speaker_names is not None:
            if len(new_names) != n:
                raise ValueError(f"growing by {n} speakers needs their {n} names, got {len(new_names)}")
            clash = sorted(set(new_names) & set(self.speaker_names)) or sorted(
                {x for x in new_names if new_names.count(x) > 1})
            if clash:
                raise ValueError(f"speaker(s) {', '.join(map(repr, clash[:5]))} already in the table")
        rows = self.new_speaker_rows(n, init)
        for name, param in self.speaker_parameters().items():
            self._replace_parameter(name, torch.cat([param.detach(), rows[name]]), param.requires_grad)
        for _, variant in self.named_variants():
            variant.num_speakers += n
        if self.speaker_names is not None:
            self.speaker_names = self.speaker_names + new_names

    def resize_table(self, n: int) -> None:
        """Make room for exactly n speakers with uninitialised rows, so that a state dict of a table of n
        speakers can be loaded (the rows are then the loaded ones)."""
        for name, param in self.speaker_parameters().items():
            self._replace_parameter(name, param.new_empty(n, *param.shape[1:]), param.requires_grad)
        for _, variant in self.named_variants():
            variant.num_speakers = n
        self.speaker_names = None

    def _replace_parameter(self, name: str, value: Tensor, requires_grad: bool) -> None:
        path, _, leaf = name.rpartition(".")
        owner = self.get_submodule(path) if path else self
        setattr(owner, leaf, nn.Parameter(value, requires_grad=requires_grad))

    # the speakers' names travel with the parameters (``<prefix>._extra_state`` in a state dict)
    def extra_state_keys(self) -> List[str]:
        """The state-dict keys, relative to this module, of the speaker names of this variant and of every
        variant nested in it (checkpoints older than 0.3.0 lack them)."""
        return [_join(prefix, "_extra_state") for prefix, _ in self.named_variants()]

    def get_extra_state(self) -> Dict[str, object]:
        state: Dict[str, object] = {"speakers": list(self.speaker_names)} if self.speaker_names is not None else {}
        if self.mean_of is not None:
            state["mean_of"] = int(self.mean_of)
        if self.sites is not None and self.acts_on_state:  # so that the variant loads alone (inspection)
            state["sites"] = {"input_dim": self.sites.input_dim, "layer_dims": list(self.sites.layer_dims)}
        return state

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # a variant built alone (inspection, the report) takes the decoder's sites its parameters were made for
        # from the checkpoint: attached first, it has their shapes
        extra = state_dict.get(prefix + "_extra_state")
        sites = extra.get("sites") if isinstance(extra, dict) else None
        if sites is not None and self.sites is None:
            self.attach(StateSites(int(sites["input_dim"]), tuple(sites["layer_dims"])))
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def set_extra_state(self, state) -> None:
        names = (state or {}).get("speakers")
        if names is not None:
            if len(names) != self.num_speakers:
                raise ValueError(f"the saved speaker bias names {len(names)} speakers for a table of "
                                 f"{self.num_speakers}")
            self.speaker_names = list(names)
        mean_of = (state or {}).get("mean_of")
        if mean_of is not None:
            self.mean_of = int(mean_of)

    def export_speakers(self, ids: Sequence[int]) -> Dict[str, Tensor]:
        """The rows of the given speakers: name -> ``[len(ids), ...]`` (copies)."""
        index = torch.as_tensor(list(ids), dtype=torch.long)
        self.check_speakers(index)
        if bool((index < 0).any()):
            raise IndexError("only known speakers (ids >= 0) have parameters to export")
        return {name: p.detach().index_select(0, index.to(p.device)).clone()
                for name, p in self.speaker_parameters().items()}

    def import_speakers(self, ids: Sequence[int], rows: Dict[str, Tensor]) -> None:
        """Overwrite the given speakers' rows with ``rows`` (as :meth:`export_speakers` gives them)."""
        index = torch.as_tensor(list(ids), dtype=torch.long)
        self.check_speakers(index)
        params = self.speaker_parameters()
        if set(rows) != set(params):
            raise ValueError(f"speaker parameters {sorted(rows)} do not match this variant's {sorted(params)}")
        for name, param in params.items():
            expected = (len(index), *param.shape[1:])
            if tuple(rows[name].shape) != expected:
                raise ValueError(f"{name}: rows of shape {tuple(rows[name].shape)}, expected {expected}")
        with torch.no_grad():
            for name, param in params.items():
                param.index_copy_(0, index.to(param.device), rows[name].to(param))

    # -- inspection ----------------------------------------------------------------------------
    def speaker_vectors(self) -> Optional[Tensor]:
        """What speakers are compared by ``[S, d]`` (nearest speakers, projections): the
        :meth:`own_speaker_vectors` of this variant and the variants nested in it, side by side;
        None without speaker parameters."""
        parts = [v for _, variant in self.named_variants() for v in [variant.own_speaker_vectors()] if v is not None]
        return torch.cat(parts, dim=1) if parts else None

    def own_speaker_vectors(self) -> Optional[Tensor]:
        """This variant's own part of :meth:`speaker_vectors`; default: its speaker rows, flattened."""
        params = [self.get_parameter(name) for name in self.speaker_parameter_names]
        if not params:
            return None
        return torch.cat([p.detach().float().reshape(p.size(0), -1) for p in params], dim=1)

    def vocabulary_vectors(self) -> Dict[str, Tensor]:
        """Shared vectors over the target vocabulary worth reading word by word: label -> ``[V, k]``
        (fact's shared bias vectors, topic's topic-word weights, ...). Nested variants' are included."""
        vectors = {}
        for prefix, variant in self.named_variants():
            for label, value in variant.own_vocabulary_vectors().items():
                vectors[f"{prefix.split('.')[-1]}: {label}" if prefix else label] = value
        return vectors

    def own_vocabulary_vectors(self) -> Dict[str, Tensor]:
        """This variant's own shared vocabulary vectors (see :meth:`vocabulary_vectors`)."""
        return {}

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


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name
