"""What the decoder asks of a variant once per batch: the bias, the speaker state and the regularizers.

:meth:`~SpeakerLookup.forward` and :meth:`~SpeakerLookup.speaker_state` check the speaker ids and answer for unseen
speakers: ``MEAN_SPEAKER`` gets the mean speaker's bias and state (kept between batches until a parameter changes),
``NO_SPEAKER`` none (no bias, offset 0, scale 1); known speakers get the variant's :meth:`lookup` and
:meth:`state_of_rows`. :meth:`~SpeakerLookup.outputs_and_aux_losses` is all of it at once, with the variant's
regularizers (:meth:`aux_losses`, :meth:`state_aux_losses`).
"""

from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from fairseq_speaker.data.speaker_dictionary import MEAN_SPEAKER, NO_SPEAKER
from fairseq_speaker.fairseq_patches import version_counter

from .parameters import SpeakerParameters
from .state import SpeakerState
from .variant import EncoderOut


class SpeakerLookup(SpeakerParameters):
    """The bias and state of a batch's speakers, known or unseen, and their regularizers."""

    # -- the bias ----------------------------------------------------------------------------
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

    # -- the mean speaker's, kept between batches -----------------------------------------------
    def cached_mean_bias(self) -> Tensor:
        """:meth:`mean_bias`, computed again only when a parameter or buffer of the variant has changed
        (moved, replaced, or updated in place: their version counters say so). Where gradients flow to
        the parameters (training), it is computed every time, so that every speaker gets its share."""
        return self._cached("_mean_bias_cache", self.mean_bias)

    def cached_mean_state(self) -> Optional[SpeakerState]:
        """:meth:`mean_state`, kept as :meth:`cached_mean_bias` keeps the mean bias."""
        return self._cached("_mean_state_cache", self.mean_state)

    def _cached(self, key_name: str, compute):
        tensors = list(self.parameters()) + list(self.buffers())
        if torch.is_grad_enabled() and any(p.requires_grad for p in tensors):
            return compute()
        key = tuple((id(t), version_counter(t), t.data_ptr(), t.dtype, tuple(t.shape)) for t in tensors)
        cached = self.__dict__.get(key_name)
        if cached is None or cached[0] != key:
            value = compute()
            cached = (key, value.detach() if isinstance(value, (Tensor, SpeakerState)) else value)
            self.__dict__[key_name] = cached
        return cached[1]

    # -- with the regularizers -----------------------------------------------------------------
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
