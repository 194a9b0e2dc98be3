"""Speakers through any fairseq encoder-decoder: the pieces a model mixes in to become speaker-aware.

The data path (B sentences, V target words)::

    net_input["speakers"] [B] --> SpeakerEncoderMixin.forward: kept in the encoder output as
        encoder_out["speakers"] = [speakers] and encoder_out["source_tokens"] = [src_tokens],
        reordered with the beam by reorder_encoder_out
    --> SpeakerDecoderMixin.forward: the variant's bias [B, V] and speaker state (an input offset
        and per-layer scales, see speaker_bias.SpeakerState), computed once per sentence; the bias
        is added to the logits of every step, the state is handed to the network for the duration
        of its forward (active_speaker_state), which applies it at every step. Teacher-forced, they
        are returned as extra["speaker_bias"] and extra["speaker_state"], with the variant's
        regularizers as extra["speaker_aux_losses"]. In generation they are made at the first step
        and cached in the incremental state (one row per sentence, the beam reorders an index into
        them); a decoder whose output layer is affine (output_weight_and_bias) makes each step's
        logits with the bias in one matrix product (on CPU: oneDNN's product, then the rows added in
        place), with no tensor of size V beyond the plain decoder's

A speaker-aware model is then a choice of pieces, as in ``models/speaker_lstm.py``::

    class MyEncoder(SpeakerEncoderMixin, SomeFairseqEncoder): pass
    class MyDecoder(SpeakerDecoderMixin, SomeFairseqIncrementalDecoder): pass

    @register_speaker_model("my_model", dataclass=MyConfig)   # MyConfig derives from SpeakerModelConfig
    class MyModel(SpeakerModelMixin, FairseqEncoderDecoderModel):
        @classmethod
        def build_model(cls, cfg, task):
            model = cls(MyEncoder(...), MyDecoder(...))
            return cls.with_speaker_bias(model, cfg, task)

The decoder's ``forward(prev_output_tokens, encoder_out, incremental_state, features_only=True)``
must return ``(features, extra dict)`` and its ``output_layer(features)`` the logits, as fairseq's
decoders do. A decoder that takes a speaker state says where (``speaker_state_sites()``, a
:class:`~fairseq_speaker.modules.speaker_bias.StateSites`) and applies ``active_speaker_state()``
in its forward: our LSTM in its recurrence, fairseq's Transformer through forward hooks
(:func:`hook_speaker_state`). Variants acting on the state are refused on a decoder that does not.
:func:`register_speaker_model` gives the model every registered variant's options
(as flags and hydra keys), also those of variants registered after it.
"""

import argparse
import contextlib
import dataclasses
import logging
import threading
import weakref
from dataclasses import dataclass, field
from typing import Dict, Iterator, List, Optional, Sequence, Tuple, Type

import torch
from fairseq.dataclass import FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model
from torch import Tensor, nn

from fairseq_speaker.checkpoints import SPEAKER_NAMES_KEY
from fairseq_speaker.errors import UserError
from fairseq_speaker.fairseq_patches import parser_option_names, set_model_options
from fairseq_speaker.modules import gemm, speaker_words
from fairseq_speaker.modules.speaker_bias import (
    SpeakerBias,
    SpeakerState,
    StateSites,
    build_speaker_bias,
    on_register,
    reserve_options,
    speaker_option_fields,
)
from fairseq_speaker.optim.speaker_rows import pad_grown_optimizer_state

logger = logging.getLogger(__name__)

EncoderOut = Dict[str, List[Tensor]]
IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]


@dataclass
class SpeakerModelConfig(FairseqDataclass):
    """The option every speaker model has; the variants' own options are added to it."""

    speaker_bias: str = field(
        default="none",
        metadata={"help": "speaker bias variant: a name registered in fairseq_speaker.modules.speaker_bias "
                  "(none, full, fact, proj, simplex, topic, ...), or several joined by '+' to add them "
                  "(fact+topic); the preset chooses one, this flag overrides it"},
    )


def encoder_speakers(encoder_out: Optional[EncoderOut]) -> Optional[Tensor]:
    """The speaker ids ``[B]`` kept in an encoder output, or None."""
    if not encoder_out or not encoder_out.get("speakers"):
        return None
    return encoder_out["speakers"][0]


# -- options: the model's own and every variant's ------------------------------------------------


def compose_options(base: Type[FairseqDataclass]) -> Type[FairseqDataclass]:
    """``base`` extended with the options of every registered variant (a new dataclass of the same name)."""
    own = {f.name for f in dataclasses.fields(base)}
    extra = []
    for f in speaker_option_fields():
        if f.name in own:
            continue
        if f.default_factory is not dataclasses.MISSING:
            copy = field(default_factory=f.default_factory, metadata=f.metadata)
        else:
            copy = field(default=f.default, metadata=f.metadata)
        extra.append((f.name, f.type, copy))
    composed = dataclasses.make_dataclass(base.__name__, extra, bases=(base,))
    composed.__module__, composed.__qualname__, composed.__doc__ = base.__module__, base.__qualname__, base.__doc__
    return composed


def fill_defaults(args, config_class: Type[FairseqDataclass]) -> None:
    """Give every option of ``config_class`` that ``args`` lacks (or holds as None) its default."""
    for f in dataclasses.fields(config_class):
        if f.name.startswith("_") or getattr(args, f.name, None) is not None:
            continue
        if f.default_factory is not dataclasses.MISSING:
            setattr(args, f.name, f.default_factory())
        elif f.default is not dataclasses.MISSING:
            setattr(args, f.name, f.default)


#: models registered with a dataclass: name -> (model class, its own options before the variants')
_DATACLASS_MODELS: Dict[str, Tuple[type, Type[FairseqDataclass]]] = {}


def _refresh_models() -> None:
    for name, (model_cls, base) in _DATACLASS_MODELS.items():
        set_model_options(name, model_cls, compose_options(base))


on_register(_refresh_models)


def register_speaker_model(name: str, dataclass: Optional[Type[FairseqDataclass]] = None):
    """fairseq's ``register_model`` for a speaker model.

    With ``dataclass`` (deriving from :class:`SpeakerModelConfig`), the model's options are
    that dataclass plus every registered variant's options, kept up to date as variants
    register. Without, the model uses argparse (``add_args``), as fairseq's transformer does,
    and :class:`SpeakerModelMixin` adds the speaker options to its parser.
    """

    def wrap(model_cls):
        if dataclass is not None:
            if not issubclass(dataclass, SpeakerModelConfig):
                raise ValueError(f"the options of speaker model {name!r} must derive from SpeakerModelConfig")
            reserve_options(f"model {name}", [f.name for f in dataclasses.fields(dataclass)
                                              if not f.name.startswith("_")])
            register_model(name, dataclass=compose_options(dataclass))(model_cls)
            _DATACLASS_MODELS[name] = (model_cls, dataclass)
        else:
            parser = argparse.ArgumentParser(add_help=False)
            super(SpeakerModelMixin, model_cls).add_args(parser)  # the network's own options
            reserve_options(f"model {name}", parser_option_names(parser))
            register_model(name)(model_cls)
        return model_cls

    return wrap


# -- the pieces ---------------------------------------------------------------------------------


class SpeakerEncoderMixin:
    """Put before a fairseq encoder class: its forward accepts ``speakers`` and keeps them (and the
    source tokens, for variants that read the source) in its output; reordering keeps them aligned."""

    def forward(self, src_tokens: Tensor, src_lengths: Optional[Tensor] = None,
                speakers: Optional[Tensor] = None, **kwargs) -> EncoderOut:
        encoder_out = super().forward(src_tokens, src_lengths=src_lengths, **kwargs)
        encoder_out["speakers"] = [] if speakers is None else [speakers]
        encoder_out["source_tokens"] = [src_tokens]
        return encoder_out

    def reorder_encoder_out(self, encoder_out: EncoderOut, new_order: Tensor) -> EncoderOut:
        reordered = super().reorder_encoder_out(encoder_out, new_order)
        for key in ("speakers", "source_tokens"):
            reordered[key] = [t.index_select(0, new_order) for t in encoder_out.get(key, [])]
        return reordered


class SpeakerDecoderMixin:
    """Put before a fairseq incremental decoder class: adds the speaker bias to its logits.

    The bias module is set by :meth:`SpeakerModelMixin.with_speaker_bias` and lives at
    ``decoder.speaker_bias`` (its parameters are ``decoder.speaker_bias.*`` in checkpoints).
    """

    speaker_bias: SpeakerBias

    def set_speaker_bias(self, speaker_bias: SpeakerBias) -> None:
        self.speaker_bias = speaker_bias
        if speaker_bias.acts_on_state:
            self.prepare_speaker_state()

    # -- the speaker state: where the family's decoder takes it ----------------------------------------
    def speaker_state_sites(self) -> Optional[StateSites]:
        """Where this decoder applies a speaker state, and its sizes; None: it does not (then only variants
        acting on the output can be attached). The decoder class the mixin is put before (or a subclass)
        says so by defining this method, and applies :meth:`active_speaker_state` in its forward."""
        base = getattr(super(), "speaker_state_sites", None)
        return base() if base is not None else None

    def prepare_speaker_state(self) -> None:
        """Called when a variant acting on the state is attached: a decoder that applies the state through
        hooks (:func:`hook_speaker_state`) installs them here. The default does nothing."""
        base = getattr(super(), "prepare_speaker_state", None)
        if base is not None:
            base()

    def active_speaker_state(self) -> Optional[SpeakerState]:
        """The speaker state of the hypotheses this decoder's forward is running for (``B`` rows, as its
        input), in this thread; None outside its forward or without a state."""
        return getattr(_ACTIVE_STATES, "states", {}).get(id(self))

    @contextlib.contextmanager
    def applying_speaker_state(self, state: Optional[SpeakerState]) -> Iterator[None]:
        """Make ``state`` the :meth:`active_speaker_state` of this decoder in this thread, for the block
        (None: leave it as it is)."""
        if state is None:
            yield
            return
        states = _ACTIVE_STATES.__dict__.setdefault("states", {})
        key, before = id(self), states.get(id(self))
        states[key] = state
        try:
            yield
        finally:
            if before is None:
                states.pop(key, None)
            else:
                states[key] = before

    def forward(self, prev_output_tokens: Tensor, encoder_out: Optional[EncoderOut] = None,
                incremental_state: Optional[IncrementalState] = None, features_only: bool = False, **kwargs):
        if incremental_state is not None:  # generation: the bias and state were made at the first step
            step = self._step_bias(encoder_out, incremental_state)
            with self.applying_speaker_state(self._hypothesis_state(step)):
                features, extra = super().forward(prev_output_tokens, encoder_out=encoder_out,
                                                  incremental_state=incremental_state, features_only=True, **kwargs)
            if features_only:
                return features, extra
            return self._step_logits(features, step), extra
        bias, state, aux_losses = self.sentence_effects(encoder_out, None)
        with self.applying_speaker_state(state):
            features, extra = super().forward(prev_output_tokens, encoder_out=encoder_out,
                                              incremental_state=incremental_state, features_only=True, **kwargs)
        extra["speaker_bias"] = bias  # B x V or None
        if state is not None:
            extra["speaker_state"] = state
        if aux_losses:
            extra["speaker_aux_losses"] = aux_losses
        if features_only:
            return features, extra
        logits = self.output_layer(features)  # B x T x V
        if bias is not None:
            logits += bias.unsqueeze(1).to(logits)  # in place: no second B x T x V tensor
        return logits, extra

    def output_weight_and_bias(self) -> Optional[Tuple[Tensor, Optional[Tensor]]]:
        """The output layer as ``(W [V, d], b [V] or None)`` when ``output_layer(x)`` is ``x W^T + b``,
        so that a generation step makes its logits with the speaker bias without a tensor of size V beyond
        the plain decoder's; None otherwise (the bias is then added). The decoder
        class the mixin is put before (or a subclass) says so by defining this method."""
        base = getattr(super(), "output_weight_and_bias", None)
        return base() if base is not None else None

    def sentence_effects(self, encoder_out: Optional[EncoderOut],
                         incremental_state: Optional[IncrementalState] = None
                         ) -> Tuple[Optional[Tensor], Optional[SpeakerState], Dict[str, Tensor]]:
        """The bias of each sentence ``[B, V]`` and its speaker state (None for none) and, teacher-forced,
        the variant's regularizers."""
        speakers = encoder_speakers(encoder_out)
        if speakers is None and self.speaker_bias.needs_speakers:
            raise ValueError(
                f"this model has a {self.speaker_bias.name!r} speaker bias and was called without speakers: "
                f"use --task speaker_translation (speakers from {{split}}.spk, --speaker-file, --speaker or "
                f"--speaker-per-line), or pass speakers= to the model"
            )
        if incremental_state is None:  # teacher forcing: training and validation also need the regularizers
            return self.speaker_bias.outputs_and_aux_losses(speakers, encoder_out)
        return self.speaker_bias(speakers, encoder_out), self.speaker_bias.speaker_state(speakers, encoder_out), {}

    def _step_bias(self, encoder_out: Optional[EncoderOut], incremental_state: IncrementalState
                   ) -> Dict[str, Optional[Tensor]]:
        """What each generation step adds: ``rows [B0, V]``, made once per sentence at the first step (the
        output layer's own bias included when :meth:`output_weight_and_bias` allows the fused step), the
        sentences' speaker ``state`` (``B0`` rows), and ``index [B]``, the row of each hypothesis. The beam
        reorders the index, never the rows. ``gathered`` is a ``[B0, V]`` buffer for the rows of a step's
        hypotheses, filled anew at every step where oneDNN makes the step's product (see
        :meth:`_step_logits`); ``hypothesis_state`` the state of the hypotheses, gathered again after a
        reordering."""
        cached = self.get_incremental_state(incremental_state, "speaker_bias")
        if cached is not None:
            return cached
        bias, state, _ = self.sentence_effects(encoder_out, incremental_state)
        rows = index = None
        if bias is not None:
            fused = self.output_weight_and_bias()
            if fused is not None:
                weight, out_bias = fused
                rows = bias.to(weight) if out_bias is None else bias.to(weight) + out_bias
            else:
                rows = bias
            index = torch.arange(rows.size(0), device=rows.device)
        if state is not None and index is None:
            first = state.tensors()[0]
            index = torch.arange(first.size(0), device=first.device)
        cached = {"rows": rows, "index": index, "gathered": None, "state": state, "hypothesis_state": state}
        self.set_incremental_state(incremental_state, "speaker_bias", cached)
        return cached

    @staticmethod
    def _hypothesis_state(step: Dict) -> Optional[SpeakerState]:
        """The speaker state of each hypothesis of a generation step: the sentences' state, through the index."""
        if step.get("state") is None:
            return None
        if step.get("hypothesis_state") is None:
            step["hypothesis_state"] = step["state"].index_select(step["index"])
        return step["hypothesis_state"]

    def _step_logits(self, features: Tensor, step: Dict[str, Optional[Tensor]]) -> Tensor:
        rows, index = step["rows"], step["index"]
        if rows is None:
            return self.output_layer(features)
        assert index is not None  # set with the rows
        fused = self.output_weight_and_bias()
        bsz, steps, dim = features.shape
        if fused is not None and steps == 1:
            weight = fused[0]
            flat = features.reshape(bsz, dim).to(rows)
            if gemm.serves(flat, weight, rows):
                # oneDNN's product is faster than the BLAS's addmm_ on the CPUs it serves, but has no in-place
                # form: x W^T makes the step's one B x V tensor, and the hypotheses' rows, gathered into a
                # buffer kept for the whole batch, are added to it
                logits = gemm.linear(flat, weight)
                gathered = step["gathered"]
                if gathered is None or gathered.size(0) < bsz:
                    gathered = step["gathered"] = rows.new_empty(max(bsz, rows.size(0)), rows.size(1))
                logits += torch.index_select(rows, 0, index, out=gathered[:bsz])
            else:  # the rows of the beam's sentences, then x W^T added in place: the one B x V tensor of the step
                logits = rows.index_select(0, index)
                logits.addmm_(flat, weight.t())
            return logits.unsqueeze(1)
        if fused is not None:  # several steps at once: the output layer's own bias is in the rows already
            weight = fused[0]
            logits = torch.matmul(features.to(weight), weight.t())
        else:
            logits = self.output_layer(features)
        logits += rows.index_select(0, index).unsqueeze(1).to(logits)
        return logits

    def reorder_incremental_state(self, incremental_state: IncrementalState, new_order: Tensor) -> None:
        super().reorder_incremental_state(incremental_state, new_order)
        cached = self.get_incremental_state(incremental_state, "speaker_bias")
        if cached is not None and cached["index"] is not None:
            self.set_incremental_state(incremental_state, "speaker_bias",
                                       dict(cached, index=cached["index"].index_select(0, new_order),
                                            hypothesis_state=None))


#: the speaker state of each decoder whose forward is running, by thread (see ``active_speaker_state``)
_ACTIVE_STATES = threading.local()


class _InputOffset:
    """A forward hook on a decoder's token embedding: adds the input offset of the active speaker state
    (``[B, d_in]``) to every position of the embedded batch (``[B, T, d_in]``), only while the decoder's
    own forward runs (the module may be the encoder's too: ``--share-all-embeddings``)."""

    def __init__(self, decoder):
        self.decoder = decoder  # a strong reference: a copy of the model (EMA) copies the hook with its decoder

    def __call__(self, module: nn.Module, inputs, output: Tensor) -> Optional[Tensor]:
        state = self.decoder.active_speaker_state()
        if state is None or state.input_offset is None:
            return None
        offset = state.input_offset.to(output)
        return output + offset.reshape(offset.size(0), *([1] * (output.dim() - 2)), offset.size(1))


class _LayerScale:
    """A forward hook on a decoder layer whose output is ``x`` ``[T, B, d_l]`` (time first, as fairseq's
    layers), or a tuple starting with it: multiplies ``x`` by the active speaker state's scale of the layer."""

    def __init__(self, decoder, layer: int):
        self.decoder, self.layer = decoder, layer

    def __call__(self, module: nn.Module, inputs, output):
        state = self.decoder.active_speaker_state()
        scale = state.layer_scale(self.layer) if state is not None else None
        if scale is None:
            return None
        x = output[0] if isinstance(output, tuple) else output
        x = x * scale.to(x).unsqueeze(0)
        return (x, *output[1:]) if isinstance(output, tuple) else x


def hook_speaker_state(decoder: "SpeakerDecoderMixin", embedding: nn.Module, layers: Sequence[nn.Module]) -> None:
    """Apply the speaker state in a decoder we do not own (fairseq's) through forward hooks: the input offset
    on ``embedding``'s output, layer ``l``'s scale on the output of ``layers[l]`` (time first). Once per decoder;
    the hooks do nothing outside the decoder's forward or without a state."""
    if decoder.__dict__.get("_speaker_state_hooked"):
        return
    embedding.register_forward_hook(_InputOffset(decoder))
    for i, layer in enumerate(layers):
        layer.register_forward_hook(_LayerScale(decoder, i))
    decoder.__dict__["_speaker_state_hooked"] = True


#: the options that size a network, by their start and their end: each must be a whole number of at least 1
SIZE_OPTIONS = (("encoder_", "decoder_", "attention_", "speaker_", "embed_"), ("_dim", "_size", "_layers", "_heads"))


def check_network_options(cfg) -> None:
    """Refuse, before a network is built, a dropout option (``--dropout``, ``--attention-dropout``, ...) outside
    [0, 1] and a size (``--encoder-embed-dim``, ``--decoder-layers``, ``--encoder-attention-heads``, ...) below 1:
    torch's refusals (a negative dimension, 0 ** -0.5 in an initialization, oneDNN's failed primitive) name no option,
    and fairseq's own dropout takes any probability."""
    options = vars(cfg) if not hasattr(cfg, "keys") else {key: cfg[key] for key in cfg.keys()}
    for name, value in sorted(options.items()):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if "dropout" in name and not 0 <= value <= 1:  # nan too
            raise UserError(f"--{name.replace('_', '-')} {value}: a dropout is a probability, from 0 to 1 "
                            f"(0.1 to 0.3 are usual)")
        if name.startswith(SIZE_OPTIONS[0]) and name.endswith(SIZE_OPTIONS[1]) and isinstance(value, int) and value < 1:
            raise UserError(f"--{name.replace('_', '-')} {value}: a size of the network must be at least 1")


class SpeakerModelMixin:
    """Put before a fairseq encoder-decoder model class whose encoder and decoder use the mixins above."""

    @property
    def speaker_bias(self) -> SpeakerBias:
        return self.decoder.speaker_bias

    @classmethod
    def add_args(cls, parser) -> None:
        super().add_args(parser)
        if getattr(cls, "__dataclass", None) is None:  # argparse models: add the speaker options here
            gen_parser_from_dataclass(parser, compose_options(SpeakerModelConfig)(), delete_default=True)

    @classmethod
    def speaker_options(cls) -> Type[FairseqDataclass]:
        """Every speaker option of this model (its dataclass, or the speaker options of an argparse model)."""
        return getattr(cls, "__dataclass", None) or compose_options(SpeakerModelConfig)

    @classmethod
    def with_speaker_bias(cls, model, cfg, task):
        """Give ``model``'s decoder the variant ``cfg.speaker_bias`` built for ``task``; returns the model."""
        name = getattr(cfg, "speaker_bias", None) or "none"
        speaker_dictionary = getattr(task, "speaker_dictionary", None)
        bias = build_speaker_bias(name, cfg, speaker_dictionary, task.target_dictionary,
                                  getattr(task, "source_dictionary", None))
        if bias.needs_speakers and speaker_dictionary is None:
            raise UserError(f"--speaker-bias {name} needs speakers: use --task speaker_translation")
        if speaker_dictionary is not None:
            bias.speaker_names = list(speaker_dictionary.names)
            # told when a checkpoint brings another speaker table (see load_state_dict); weak, so that
            # copies of the model (EMA) neither keep the task alive nor fail to copy
            model.speaker_task = weakref.ref(task) if hasattr(task, "adopt_speaker_names") else None
        sites = model.decoder.speaker_state_sites()
        if bias.acts_on_state and sites is None:
            raise UserError(
                f"--speaker-bias {name} acts on the decoder's state, and the decoder of {type(model).__name__} "
                f"({type(model.decoder).__name__}) does not say where a speaker state acts (speaker_state_sites): "
                f"use a variant on the logits (full, fact, ...) or a family whose decoder takes a state "
                f"(lstm, transformer)")
        if sites is not None:
            bias.attach(sites)  # before the optimizer and before a checkpoint's parameters are loaded
        model.decoder.set_speaker_bias(bias)
        return model

    def load_state_dict(self, state_dict, strict=True, model_cfg=None, args=None):
        """fairseq's ``load_state_dict``, with the speaker rows restored by name.

        A checkpoint names its speaker rows (``decoder.speaker_bias._extra_state``). When they are
        not the speakers this model was built with (``fairseq-train --restore-file`` or
        ``--finetune-from-model`` on data whose speaker list was reordered, shrunk or extended),
        the checkpoint's table is kept as it is, row for row, and the speakers it lacks are added
        after it as the mean speaker; the task is told, so that the data's labels map to those rows.
        Checkpoints older than 0.3.0 carry no names: their rows are taken by position, as written.
        """
        bias = self.speaker_bias
        state_dict = dict(state_dict)
        words = state_dict.pop(speaker_words.CHECKPOINT_KEY, None)
        if words is not None:  # the speakers' words (fairseq-speaker-words): checked before any parameter is loaded
            names = (state_dict.get(SPEAKER_NAMES_KEY) or {}).get("speakers")
            words = speaker_words.from_state(words, len(self.decoder.dictionary), "the checkpoint",
                                             speakers=len(names) if names is not None else bias.num_speakers)
        elif not strict:  # a partial load (fairseq's EMA copies parameters so) keeps the memory the model has
            words = speaker_words.speaker_words_of(self)
        speaker_words.attach(self, None)  # the state dict loaded below has no key of it
        result = self._load_speakers(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        speaker_words.attach(self, words)
        if words is not None:  # rows added after the checkpoint's (new speakers of the data) know no words yet
            known = words.num_speakers
            words.resize(bias.num_speakers)
            if bias.num_speakers > known:
                logger.info(f"{bias.num_speakers - known} speaker(s) added after the checkpoint's know no words: "
                            f"fairseq-speaker-words on the trained model gives them theirs")
        return result

    def _load_speakers(self, state_dict, strict=True, model_cfg=None, args=None):
        bias = self.speaker_bias
        for key in bias.extra_state_keys():  # older checkpoints: no names
            state_dict.setdefault("decoder.speaker_bias." + key, {})
        extra = state_dict.get(SPEAKER_NAMES_KEY) or {}
        saved = extra.get("speakers")
        task = self.speaker_task() if getattr(self, "speaker_task", None) is not None else None
        if task is not None and hasattr(task, "check_restored_dictionaries"):  # the checkpoint's words are the data's
            task.check_restored_dictionaries(extra.get("as_read"), self)
        current = bias.speaker_names
        if saved is None or current is None or list(saved) == current:
            return self._load_fitting(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        saved = list(saved)
        known = set(saved)
        new = [name for name in current if name not in known]
        if task is not None:
            task.check_speaker_table_change(saved, current)
        bias.resize_table(len(saved))
        result = self._load_fitting(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        bias.grow(len(new), "mean", names=new)
        pad_grown_optimizer_state(bias.speaker_parameters().values())
        dropped = len(known - set(current))
        logger.info(
            f"speakers restored by name: {len(saved) - dropped} of the checkpoint's {len(saved)} are in the data, "
            f"{len(new)} new speaker(s) added after them as the mean speaker"
            + (f", {dropped} not in the data kept" if dropped else "")
            + ("; the data lists them in another order: rows follow the checkpoint" if not new and not dropped else "")
        )
        if task is not None:  # with the sentences of the checkpoint's speakers, as its reader noted them
            sentences = extra.get("sentences")
            counts = dict(zip(saved, sentences)) if sentences is not None and len(sentences) == len(saved) else None
            task.adopt_speaker_names(bias.speaker_names, new_counts=counts)
        return result

    def _load_fitting(self, state_dict, **kwargs):
        """fairseq's ``load_state_dict``; parameters that do not fit this model (another --arch, other sizes or
        another --speaker-bias than the checkpoint's, e.g. resuming a --save-dir with other options) end in a
        message saying so, not in torch's list of tensors."""
        try:
            return super().load_state_dict(state_dict, **kwargs)
        except RuntimeError as e:
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            detail = "; ".join(lines[1:4]) if len(lines) > 1 else (lines[0] if lines else "")
            raise UserError(
                f"the checkpoint's parameters do not fit this model ({detail[:400]}): it was trained with another "
                f"--arch, other sizes or another --speaker-bias; give the options it was trained with, or start "
                f"from scratch in another --save-dir") from None

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, prev_output_tokens: Tensor,
                speakers: Optional[Tensor] = None, **kwargs):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, speakers=speakers)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, **kwargs)
