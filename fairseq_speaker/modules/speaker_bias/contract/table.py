"""The speaker table over time: growing it for new speakers, and what the checkpoint keeps beside its rows.

New speakers (onboarding, a continued run with more speakers) are added at the end of every speaker parameter, as the
mean speaker or at zero (:meth:`~SpeakerTable.grow`), after the mean speaker is frozen as the trained speakers' mean
(:meth:`~SpeakerTable.freeze_mean`). A state dict keeps, beside the rows, each variant's extra state
(``<prefix>._extra_state``): the speakers' names, so that a checkpoint's rows are restored by name; the number of
speakers the mean is taken over; and, for a state variant, the decoder's sites its parameters were made for (read back
before the parameters are loaded: ``SpeakerBias._load_from_state_dict`` in ``base.py``).
"""

from typing import Dict, List, Optional, Sequence

import torch
from torch import Tensor, nn

from .parameters import SpeakerParameters
from .variant import join_path


class SpeakerTable(SpeakerParameters):
    """Growing the speaker table, and the speakers' names and the mean speaker in the checkpoint."""

    # -- new speakers --------------------------------------------------------------------------
    def freeze_mean(self) -> None:
        """Keep the mean speaker as it is now (the mean of today's rows) when speakers are added: onboarding
        must not change what unseen speakers get. Nested variants too; a second call changes nothing."""
        for _, variant in self.named_variants():
            if variant.mean_of is None:
                variant.mean_of = variant.num_speakers

    def new_speaker_rows(self, n: int, init: str = "mean") -> Dict[str, Tensor]:
        """Rows ``[n, ...]`` for n new speakers: the mean speaker's (``init="mean"``) or zeros."""
        if init not in ("mean", "zero"):
            raise ValueError(f"init must be 'mean' or 'zero', got {init!r}")
        rows = {}
        for prefix, variant in self.named_variants():
            for name in variant.speaker_parameter_names:
                param = variant.get_parameter(name)
                row = variant.mean_speaker_row(name) if init == "mean" else param.new_zeros(1, *param.shape[1:])
                rows[join_path(prefix, name)] = row.detach().to(param).expand(n, *param.shape[1:]).clone()
        return rows

    def grow(self, n: int, init: str = "mean", names: Optional[Sequence[str]] = None) -> None:
        """Add n speakers at the end of the table (ids S .. S+n-1), starting as the mean speaker or at zero.

        ``names``: the new speakers' labels, required when the table's rows are named
        (:attr:`speaker_names`). Parameters are replaced by larger ones: build optimizers after
        growing (or let :func:`~fairseq_speaker.optim.speaker_rows.pad_grown_optimizer_state`
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

    # -- the checkpoint: the speakers' names travel with the parameters (``<prefix>._extra_state``) ---------
    def extra_state_keys(self) -> List[str]:
        """The state-dict keys, relative to this module, of the speaker names of this variant and of every
        variant nested in it (checkpoints older than 0.3.0 lack them)."""
        return [join_path(prefix, "_extra_state") for prefix, _ in self.named_variants()]

    def get_extra_state(self) -> Dict[str, object]:
        state: Dict[str, object] = {"speakers": list(self.speaker_names)} if self.speaker_names is not None else {}
        if self.mean_of is not None:
            state["mean_of"] = int(self.mean_of)
        if self.sites is not None and self.acts_on_state:  # so that the variant loads alone (inspection)
            state["sites"] = {"input_dim": self.sites.input_dim, "layer_dims": list(self.sites.layer_dims)}
        return state

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
