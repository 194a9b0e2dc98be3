from typing import Optional

import torch
from torch import Tensor, nn

from fairseq_speaker.data.speaker_dictionary import MEAN_SPEAKER, NO_SPEAKER


class SpeakerBias(nn.Module):
    """Base class of the speaker bias variants.

    Called with speaker ids ``[batch]`` (LongTensor), a variant returns the bias
    ``[batch, vocab]`` to add to the output logits, or ``None`` when it adds
    nothing. Two negative ids stand for speakers the model never saw:
    :data:`MEAN_SPEAKER` (-1) gets the mean of all speakers' biases and
    :data:`NO_SPEAKER` (-2) gets no bias; the task chooses between them with
    ``--unknown-speaker``.

    A subclass implements :meth:`build` and :meth:`lookup`; it overrides
    :meth:`mean_bias` when the mean has a cheaper closed form than averaging
    every speaker's bias.
    """

    name = "?"

    def __init__(self, num_speakers: int, vocab_size: int):
        super().__init__()
        self.num_speakers = num_speakers
        self.vocab_size = vocab_size

    @classmethod
    def build(cls, cfg, num_speakers: int, vocab_size: int) -> "SpeakerBias":
        return cls(num_speakers, vocab_size)

    def lookup(self, speakers: Tensor) -> Optional[Tensor]:
        """Bias of known speakers: ids ``[batch]`` in ``[0, num_speakers)`` -> ``[batch, vocab]``."""
        raise NotImplementedError

    def mean_bias(self) -> Tensor:
        """The mean of every speaker's bias, ``[vocab]``, used for unseen speakers."""
        total = None
        ids = torch.arange(self.num_speakers, device=self._device())
        for chunk in ids.split(1024):
            part = self.lookup(chunk).sum(0)
            total = part if total is None else total + part
        return total / self.num_speakers

    def forward(self, speakers: Tensor) -> Optional[Tensor]:
        if speakers.numel() and int(speakers.max()) >= self.num_speakers:
            raise IndexError(
                f"speaker id {int(speakers.max())} is out of range for a model with "
                f"{self.num_speakers} speakers"
            )
        bias = self.lookup(speakers.clamp(min=0))
        if bias is None:
            return None
        unseen = speakers < 0
        if unseen.any():
            # speakers outside the dictionary: the mean speaker, or nothing
            bias = torch.where((speakers == MEAN_SPEAKER).unsqueeze(1), self.mean_bias().to(bias), bias)
            bias = bias.masked_fill((speakers == NO_SPEAKER).unsqueeze(1), 0.0)
        return bias

    def _device(self) -> torch.device:
        for p in self.parameters():
            return p.device
        return torch.device("cpu")
