"""Sampling: logits -> the processed target law p, and the random sources algorithms draw from.

Losslessness is stated against the *processed* law p, the law plain sampling draws from after
temperature, top-k and top-p (docs/method.md §1, §5). This is the one place those transforms
live, so no two paths can disagree about them. Tie rules: docs/design.md ("Laws are
computed in float64").

The order is temperature, top-k, renormalise, top-p: transformers' order (its warpers in
`generate`). The law is transformers' wherever no tie and no rounding decides
(tests/test_sampling_semantics.py). Ties are decided differently, on purpose: top-k keeps
exactly k tokens, the lower ids among equal logits, where transformers' `TopKLogitsWarper` keeps
every token tied with the k-th; top-p keeps the lower ids among equal probabilities, where
`TopPLogitsWarper` drops the smallest first in an ascending sort, so the lower ids go first.
One rule, lower ids first, for greedy, top-k and top-p makes the law a function of the logits
that a reader can compute by hand, and top-k's kept count is the k asked for. At a top_p equal
to the mass of a prefix, rounding decides: ours sums from the largest probability and compares
the mass before a token with top_p, as the rule reads; transformers sums from the smallest and
compares the mass up to it with 1 - top_p, whose roundings can keep one token more."""

from __future__ import annotations

from fractions import Fraction
from typing import Protocol, runtime_checkable

import numpy as np
import torch

from casspec_ref.base import input_checks as checks
from casspec_ref.base import nucleus


def target_law(
    logits: torch.Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0
) -> torch.Tensor:
    """The processed law p over the last axis of ``logits`` (float64, same leading shape):
    temperature, then top-k, then top-p. ``logits`` may hold ``-inf``, not NaN or ``+inf``."""
    x = checks.check_logits(logits, temperature, top_k, top_p)
    if temperature == 0:
        # torch.argmax returns the first maximal index: ties go to the lowest token id (in the
        # logits' own dtype: float64 would hold the same values, so the same index).
        best = x.argmax(dim=-1, keepdim=True)  # (..., 1)
        law = torch.zeros(x.shape, dtype=torch.float64, device=x.device)  # (..., V)
        return law.scatter_(-1, best, 1.0)

    x = x.to(torch.float64) / temperature
    if 0 < top_k < x.shape[-1]:
        # A stable descending sort keeps lower ids first among equal logits.
        order = torch.sort(x, dim=-1, descending=True, stable=True).indices  # (..., V)
        x = x.scatter(-1, order[..., top_k:], float("-inf"))  # all but the top k go
    probs = torch.softmax(x, dim=-1)  # (..., V)
    if top_p < 1.0:
        # Keep while the mass before a token, in decreasing order, is below top_p (ties: lower
        # ids first); computed without sorting all V probabilities (see base/nucleus.py).
        keep = nucleus.top_p_keep(probs, top_p)  # (..., V) bool
        probs = torch.where(keep, probs, torch.zeros_like(probs))
        probs = probs / probs.sum(dim=-1, keepdim=True)
    return probs


@runtime_checkable
class RandomSource(Protocol):
    """The two draws every algorithm needs: ``bernoulli(prob)`` (True with probability ``prob``,
    a float or `Fraction`) and ``categorical(probs)`` (an index drawn from a 1-D law of floats or
    `Fraction`s summing to 1). The exact-law oracle substitutes an enumerating source."""

    def bernoulli(self, prob: float | Fraction) -> bool: ...

    def categorical(self, probs: np.ndarray) -> int: ...


class TorchRandomSource:
    """A `RandomSource` drawing one float64 uniform of a CPU `torch.Generator` per draw. A draw
    whose result is certain consumes none: greedy decoding uses no randomness at all."""

    def __init__(self, seed: int | None = None, generator: torch.Generator | None = None) -> None:
        checks.check_seed_or_generator(seed, generator)
        if generator is None:
            generator = torch.Generator(device="cpu")
            if seed is not None:
                generator.manual_seed(seed)
        self.generator = generator

    def _uniform(self) -> float:
        return float(torch.rand((), generator=self.generator, dtype=torch.float64))

    def bernoulli(self, prob: float | Fraction) -> bool:
        p = checks.check_probability(prob)
        if p in (0.0, 1.0):  # certain: no uniform is drawn
            return p == 1.0
        return self._uniform() < p

    def categorical(self, probs: np.ndarray) -> int:
        weights = checks.check_weights(probs)  # (V,) float64, with some mass
        nonzero = np.flatnonzero(weights)
        if nonzero.size == 1:
            return int(nonzero[0])
        cumulative = np.cumsum(weights)  # (V,)
        u = self._uniform() * cumulative[-1]
        # side="right" skips zero-probability entries (their cumulative value does not grow).
        index = int(np.searchsorted(cumulative, u, side="right"))
        # Rounding can push u onto the last cumulative value; fall back to the last token with mass.
        return min(index, int(nonzero[-1]))
