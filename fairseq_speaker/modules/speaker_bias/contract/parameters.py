"""Which of a variant's parameters are a speaker's and which are shared, and how a batch reads its speakers' rows.

A variant declares its speaker parameters by name (``speaker_parameter_names``: row i belongs to speaker i); every
other parameter it owns is shared by all speakers. Freezing, inspection, export and import, growth and the optimizer's
row-by-row updates go by this split, which also finds the speaker parameters of variants nested in another (``sum``)
by their module path. The speaker tables named in ``row_sparse_parameter_names`` are read through :meth:`row_lookup`,
which tells the optimizer (:mod:`fairseq_speaker.optim.speaker_rows`) that it may update them row by row.
"""

from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fairseq_speaker.data.speaker_dictionary import NO_SPEAKER
from fairseq_speaker.optim.table_marks import mark_row_sparse

from .variant import VariantContract, join_path


class SpeakerParameters(VariantContract):
    """The speaker / shared split of a variant's parameters, and the reads of its speaker rows."""

    def speaker_parameters(self) -> Dict[str, nn.Parameter]:
        """Parameters whose row i belongs to speaker i (``[S, ...]``), by name relative to this module."""
        return {
            join_path(prefix, name): variant.get_parameter(name)
            for prefix, variant in self.named_variants()
            for name in variant.speaker_parameter_names
        }

    def own_shared_parameters(self) -> List[nn.Parameter]:
        """This variant's own shared parameters (not its speaker parameters, not those of variants nested in it):
        what acts together with its speaker rows (``fact``'s shared bias vectors, ``proj``'s projection,
        ``hyper_lhuc``'s maps). Under ``--speaker-lr-scale auto`` they take their rows' mean rate
        (:func:`~fairseq_speaker.optim.lr_scale.shared_scale`)."""
        owned = {id(self.get_parameter(name)) for name in self.speaker_parameter_names}
        found: List[nn.Parameter] = []
        modules: List[nn.Module] = [self]
        while modules:
            module = modules.pop()
            found.extend(p for p in module.parameters(recurse=False) if id(p) not in owned and p.requires_grad)
            modules.extend(child for child in module.children() if not isinstance(child, VariantContract))
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

    def check_speakers(self, speakers: Tensor) -> None:
        """Refuse ids that are neither rows of the table (``[0, S)``) nor ``MEAN_SPEAKER`` or ``NO_SPEAKER``."""
        if speakers.numel() == 0:
            return
        if int(speakers.max()) >= self.num_speakers:
            raise IndexError(
                f"speaker id {int(speakers.max())} is out of range for a model with {self.num_speakers} speakers"
            )
        if int(speakers.min()) < NO_SPEAKER:
            raise IndexError(f"speaker id {int(speakers.min())} is neither a speaker nor an unseen-speaker id")
