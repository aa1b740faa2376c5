"""This reference's refinements of the paper's DyTC, each behind a named `DyTCConfig` switch.

The paper's policy (`casspec_ref.dytc`, on `casspec_ref.dytc_estimates`) calls the pieces here
where a switch is on, and `DyTCConfig.paper()` turns every one off. What each changes, why,
and what it is worth: docs/method.md §4, "the paper vs this reference".

1. `optimistic_mean` (`optimistic_warmup`): a model draft's warm-up estimate.
2. `Outcome`, `outcome` (`margin_bins`, `match_bins`, `continuation_rate`): which estimate a
   drafted node's verdict teaches. The paper has one per draft; the refinements add a model
   draft's margin bins, a lookup's match lengths and a free draft's continuation rate.
3. `table_seconds` (`cost_table`): a forward's cost read from the per-size table.
4. `relax`, `Exploration` (`exploration`): an untested estimate moves back up, a stale tree size
   is tried again at the price of a budget.
5. `max_cascade_depth`: the seed article's cascade rules (off by default).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol

from casspec_ref.dytc_config import FREE_DRAFTS, PLD, DyTCConfig

if TYPE_CHECKING:
    from collections.abc import Mapping


# ------------------------------------------------------------------ 1. warm-up optimism
def optimistic_mean(prior: float, accepted: float, seen: int, warmup: int) -> float:
    """The warm-up estimate: the prior as one pseudo-outcome, the outcomes seen, and the
    `warmup - seen` still to come counted as accepted. A draft is tried until its own outcomes
    speak; it meets the running mean when the warm-up ends."""
    return (prior + accepted + warmup - seen) / (1.0 + warmup)


# ------------------------------------------------------------------ 2. what an outcome teaches
#: Bin edges of a model draft's margin (its probability of the token minus the best other's):
#: the target agreed with the int8 draft ~0.5 of the time below 0.02 and ~0.99 above 0.2.
MARGINS = (0.02, 0.05, 0.1, 0.2)
LONGEST_MATCH = 3  # a lookup's match of 3 tokens or more is one bin

Kind = Literal["draft", "next", "match", "margin"]


@dataclass(frozen=True)
class Outcome:
    """The identity of one acceptance estimate: whose (`draft`) and which `kind`:
    ``"draft"`` the draft's own (the paper's one estimate per draft), ``"next"`` a free draft
    continuing its own chain, ``"match"`` a lookup's first token after a match of `bin` tokens,
    ``"margin"`` a model draft's token whose margin falls in bin `bin` of `MARGINS`."""

    draft: str
    kind: Kind = "draft"
    bin: int = 0

    @property
    def label(self) -> str:
        """How a report names the estimate: ``pld``, ``pld next``, ``pld match 2``,
        ``l1 margin 3`` (for reading only: nothing parses it)."""
        if self.kind == "draft":
            return self.draft
        return f"{self.draft} {self.kind}" + (f" {self.bin}" if self.kind != "next" else "")

    def pooled(self) -> Outcome:
        """The draft's own estimate, which a match or a margin outcome teaches too (T(S, k) and
        the tokens not drafted yet count on it); a continuation is learned apart."""
        return Outcome(self.draft) if self.kind in ("match", "margin") else self


def outcome(
    config: DyTCConfig, draft: str, parent_draft: str, match: int = 0, margin: float | None = None
) -> Outcome:
    """The estimate a node drafted by `draft` below a node drafted by `parent_draft` teaches
    (`match`: the lookup match behind it, `margin`: a model-drafted token's margin), as far as
    the config's switches refine the paper's one estimate per draft."""
    free = draft in FREE_DRAFTS
    if free and parent_draft == draft and config.continuation_rate:
        return Outcome(draft, "next")
    if not free and margin is not None and config.margin_bins:
        return Outcome(draft, "margin", bisect.bisect(MARGINS, margin))
    if draft == PLD and match > 0 and config.match_bins:
        return Outcome(draft, "match", min(match, LONGEST_MATCH))
    return Outcome(draft)


def refined_outcomes(config: DyTCConfig, model_drafts: Iterable[str]) -> list[Outcome]:
    """Every refined estimate the switched-on refinements need, besides one per draft."""
    keys: list[Outcome] = []
    if config.margin_bins:
        keys += [Outcome(d, "margin", b) for d in model_drafts for b in range(len(MARGINS) + 1)]
    if config.continuation_rate:
        keys += [Outcome(d, "next") for d in FREE_DRAFTS]
    if config.match_bins:
        keys += [Outcome(PLD, "match", m) for m in range(1, LONGEST_MATCH + 1)]
    return keys


# ------------------------------------------------------------------ 3. the per-size cost table
def table_seconds(seconds: Mapping[int, float], tokens: int) -> float:
    """Seconds over `tokens` tokens read from the table of measured sizes: as measured, else
    linear between the measured neighbours, else extrapolated from the two largest sizes (never
    downwards). A CPU's fastest matmul form changes with the row count: no line fits it."""
    s = seconds
    if tokens in s:
        return s[tokens]
    sizes = sorted(s)
    i = bisect.bisect(sizes, tokens)  # sizes[i - 1] < tokens < sizes[i]
    if i == 0 or len(sizes) == 1:
        return s[sizes[0]]
    if i < len(sizes):
        lo, hi = sizes[i - 1], sizes[i]
        return s[lo] + (s[hi] - s[lo]) / (hi - lo) * (tokens - lo)
    lo, hi = sizes[-2], sizes[-1]
    return s[hi] + max((s[hi] - s[lo]) / (hi - lo), 0.0) * (tokens - hi)


# ------------------------------------------------------------------ 4. exploration
class Estimate(Protocol):
    """What `relax` reads and moves of an `AcceptanceEstimator`."""

    prior: float
    accepted: float
    count: int
    alpha: float


def relax(estimate: Estimate, rate: float) -> None:
    """A step without observations: an estimate below the prior or the draft's long-run mean
    moves `rate` of the way up to the higher one, so a draft switched off, or stuck below where
    it pays after a bad stretch, is tried again; one above both is not pulled down."""
    target = max(estimate.prior, (estimate.prior + estimate.accepted) / (1.0 + estimate.count))
    if estimate.alpha < target:
        estimate.alpha += rate * (target - estimate.alpha)


class Timings(Protocol):
    """What exploration reads of a `CostCurve`."""

    seconds: dict[int, float]

    def predict(self, tokens: int) -> float: ...

    def stale(self, tokens: int) -> bool: ...


@dataclass
class Exploration:
    """A tree size not timed lately (never, or during a load spike) is predicted at the cheapest
    size's cost while the budget can pay for being wrong. The budget earns `fraction` of every
    step's time and pays the predicted extra cost of a size so explored when it is verified, so
    exploration costs at most that fraction of the time."""

    fraction: float
    budget: float = 0.0  # seconds DyTC may still spend exploring sizes
    owed: float = 0.0  # what the tree just grown costs the budget when it is verified

    def cost(self, curve: Timings, size: int) -> float:
        """The predicted extra cost of `size` over the floor when it is stale and the budget can
        pay it (it is then explored), else 0."""
        extra = curve.predict(size) - min(curve.seconds.values())
        return extra if 0 < extra <= self.budget and curve.stale(size) else 0.0

    def verify_seconds(self, curve: Timings, size: int) -> float:
        """Predicted seconds of verifying `size` nodes: the floor for a size being explored."""
        if self.cost(curve, size) > 0:
            return min(curve.seconds.values())
        return curve.predict(size)

    def settle(self, step_seconds: float) -> None:
        """After a verified step: earn the budget's share of it, pay for an explored size."""
        self.budget += self.fraction * step_seconds - self.owed
        self.owed = 0.0


# ------------------------------------------------------------------ 5. the seed article's rules
def max_cascade_depth(n_layers: int, context_len: int, *, n_levels: int, config: DyTCConfig) -> int:
    """How many model draft levels DyTC may use (the seed article's rules, when enabled)."""
    if config.cascade_depth_rule:
        # K = min(3, log2(L / 12)), at least one level: a 30-layer model gets 1.
        n_levels = min(n_levels, max(1, min(3, int(math.log2(max(n_layers, 12) / 12)))))
    if config.long_context_drop and context_len > config.long_context:
        n_levels = max(0, n_levels - 1)
    return n_levels
