"""This reference's refinements of the paper's DyTC: `RefinedDyTC` overrides named methods of
`casspec_ref.dytc.DyTC`, each behind a `DyTCConfig` switch; with every switch off
(`DyTCConfig.paper()`) it decides exactly as `DyTC` does. What each changes, why, and what it is
worth: docs/method.md §4.2.

1. `recycled_tokens`: a third free draft, the target's own successors of a token (`free_drafts`).
2. `optimistic_warmup`: a model draft's warm-up estimate (`optimistic_mean`, `estimator`).
3. `margin_bins`, `match_bins`, `continuation_rate`: which estimate a drafted node's verdict
   teaches (`outcome`); the paper has one per draft.
4. `cost_table`: a forward's cost read from the per-size table (`table_seconds`).
5. `exploration`: an untested estimate moves back up (`relax`), a stale timing is retaken and a
   stale tree size tried again at the price of a budget (`Exploration`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from casspec_ref.base import dytc_checks as checks
from casspec_ref.dytc import DyTC
from casspec_ref.dytc_config import FREE_DRAFTS, PLD, RECYCLE, DyTCConfig
from casspec_ref.dytc_estimates import AcceptanceEstimator, CostCurve, Outcome
from casspec_ref.dytc_tree import Expansion, TreeDrafter, TreeEstimate


# ------------------------------------------------------------------ 2. warm-up optimism
def optimistic_mean(prior: float, accepted: float, seen: int, warmup: int) -> float:
    """The warm-up estimate: the prior as one pseudo-outcome, the outcomes seen, and the
    `warmup - seen` still to come counted as accepted. A draft is tried until its own outcomes
    speak; it meets the running mean when the warm-up ends."""
    return (prior + accepted + warmup - seen) / (1.0 + warmup)


class OptimisticEstimator(AcceptanceEstimator):
    """An acceptance estimate whose warm-up is `optimistic_mean`."""

    def _warming_up(self) -> float:
        return optimistic_mean(self.prior, self.accepted, self.count, self.warmup)


# ------------------------------------------------------------------ 3. what an outcome teaches
#: Bin edges of a model draft's margin (its probability of the token minus the best other's):
#: the target agreed with the int8 draft ~0.5 of the time below 0.02 and ~0.99 above 0.2.
MARGINS = (0.02, 0.05, 0.1, 0.2)
LONGEST_MATCH = 3  # a lookup's match of 3 tokens or more is one bin


def pooled(key: Outcome) -> Outcome:
    """The draft's own estimate, which a match or a margin outcome teaches too (T(S, k) and the
    tokens not drafted yet count on it); a continuation is learned apart."""
    return Outcome(key.draft) if key.kind in ("match", "margin") else key


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


# ------------------------------------------------------------------ 4. the per-size cost table
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


class RefinedCostCurve(CostCurve):
    """A `CostCurve` read from its table (`table`, refinement `cost_table`) whose timings go
    stale: a size not measured in the last `horizon` steps (`tick` counts them) is re-timed,
    and a new timing replaces its estimate (refinement `exploration`)."""

    def __init__(self, weight: float = 0.3, horizon: float = math.inf, *, table: bool = False):
        checks.check_cost_curve(weight, horizon)
        super().__init__(weight)
        self.horizon, self.table = horizon, table
        self._last_seen: dict[int, int] = {}
        self._now = 0

    def tick(self) -> None:
        """One decoding step has passed."""
        self._now += 1

    def observe(self, tokens: int, seconds: float) -> None:
        super().observe(tokens, seconds)
        self._last_seen[tokens] = self._now

    def stale(self, tokens: int) -> bool:
        """True if `tokens` was never measured or not in the last `horizon` steps."""
        return tokens not in self._last_seen or self._now - self._last_seen[tokens] >= self.horizon

    def predict(self, tokens: int) -> float:
        if not self.table:
            return super().predict(tokens)
        checks.check_measured(len(self.seconds))
        return table_seconds(self.seconds, tokens)


# ------------------------------------------------------------------ 5. exploration
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


# ------------------------------------------------------------------ the refined policy
class RefinedDyTC(DyTC):
    """This reference's DyTC (`DyTCConfig()` by default): the paper's, with each method below
    overridden where its switch is on."""

    def __init__(self, drafts: Sequence[str], config: DyTCConfig | None = None) -> None:
        cfg = config if config is not None else DyTCConfig()
        super().__init__(drafts, cfg)
        self.refined = {key: self.estimator(key.draft) for key in refined_outcomes(cfg, drafts)}
        self.exploration = Exploration(cfg.explore_fraction) if cfg.exploration else None

    # -- 1. recycled tokens
    @property
    def free_drafts(self) -> tuple[str, ...]:
        return (PLD, RECYCLE) if self.config.recycled_tokens else (PLD,)

    # -- 2. warm-up optimism: a free draft costs no forward, needs no optimism to be tried, and
    # follows the EMA from its first outcome.
    def estimator(self, draft: str) -> AcceptanceEstimator:
        cfg = self.config
        if not cfg.optimistic_warmup:
            return super().estimator(draft)
        free, prior = draft in FREE_DRAFTS, self.prior(draft)
        kind = AcceptanceEstimator if free else OptimisticEstimator
        warmup = 0 if free else cfg.warmup
        return kind(prior, weight=cfg.ema_weight, window=cfg.window, warmup=warmup)

    # -- 3. finer outcomes, and the margin that picks one
    def outcome(
        self, draft: str, parent_draft: str, match: int = 0, margin: float | None = None
    ) -> Outcome:
        return outcome(self.config, draft, parent_draft, match, margin)

    def estimate(self, key: Outcome) -> AcceptanceEstimator:
        return self.alpha[key.draft] if key.kind == "draft" else self.refined[key]

    def estimates(self) -> dict[Outcome, AcceptanceEstimator]:
        return {**super().estimates(), **self.refined}

    def node_margin(self, drafter: TreeDrafter, node: int) -> float | None:
        return drafter.margin(node) if self.config.margin_bins else None

    def margins_known(self, draft: str) -> bool:
        """True once an outcome of model draft `draft` came with its margin (`margin_bins`)."""
        keys = [k for k in self.refined if k.kind == "margin" and k.draft == draft]
        return any(self.refined[k].count > 0 for k in keys)

    def chain_length(self, choice: Expansion) -> int:
        # Once the draft's margins are known, a chain planned k deep is drafted a token at a
        # time, so that the next plan values each token by its margin.
        return 1 if self.margins_known(choice.draft) else choice.k

    # -- 4. the cost table (and 5., stale timings)
    def cost_curve(self) -> CostCurve:
        cfg = self.config
        horizon = cfg.explore_horizon if cfg.exploration else math.inf
        return RefinedCostCurve(cfg.cost_weight, horizon, table=cfg.cost_table)

    # -- 5. exploration
    def verify_seconds(self, tree_size: int) -> float:
        if self.exploration is not None:  # a stale size the budget can pay for: the floor
            return self.exploration.verify_seconds(self.verify_cost, tree_size)
        return super().verify_seconds(tree_size)

    @property
    def explore_budget(self) -> float:
        """Seconds DyTC may still spend exploring tree sizes (0 without `exploration`)."""
        return self.exploration.budget if self.exploration is not None else 0.0

    def grow_best_first(
        self, tree: TreeEstimate, drafter: TreeDrafter, drafts: Sequence[str]
    ) -> None:
        super().grow_best_first(tree, drafter, drafts)
        if self.exploration is not None:  # `observe_step` pays for a size explored
            self.exploration.owed = self.exploration.cost(self.verify_cost, drafter.size())

    def observe_timings(
        self,
        verify_tokens: int,
        verify_seconds: float,
        draft_timings: Mapping[str, tuple[int, float]],
    ) -> None:
        if self.exploration is not None:
            spent = verify_seconds + sum(seconds for _, seconds in draft_timings.values())
            self.exploration.settle(spent)
        super().observe_timings(verify_tokens, verify_seconds, draft_timings)

    def observe_step(
        self,
        tested: Sequence[tuple[Outcome, bool]],
        verify_tokens: int,
        verify_seconds: float,
        draft_timings: Mapping[str, tuple[int, float]],
    ) -> None:
        # A finer outcome teaches the draft's own estimate too (`pooled`).
        taught = [*tested, *[(pooled(key), ok) for key, ok in tested if pooled(key) != key]]
        super().observe_step(taught, verify_tokens, verify_seconds, draft_timings)
        if self.exploration is not None:  # an untested estimate relaxes up
            keys = {key for key, _ in taught}
            for key, estimate in self.estimates().items():
                if key not in keys and estimate.count > 0:
                    relax(estimate, self.config.reexplore)
        for curve in [self.verify_cost, *self.draft_cost.values()]:
            if isinstance(curve, RefinedCostCurve):  # its timings age (`stale`)
                curve.tick()
