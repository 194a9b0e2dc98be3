"""The decoder's part of a speaker model: :class:`SpeakerDecoderMixin`, put before a fairseq incremental decoder class.

The variant's bias ``[B, V]`` and speaker state (an input offset and per-layer scales, see
:class:`~fairseq_speaker.modules.speaker_bias.SpeakerState`) are computed once per sentence from the speakers the
encoder kept (:func:`~fairseq_speaker.modules.speaker_encoder.encoder_speakers`); the bias is added to the logits of
every step, the state is handed to the network for the duration of its forward (``active_speaker_state``), which
applies it at every step. Teacher-forced, they are returned as ``extra["speaker_bias"]`` and
``extra["speaker_state"]``, with the variant's regularizers as ``extra["speaker_aux_losses"]``. In generation they
are made at the first step and cached in the incremental state (one row per sentence, the beam reorders an index
into them); a decoder whose output layer is affine (``output_weight_and_bias``) makes each step's logits with the
bias in one matrix product (on CPU: oneDNN's product, then the rows added in place), with no tensor of size V
beyond the plain decoder's.

A decoder that takes a speaker state says where (``speaker_state_sites()``, a
:class:`~fairseq_speaker.modules.speaker_bias.StateSites`) and applies ``active_speaker_state()`` in its forward:
our LSTM in its recurrence, fairseq's Transformer through forward hooks
(:func:`~fairseq_speaker.modules.speaker_state_hooks.hook_speaker_state`).
"""

import contextlib
import threading
from typing import Dict, Iterator, Optional, Tuple

import torch
from torch import Tensor

from fairseq_speaker.modules import gemm
from fairseq_speaker.modules.speaker_bias import SpeakerBias, SpeakerState, StateSites, variant_spelling
from fairseq_speaker.modules.speaker_encoder import EncoderOut, encoder_speakers

IncrementalState = Dict[str, Dict[str, Optional[Tensor]]]


class SpeakerDecoderMixin:
    """Put before a fairseq incremental decoder class: adds the speaker bias to its logits.

    The bias module is set by :meth:`~fairseq_speaker.modules.speaker_plumbing.SpeakerModelMixin.with_speaker_bias`
    and lives at ``decoder.speaker_bias`` (its parameters are ``decoder.speaker_bias.*`` in checkpoints).
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
        hooks (:func:`~fairseq_speaker.modules.speaker_state_hooks.hook_speaker_state`) installs them here. The
        default does nothing."""
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
                f"this model has a {variant_spelling(self.speaker_bias)!r} speaker bias and was called without "
                f"speakers: use --task speaker_translation (speakers from {{split}}.spk, --speaker-file, --speaker or "
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
