"""Sampling: logits -> the processed target law p, and the random sources algorithms draw from.

Scope (docs/method.md §1 and §5 invariants): the losslessness contract is stated against the
*processed* law p, i.e. the law plain autoregressive sampling really draws from after the
sampling transforms. This module is the one place where those transforms live, so that the
speculative paths and the naive loop cannot disagree about them.

Notable choices:
- Transforms are applied in the order temperature, then top-k, then top-p (the order of Hugging
  Face's default warpers). Every law is computed in float64, whatever the logits' dtype.
- Temperature 0 is greedy decoding: a one-hot law on the argmax. Ties are broken towards the
  *lowest* token id, so greedy output is a function of the logits alone. top-k and top-p never
  change a one-hot law (the argmax always survives them).
- top-k keeps exactly k tokens; among tokens of equal logit at the boundary, the lower ids are
  kept (a stable sort).
- top-p keeps the smallest prefix of the law sorted by decreasing probability (ties: lower ids
  first) whose mass is >= top_p; concretely token j is kept when the mass strictly before it in
  that order is < top_p, which never drops the most likely token. top_p = 1 is "off".
- Renormalization is a plain division by the kept mass: no epsilon is added anywhere (an epsilon
  would bias the law, docs/method.md §5 invariants).
- Randomness is injected: every algorithm draws through a `RandomSource`, so the exact-law oracle
  (casspec_ref.proof.enumerate) can substitute an enumerating source and prove losslessness exactly.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Protocol, runtime_checkable

import numpy as np
import torch


def validate_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """Raise `ValueError` when a sampling setting is outside its allowed range.

    Allowed: ``temperature >= 0`` (0 = greedy, finite), ``top_k >= 0`` (0 = off, an int),
    ``0 < top_p <= 1`` (1 = off).
    """
    if not isinstance(temperature, int | float) or isinstance(temperature, bool):
        raise ValueError(f"temperature must be a real number >= 0, got {temperature!r}")
    if math.isnan(temperature) or temperature < 0 or math.isinf(temperature):
        raise ValueError(
            f"temperature must be a finite number >= 0 (0 = greedy), got {temperature}"
        )
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0:
        raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {top_k!r}")
    if not isinstance(top_p, int | float) or isinstance(top_p, bool):
        raise ValueError(f"top_p must be a real number in (0, 1], got {top_p!r}")
    if math.isnan(top_p) or not (0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be in (0, 1] (1 = off), got {top_p}")


def target_law(
    logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """The processed law p over the last axis of ``logits`` (float64, same leading shape).

    ``logits`` may contain ``-inf`` (masked tokens) but not NaN or ``+inf``, and every row needs
    at least one finite logit. See the module docstring for the transforms and their tie rules.
    """
    validate_sampling(temperature, top_k, top_p)
    if not isinstance(logits, torch.Tensor):
        raise ValueError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.ndim == 0 or logits.shape[-1] == 0:
        raise ValueError(f"logits must have shape (..., V) with V >= 1, got {tuple(logits.shape)}")
    if not (logits.is_floating_point()):
        raise ValueError(f"logits must be a floating-point tensor, got dtype {logits.dtype}")
    x = logits.detach().to(torch.float64)
    if torch.isnan(x).any() or torch.isposinf(x).any():
        raise ValueError("logits contain NaN or +inf; only finite values and -inf are allowed")
    if torch.isneginf(x).all(dim=-1).any():
        raise ValueError("a row of logits is entirely -inf: no token can be sampled")
    vocab = x.shape[-1]

    if temperature == 0:
        # torch.argmax returns the first maximal index: ties go to the lowest token id.
        best = x.argmax(dim=-1, keepdim=True)  # (..., 1)
        return torch.zeros_like(x).scatter_(-1, best, 1.0)  # (..., V)

    x = x / temperature
    if 0 < top_k < vocab:
        # A stable descending sort keeps lower ids first among equal logits.
        order = torch.sort(x, dim=-1, descending=True, stable=True).indices  # (..., V)
        drop = order[..., top_k:]  # (..., V - k)
        x = x.scatter(-1, drop, float("-inf"))
    probs = torch.softmax(x, dim=-1)  # (..., V)
    if top_p < 1.0:
        sorted_probs, order = torch.sort(probs, dim=-1, descending=True, stable=True)  # (..., V)
        mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs  # (..., V)
        keep_sorted = mass_before < top_p
        keep = torch.zeros_like(keep_sorted).scatter(-1, order, keep_sorted)  # (..., V)
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


@runtime_checkable
class RandomSource(Protocol):
    """The two draws every algorithm in casspec_ref needs.

    - ``bernoulli(prob)``: True with probability ``prob`` (a float or `Fraction` in [0, 1]).
    - ``categorical(probs)``: an index drawn from a 1-D law (float64 array, or an object array of
      `Fraction`), which sums to 1.
    """

    def bernoulli(self, prob: float | Fraction) -> bool: ...

    def categorical(self, probs: np.ndarray) -> int: ...


class TorchRandomSource:
    """A `RandomSource` drawing from a `torch.Generator` (CPU), one float64 uniform per draw.

    Draws whose result is certain (``prob`` of 0 or 1, a law with a single non-zero entry)
    consume no uniform: greedy decoding then uses no randomness at all, and the law of every
    draw is unchanged.
    """

    def __init__(self, seed: int | None = None, generator: torch.Generator | None = None) -> None:
        if seed is not None and generator is not None:
            raise ValueError("give either seed or generator, not both")
        if generator is None:
            generator = torch.Generator(device="cpu")
            if seed is not None:
                generator.manual_seed(seed)
        self.generator = generator

    def _uniform(self) -> float:
        return float(torch.rand((), generator=self.generator, dtype=torch.float64))

    def bernoulli(self, prob: float | Fraction) -> bool:
        p = float(prob)
        if math.isnan(p) or p < 0.0 or p > 1.0:
            raise ValueError(f"bernoulli probability must be in [0, 1], got {prob}")
        if p == 0.0:
            return False
        if p == 1.0:
            return True
        return self._uniform() < p

    def categorical(self, probs: np.ndarray) -> int:
        law = np.asarray(probs)
        if law.ndim != 1 or law.shape[0] == 0:
            raise ValueError(f"categorical needs a non-empty 1-D law, got shape {law.shape}")
        weights = law.astype(np.float64)
        if (weights < 0).any() or not np.isfinite(weights).all():
            raise ValueError("categorical law has negative or non-finite entries")
        nonzero = np.flatnonzero(weights)
        if nonzero.size == 0:
            raise ValueError("categorical law has no mass")
        if nonzero.size == 1:
            return int(nonzero[0])
        cumulative = np.cumsum(weights)  # (V,)
        u = self._uniform() * cumulative[-1]
        # side="right" skips zero-probability entries (their cumulative value does not grow).
        index = int(np.searchsorted(cumulative, u, side="right"))
        # Rounding can push u onto the last cumulative value; fall back to the last token with mass.
        return min(index, int(nonzero[-1]))
