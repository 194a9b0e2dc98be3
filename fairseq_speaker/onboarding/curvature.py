"""A quadratic model of a speaker's fitted objective, for their incremental updates through the decoder.

An incremental update of a speaker fitted through the decoder (one more sentence) need not run the decoder over
the sentences fitted before: the fit keeps a quadratic model of its objective around where it ended
(:class:`Curvature`: the BFGS matrix L-BFGS built from its last steps, the Hessian along the directions the fit
explored), and the update minimizes that model of the old sentences (and of the prior) plus the new sentences'
exact loss (:func:`~fairseq_speaker.onboarding.fit.fit_speakers` with ``curvatures``): the online Laplace
approximation, the way a posterior is carried from one batch of evidence to the next (MacKay, 1992; Kirkpatrick
et al., 2017 keep a diagonal one). Its cost is the new sentences'.
"""

from dataclasses import dataclass
from typing import Dict, Optional

import torch
from torch import Tensor


@dataclass
class Curvature:
    """A quadratic model of a speaker's fitted objective (the per-token loss of their sentences and the prior)
    around the rows the fit ended at, ``center``: ``tokens * (loss + 1/2 d^T H d)``, d the rows' change.
    ``hessian``: the BFGS matrix of the fit's L-BFGS steps, over the rows flattened in ``center``'s order."""

    center: Dict[str, Tensor]
    hessian: Tensor  # P x P, float64
    tokens: int
    loss: float

    def penalty(self, rows: Dict[str, Tensor]) -> Tensor:
        """The summed (not per-token) model of the old objective at ``rows``."""
        d = torch.cat([(rows[k].double() - v.double()).reshape(-1) for k, v in self.center.items()])
        return self.tokens * (self.loss + 0.5 * d @ (self.hessian @ d))

    @staticmethod
    def from_lbfgs(state: dict, center: Dict[str, Tensor], tokens: int, loss: float) -> Optional["Curvature"]:
        """The BFGS matrix of L-BFGS's kept steps ``s`` and gradient changes ``y`` (torch's ``old_stps``,
        ``old_dirs``), from its scaling ``H_diag`` (B_0 = I / H_diag); None if the fit took no step."""
        steps, changes = state.get("old_stps") or [], state.get("old_dirs") or []
        if not steps:
            return None
        size = steps[0].numel()
        hessian = torch.eye(size, dtype=torch.float64) / float(state["H_diag"])
        for s, y in zip(steps, changes):
            s, y = s.double(), y.double()
            bs = hessian @ s
            hessian = hessian - torch.outer(bs, bs) / (s @ bs) + torch.outer(y, y) / (y @ s)
        if not bool(torch.isfinite(hessian).all()):
            return None
        return Curvature({k: v.detach().double().clone() for k, v in center.items()}, hessian, tokens, loss)
