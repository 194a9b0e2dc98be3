"""A prior over speakers learned from the trained speakers (empirical Bayes), for every variant.

A speaker's parameters are learned from their own few sentences. With ``--adapt-l2`` alone each speaker is
pulled towards the one mean speaker; but speakers come in kinds (a style of word choice that many share),
and a speaker's ten sentences say which kind far better than they say each of r numbers. The prior here is
a mixture of K Gaussians over a speaker's rows (all their parameters, flattened), fitted to the trained
speakers' rows::

    -log p(theta) = -log sum_k pi_k exp(-tau * ||theta - mu_k||^2)            (+ a constant)

with one precision ``tau`` (the ``l2`` of :class:`~fairseq_speaker.onboarding.fit_options.FitOptions`, in the same
units: nats per squared unit) for all components. A speaker fitted under it (:func:`fit_speakers` with this
prior) is pulled towards the component their sentences make most probable, so the words they never said
take the values of the speakers of their kind: the speakers are pooled by kind, which a single Gaussian
(the mean speaker) cannot do. K = 1 is the Gaussian prior around the mean of the speakers.

:func:`fit_mixture` fits mu, pi and tau to the rows by EM (tied spherical covariance), K chosen by BIC
unless given. :func:`refit_speakers` alternates (hard empirical-Bayes EM) between fitting the prior to
the speakers' rows and refitting every speaker under it on the frozen network, from their training
sentences; ``fairseq-speaker-refit`` runs it on a trained checkpoint and saves the prior in the
checkpoint, where onboarding (``fairseq-speaker-adapt``, ``fairseq-speaker-onboarding-eval``,
``SpeakerTranslator.add_speaker``) finds it and fits new speakers under the same prior.

References: Robbins (1956) and Efron & Morris (1973) for empirical Bayes; the mixture prior as the
speaker-adaptive cluster models of ASR (Gales, 2000, "Cluster adaptive training of hidden Markov models").
"""

import logging
import math
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from torch import Tensor

logger = logging.getLogger(__name__)

#: the checkpoint key the prior is saved under
CHECKPOINT_KEY = "speaker_prior"
#: the largest number of components ``components="auto"`` tries
MAX_COMPONENTS = 32


@dataclass
class SpeakerPrior:
    """A mixture of K Gaussians over one speaker's rows: ``means[name]`` ``[K, *row]``, ``log_weights`` ``[K]``,
    one ``precision`` (tau above). ``variant`` is the speaker bias it was fitted for (checked when loaded)."""

    means: Dict[str, Tensor]
    log_weights: Tensor
    precision: float
    variant: str = ""

    @property
    def components(self) -> int:
        return int(self.log_weights.numel())

    def _distances(self, rows: Dict[str, Tensor]) -> Tensor:
        """Squared distance of one speaker's rows (name -> ``[1, *row]``) to every component's mean: ``[K]``."""
        total: Union[float, Tensor] = 0.0
        for name, mean in self.means.items():
            diff = rows[name].float().reshape(1, -1) - mean.to(rows[name].device).float().reshape(self.components, -1)
            total = total + diff.pow(2).sum(1)
        return torch.as_tensor(total)

    def penalty(self, rows: Dict[str, Tensor]) -> Tensor:
        """``-log p(rows)`` up to a constant, 0 at a component's mean when one component has all the weight."""
        logits = self.log_weights.to(next(iter(rows.values())).device) - self.precision * self._distances(rows)
        return -torch.logsumexp(logits, 0)

    def responsibilities(self, rows: Dict[str, Tensor]) -> Tensor:
        """The posterior over components of a speaker with these rows (prior times closeness): ``[K]``."""
        with torch.no_grad():
            logits = self.log_weights - self.precision * self._distances(rows).cpu()
            return torch.softmax(logits, 0)

    def component_rows(self, k: int) -> Dict[str, Tensor]:
        """Component ``k``'s mean as one speaker's rows (name -> ``[1, *row]``)."""
        return {name: mean[k : k + 1].clone() for name, mean in self.means.items()}

    # -- saving ------------------------------------------------------------------------------------------
    def state_dict(self) -> dict:
        return {"means": {k: v.detach().cpu().float() for k, v in self.means.items()},
                "log_weights": self.log_weights.detach().cpu().float(), "precision": float(self.precision),
                "variant": self.variant, "version": 1}

    @classmethod
    def from_state_dict(cls, state: dict) -> "SpeakerPrior":
        return cls({k: torch.as_tensor(v).float() for k, v in state["means"].items()},
                   torch.as_tensor(state["log_weights"]).float(), float(state["precision"]), state.get("variant", ""))

    def fits(self, bias) -> Optional[str]:
        """Why this prior cannot be used with ``bias`` (another variant or row shapes), or None."""
        shapes = bias.speaker_row_shapes()
        if set(shapes) != set(self.means):
            return f"it was fitted for the speaker parameters {sorted(self.means)}, the model has {sorted(shapes)}"
        for name, shape in shapes.items():
            if tuple(self.means[name].shape[1:]) != tuple(shape):
                return (f"its rows of {name} have the shape {tuple(self.means[name].shape[1:])}, "
                        f"the model's {tuple(shape)}")
        return None


def _flatten(rows: Sequence[Dict[str, Tensor]], names: Sequence[str]) -> np.ndarray:
    return np.stack([np.concatenate([r[n].detach().float().reshape(-1).cpu().numpy() for n in names]) for r in rows])


def _em(x: np.ndarray, k: int, rng: np.random.Generator,
        iterations: int = 200) -> Tuple[np.ndarray, np.ndarray, float, float]:
    """EM for a mixture of k spherical Gaussians of one shared variance; k-means++ start.
    Returns means ``[k, D]``, log weights ``[k]``, the variance, and the log-likelihood of ``x``."""
    n, d = x.shape
    centres = [x[rng.integers(n)]]
    for _ in range(1, k):  # k-means++: the next centre far from the chosen ones
        dist = np.min([((x - c) ** 2).sum(1) for c in centres], axis=0)
        total = dist.sum()
        centres.append(x[rng.choice(n, p=dist / total)] if total > 0 else x[rng.integers(n)])
    means = np.array(centres, dtype=np.float64)
    log_w = np.full(k, -math.log(k))
    var = max(float(x.var(0).mean()), 1e-8)
    previous = -np.inf
    for _ in range(iterations):
        sq = ((x[:, None, :] - means[None]) ** 2).sum(2)  # n x k
        logp = log_w[None] - 0.5 * sq / var - 0.5 * d * math.log(2 * math.pi * var)
        norm = np.logaddexp.reduce(logp, axis=1)
        ll = float(norm.sum())
        resp = np.exp(logp - norm[:, None])
        counts = resp.sum(0) + 1e-10
        means = (resp.T @ x) / counts[:, None]
        log_w = np.log(counts / n)
        var = max(float((resp * ((x[:, None, :] - means[None]) ** 2).sum(2)).sum() / (n * d)), 1e-8)
        if ll - previous < 1e-6 * abs(ll):
            break
        previous = ll
    return means, log_w, var, ll


def fit_mixture(rows: Sequence[Dict[str, Tensor]], components="auto", seed: int = 1, variant: str = "",
                restarts: int = 3) -> SpeakerPrior:
    """The mixture prior of ``rows`` (one dict name -> ``[1, *row]`` per speaker): K ``components``, or the K
    of 1 .. :data:`MAX_COMPONENTS` with the best BIC (``"auto"``); the best of ``restarts`` EM starts each."""
    if not rows:
        raise ValueError("no speakers to fit a prior to")
    names = sorted(rows[0])
    x = _flatten(rows, names).astype(np.float64)
    n, d = x.shape
    rng = np.random.default_rng(seed)
    if components == "auto":
        candidates = [k for k in range(1, MAX_COMPONENTS + 1) if k <= max(1, n // 5)]
    else:
        k = int(components)
        if k < 1:
            raise ValueError(f"a prior needs at least 1 component, got {k}")
        candidates = [min(k, n)]
    best = None
    for k in candidates:
        fits = [_em(x, k, rng) for _ in range(restarts if k > 1 else 1)]
        means, log_w, var, ll = max(fits, key=lambda f: f[3])
        bic = -2 * ll + (k * d + (k - 1) + 1) * math.log(n)
        if best is None or bic < best[0]:
            best = (bic, means, log_w, var)
    assert best is not None  # one candidate at least
    _, means, log_w, var = best
    sizes = [int(np.prod(rows[0][name].shape[1:])) for name in names]
    shapes = {name: tuple(rows[0][name].shape[1:]) for name in names}
    out, start = {}, 0
    for name, size in zip(names, sizes):
        block = means[:, start : start + size].astype(np.float32)
        out[name] = torch.from_numpy(block).reshape(len(means), *shapes[name])
        start += size
    return SpeakerPrior(out, torch.from_numpy(log_w.astype(np.float32)), 1.0 / (2.0 * var), variant)


def prior_of_checkpoint(state: dict, bias) -> Optional[SpeakerPrior]:
    """The prior saved in a checkpoint (by ``fairseq-speaker-refit``), if any and if it fits the model's
    speaker parameters; a checkpoint without one gives None (its speakers are fitted around the mean speaker)."""
    saved = state.get(CHECKPOINT_KEY) if isinstance(state, dict) else None
    if not saved:
        return None
    prior = SpeakerPrior.from_state_dict(saved)
    problem = prior.fits(bias)
    if problem is not None:
        logger.warning(f"the checkpoint's speaker prior is not used: {problem}")
        return None
    return prior


def best_start(prior: SpeakerPrior, chunks, nll) -> Dict[str, Tensor]:
    """Where to start a speaker's fit under ``prior``: the component mean whose rows explain the speaker's
    sentences best (log weight minus the data's negative log-likelihood), one evaluation per component.
    ``nll(rows, chunks)`` is the data term of the fit."""
    with torch.no_grad():
        scores = [float(prior.log_weights[k]) - float(nll(prior.component_rows(k), chunks))
                  for k in range(prior.components)]
    return prior.component_rows(int(np.argmax(scores)))


def describe(prior: SpeakerPrior) -> str:
    """One line: the components, their weights, the precision."""
    weights = torch.exp(prior.log_weights).tolist()
    return (f"prior: {prior.components} component(s), weights {', '.join(f'{w:.2f}' for w in weights)}, "
            f"precision {prior.precision:.3g} (variance {1 / (2 * prior.precision):.3g})")
