"""Exact enumeration: the law of a function's output over every outcome of its random draws.

A function that draws all of its randomness through a `RandomSource` (``bernoulli(prob)``,
``categorical(law)``) is run again and again under an `EnumeratingSource`. Each run replays a
forced prefix of decisions, takes the first option of every new decision and records the options
it did not take; those become the forced prefixes of later runs (a depth-first search of the
decision tree, pruning options of probability 0). The probability of a run is the product of its
decisions' probabilities, in float64 or exactly with `fractions.Fraction`.

The enumeration is only meaningful when the function is a function of its draws. Three checks
make randomness the source does not see a hard error (`HiddenRandomnessError`) instead of a wrong
law: every replay must draw the same kind of decision as the forced prefix says and consume the
whole prefix; the first runs are repeated and must give the same output; and the probabilities
of all outcomes must sum to 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import torch

from casspec_ref.sampling import RandomSource

Prob = float | Fraction
Law = dict[Hashable, Prob]

#: In float64, the probabilities of all outcomes must sum to 1 within this.
MASS_TOLERANCE = 1e-9

#: Ends the message when the replay of the very first run differs from it.
FIRST_CALL_HINT = (
    "; this replayed the first call: if the code draws on its first call only (module code run "
    "by a lazy import, a cache filled on first use), import or call it once before the check"
)


class NotCheckableError(RuntimeError):
    """The function cannot be judged: its law is not what the enumeration computes."""


class NonDeterministicFunctionError(NotCheckableError):
    """The enumerated function made different draws after the same decisions."""


class HiddenRandomnessError(NonDeterministicFunctionError):
    """The function uses randomness the enumerating source does not see."""

    PREFIX = "not checkable: randomness the oracle does not see"

    def __init__(self, detail: str, forced: tuple[tuple[str, int], ...] = ()) -> None:
        super().__init__(f"{self.PREFIX}: {detail}")
        #: The decisions replayed when it showed (to run that path again and locate it).
        self.forced = forced


class EnumerationBudgetError(ValueError):
    """The enumeration needs more runs than its budget allows: no law, and no verdict."""


@dataclass
class EnumerationStats:
    """What one `exact_law` call did: the runs it made and the mass of the branches it pruned."""

    runs: int = 0
    pruned_mass: float = 0.0


class EnumeratingSource:
    """A `RandomSource` that replays a forced prefix of choices, then takes the first option.

    It records, for every decision past the forced prefix, the options it did not take, so that
    `exact_law` can replay each of them. ``weight`` is the probability of the path taken.
    ``draws`` names each decision (for error messages); ``float_inputs`` counts the decisions
    whose probabilities arrived as floats (which matters in exact mode). ``names`` are the draws
    of the forced decisions in the earlier run, and ``hint`` ends the message of a replay that
    differs from it (both for error messages only). With ``prune_below`` > 0 (float64 only), a
    new decision takes its most probable option, and an untaken option whose path probability
    is below ``prune_below`` is not recorded: its mass is added to ``pruned``.
    """

    def __init__(
        self,
        forced: tuple[tuple[str, int], ...],
        exact: bool,
        names: tuple[str, ...] = (),
        hint: str = "",
        prune_below: float = 0.0,
    ) -> None:
        self.forced = forced
        self.prune_below = prune_below
        self.pruned: Prob = 0.0
        self.names = names
        self.hint = hint
        self.exact = exact
        # A decision is (kind, option): kind names the draw ("bernoulli", or "categorical/V"),
        # so that a replay that draws a different kind of decision is detected.
        self.taken: list[tuple[str, int]] = []
        self.untaken: list[list[tuple[str, int]]] = []
        self.draws: list[str] = []
        self.weight: Prob = Fraction(1) if exact else 1.0
        self.float_inputs = 0
        self.first_float_draw = ""

    def _number(self, value: Any, draw: str) -> Prob:
        if self.exact:
            if isinstance(value, Fraction | int) and not isinstance(value, bool):
                return Fraction(value)
            self.float_inputs += 1
            if not self.first_float_draw:
                self.first_float_draw = draw or f"#{len(self.taken) + 1}"
            return Fraction(float(value))
        return float(value)

    def _decide(self, kind: str, options: list[tuple[int, Prob]], draw: str) -> int:
        depth = len(self.taken)
        name = draw or kind
        if depth < len(self.forced):
            forced_kind, choice = self.forced[depth]
            matches = [prob for option, prob in options if option == choice]
            if forced_kind != kind or not matches:
                raise HiddenRandomnessError(
                    f"draw #{depth + 1} ({name}) differs from an earlier run after the same "
                    f"decisions (expected {self.earlier(depth)}{forced_kind} option {choice})"
                    + self.hint,
                    self.forced,
                )
            prob = matches[0]
            self.untaken.append([])
        elif self.prune_below > 0:
            probs = [p for _, p in options]
            best = probs.index(max(probs))
            choice, prob = options[best]
            floor = self.prune_below / self.weight if self.weight > 0 else math.inf
            if min(probs) >= floor:  # nothing to prune (the common case)
                del options[best]
                self.untaken.append([(kind, option) for option, _ in options])
            else:
                self.untaken.append(
                    [(kind, o) for i, (o, p) in enumerate(options) if p >= floor and i != best]
                )
                small = sum(p for i, p in enumerate(probs) if p < floor and i != best)
                self.pruned += self.weight * small
        else:
            choice, prob = options[0]
            self.untaken.append([(kind, option) for option, _ in options[1:]])
        self.taken.append((kind, choice))
        self.draws.append(name)
        self.weight = self.weight * prob
        return choice

    def earlier(self, depth: int) -> str:
        """The name of the forced decision at ``depth`` in the earlier run, when it has one."""
        if depth >= len(self.names) or self.names[depth] == self.forced[depth][0]:
            return ""
        return f"{self.names[depth]}: "

    def check_consumed(self) -> None:
        """Raise `HiddenRandomnessError` if the run ended before making its forced decisions."""
        depth = len(self.taken)
        if depth < len(self.forced):
            raise HiddenRandomnessError(
                f"a replay stopped after {depth} of the {len(self.forced)} draws an earlier run "
                f"made after the same decisions (draw #{depth + 1}, {self.earlier(depth)}"
                f"{self.forced[depth][0]}, was not made)" + self.hint,
                self.forced,
            )

    def bernoulli(self, prob: float | Fraction, draw: str = "") -> bool:
        p = self._number(prob, draw)
        if p < 0 or p > 1 or (isinstance(p, float) and math.isnan(p)):
            raise ValueError(f"bernoulli probability must be in [0, 1], got {prob}")
        options = [(option, w) for option, w in ((1, p), (0, 1 - p)) if w > 0]
        return self._decide("bernoulli", options, draw) == 1

    def categorical(self, probs: np.ndarray, draw: str = "") -> int:
        law = np.asarray(probs)
        if law.ndim != 1 or law.shape[0] == 0:
            raise ValueError(f"categorical needs a non-empty 1-D law, got shape {law.shape}")
        weights = [self._number(v, draw) for v in law]
        if any(w < 0 or (isinstance(w, float) and math.isnan(w)) for w in weights):
            raise ValueError(f"categorical law has negative or NaN entries: {list(law)}")
        total = sum(weights, Fraction(0) if self.exact else 0.0)
        if not total > 0:
            raise ValueError("categorical law has no mass")
        # Normalize as a sampler does (inverse CDF scaled by the total mass).
        options = [(i, w / total) for i, w in enumerate(weights) if w > 0]
        return self._decide(f"categorical/{law.shape[0]}", options, draw)


def _freeze(value: Any) -> Hashable:
    if isinstance(value, np.ndarray | torch.Tensor):
        value = value.tolist()
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def exact_law(
    fn: Callable[[RandomSource], Any],
    *,
    exact: bool = False,
    max_paths: int = 1_000_000,
    recheck: int = 0,
    on_run: Callable[[EnumeratingSource], None] | None = None,
    prune_below: float = 0.0,
    stats: EnumerationStats | None = None,
) -> Law:
    """The exact law of ``fn(rng)``'s output over every outcome of its random draws.

    ``fn`` must take all of its randomness from ``rng`` and be deterministic given the draws.
    Outputs are made hashable (lists and arrays become tuples). With ``exact=True`` the
    probabilities are `Fraction` (float inputs are converted exactly, as binary fractions).
    The first ``recheck`` runs are repeated to detect hidden randomness; ``on_run`` sees every
    finished run's source. With ``prune_below`` > 0 (float64 only), branches whose probability
    is below it are not run: the law returned then has mass 1 - ``stats.pruned_mass``, and the
    total variation to any law is off by at most half that mass. Raises `EnumerationBudgetError`
    when more than ``max_paths`` outcomes would be enumerated, and `HiddenRandomnessError` when
    ``fn`` is not a function of its draws.
    """
    if prune_below and exact:
        raise ValueError("pruning is for float64 laws; exact laws are never pruned")
    stats = stats if stats is not None else EnumerationStats()
    law: Law = {}
    # A forced prefix of decisions, and the names of their draws (for error messages).
    stack: list[tuple[tuple[tuple[str, int], ...], tuple[str, ...]]] = [((), ())]
    paths = 0
    while stack:
        forced, names = stack.pop()
        paths += 1
        if paths > max_paths:
            raise EnumerationBudgetError(
                f"more than max_paths={max_paths} outcomes; use smaller cases"
            )
        source = EnumeratingSource(forced, exact, names, prune_below=prune_below)
        key = _freeze(fn(source))
        source.check_consumed()
        if paths <= recheck:
            hint = FIRST_CALL_HINT if paths == 1 else ""
            again = EnumeratingSource(
                tuple(source.taken), exact, tuple(source.draws), hint, prune_below
            )
            again_key = _freeze(fn(again))
            again.check_consumed()
            if again_key != key or again.taken != source.taken or again.weight != source.weight:
                raise HiddenRandomnessError(
                    f"the same {len(source.taken)} draws gave {key!r} once and {again_key!r} "
                    "the next time",
                    tuple(source.taken),
                )
        if on_run is not None:
            on_run(source)
        law[key] = law.get(key, 0) + source.weight
        stats.runs += 1
        stats.pruned_mass += float(source.pruned)
        for depth in range(len(forced), len(source.taken)):
            for option in source.untaken[depth]:
                stack.append(((*source.taken[:depth], option), tuple(source.draws[: depth + 1])))
    total = sum(law.values(), Fraction(0) if exact else 0.0)
    if (total != 1) if exact else abs(float(total) + stats.pruned_mass - 1.0) > MASS_TOLERANCE:
        raise HiddenRandomnessError(
            f"the probabilities of all outcomes sum to {float(total):.6g}, not 1: the "
            "probabilities of some draws changed between runs"
        )
    return law


def total_variation(law_a: Law, law_b: Law) -> Prob:
    """Total-variation distance: half the L1 distance over the union of outcomes."""
    total: Any = 0
    for key in set(law_a) | set(law_b):
        total = total + abs(law_a.get(key, 0) - law_b.get(key, 0))
    result: Prob = total / 2
    return result
