"""Speakers through any fairseq encoder-decoder: the pieces a model mixes in to become speaker-aware, and the model's
own piece, :class:`SpeakerModelMixin` (with :func:`register_speaker_model`).

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

The pieces, one a module: the encoder's (:class:`~fairseq_speaker.modules.speaker_encoder.SpeakerEncoderMixin`),
the decoder's (:class:`~fairseq_speaker.modules.speaker_decoder.SpeakerDecoderMixin`), the hooks that apply a
speaker state in a decoder we do not own (:mod:`~fairseq_speaker.modules.speaker_state_hooks`), the model's options
(:mod:`~fairseq_speaker.modules.speaker_model_options`); this module is the model's piece, which builds the variant,
attaches it to the decoder and restores speaker rows by name when a checkpoint is loaded.

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
(:func:`~fairseq_speaker.modules.speaker_state_hooks.hook_speaker_state`). Variants acting on the state are refused
on a decoder that does not. :func:`register_speaker_model` gives the model every registered variant's options
(as flags and hydra keys), also those of variants registered after it.
"""

import argparse
import dataclasses
import logging
from typing import Dict, List, Optional, Tuple, Type

from fairseq.dataclass import FairseqDataclass
from fairseq.dataclass.utils import gen_parser_from_dataclass
from fairseq.models import register_model
from torch import Tensor

from fairseq_speaker.checkpoints import SPEAKER_NAMES_KEY
from fairseq_speaker.errors import UserError
from fairseq_speaker.fairseq_patches import parser_option_names, set_model_options
from fairseq_speaker.modules import speaker_words
from fairseq_speaker.modules.speaker_bias import SpeakerBias, build_speaker_bias, on_register, reserve_options
from fairseq_speaker.modules.speaker_model_options import SpeakerModelConfig, compose_options
from fairseq_speaker.optim.speaker_rows import pad_grown_optimizer_state

logger = logging.getLogger(__name__)


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


@dataclasses.dataclass
class RestoredSpeakers:
    """What a speaker model's ``load_state_dict`` restored that its task must take before it reads or decodes data
    (``SpeakerTranslationTask.take_restored_speakers``): the checkpoint's dictionaries, and its speaker table where
    it is not the one the model was built with."""

    #: what the checkpoint reader noted of the checkpoint (its path and dictionaries), or None
    as_read: Optional[dict]
    #: the checkpoint's speakers, where they are not the model's (else None)
    saved: Optional[List[str]] = None
    #: the speakers the model was built with (the task's then)
    built: Optional[List[str]] = None
    #: the table's speakers now: the checkpoint's, then the built ones it lacked
    names: Optional[List[str]] = None
    #: the sentences of the checkpoint's speakers, as its reader noted them
    counts: Optional[Dict[str, int]] = None


class SpeakerModelMixin:
    """Put before a fairseq encoder-decoder model class whose encoder and decoder use the mixins of
    :mod:`~fairseq_speaker.modules.speaker_encoder` and :mod:`~fairseq_speaker.modules.speaker_decoder`."""

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
        model.restored_speakers = None  # what load_state_dict restores, for the task to take
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
        after it as the mean speaker. What was restored is kept in ``restored_speakers``
        (:class:`RestoredSpeakers`), which the task takes before it reads a split or decodes
        (``SpeakerTranslationTask.take_restored_speakers``), so that the data's labels map to those rows: a model
        never calls its task. Checkpoints older than 0.3.0 carry no names: their rows are taken by position, as
        written.
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
        current = bias.speaker_names
        # the checkpoint's dictionaries, which the task compares with its data folder's
        self.restored_speakers = RestoredSpeakers(as_read=extra.get("as_read"))
        if saved is None or current is None or list(saved) == current:
            return self._load_fitting(state_dict, strict=strict, model_cfg=model_cfg, args=args)
        saved = list(saved)
        known = set(saved)
        new = [name for name in current if name not in known]
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
        sentences = extra.get("sentences")  # of the checkpoint's speakers, as its reader noted them
        counts = dict(zip(saved, sentences)) if sentences is not None and len(sentences) == len(saved) else None
        self.restored_speakers = RestoredSpeakers(extra.get("as_read"), saved, list(current),
                                                  list(bias.speaker_names or ()), counts)
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
            if len(detail) > 400:  # cut at a word (it was cut inside one)
                detail = detail[:400].rsplit(" ", 1)[0] + " ..."
            as_read = (state_dict.get(SPEAKER_NAMES_KEY) or {}).get("as_read") or {}
            path = as_read.get("path") or "the checkpoint"
            saved = state_dict.get("decoder.embed_tokens.weight")
            built = self.decoder.embed_tokens.weight if hasattr(self.decoder, "embed_tokens") else None
            if as_read.get("speaker_token") is False and saved is not None and built is not None \
                    and built.size(0) > saved.size(0):  # its target dictionary holds no speaker tokens
                raise UserError(f"{path} was trained without --speaker-token (its target dictionary has no speaker "
                                f"tokens, {saved.size(0)} rows against this model's {built.size(0)}): leave "
                                f"--speaker-token out, or start from scratch in another --save-dir") from None
            if as_read.get("speaker_token") is True and saved is not None and built is not None \
                    and saved.size(0) > built.size(0):  # its target dictionary holds the speaker tokens
                raise UserError(f"{path} was trained with --speaker-token (its target dictionary has a token per "
                                f"speaker, {saved.size(0)} rows against this model's {built.size(0)}): give "
                                f"--speaker-token, or start from scratch in another --save-dir") from None
            raise UserError(
                f"{path}: its parameters do not fit this model ({detail}): it was trained with another --arch, other "
                f"sizes or another --speaker-bias; give the options it was trained with, or start from scratch in "
                f"another --save-dir") from None

    def forward(self, src_tokens: Tensor, src_lengths: Tensor, prev_output_tokens: Tensor,
                speakers: Optional[Tensor] = None, **kwargs):
        encoder_out = self.encoder(src_tokens, src_lengths=src_lengths, speakers=speakers)
        return self.decoder(prev_output_tokens, encoder_out=encoder_out, **kwargs)
