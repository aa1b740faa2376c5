"""What DyTC learns online, and what it predicts from it: each draft's acceptance estimate
alpha (`AcceptanceEstimator`), the seconds of a forward by its size (`CostCurve`, the paper's
linear model), and `DyTCEstimates`, the policy's state built from them. The policy's decisions
are `casspec_ref.dytc`, which extends `DyTCEstimates`.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from casspec_ref.base import dytc_checks as checks
from casspec_ref.dytc_config import FREE_DRAFTS, PLD, RECYCLE, DyTCConfig
from casspec_ref.dytc_refinements import (
    Exploration,
    Outcome,
    optimistic_mean,
    refined_outcomes,
    table_seconds,
)


# ------------------------------------------------------------------ acceptance estimates
class AcceptanceEstimator:
    """Online acceptance estimate `alpha` of one draft: for the first `warmup` outcomes the
    running mean with the prior as one pseudo-outcome (`optimistic`: the optimistic mean,
    `dytc_refinements.optimistic_mean`), then ``a <- (1 - weight) a + weight mean(window)``."""

    def __init__(
        self, prior: float, *, weight: float, window: int, warmup: int, optimistic: bool = False
    ) -> None:
        checks.check_prior(prior)
        self.prior, self.weight, self.warmup = float(prior), weight, warmup
        self.optimistic = optimistic
        self.count, self.accepted = 0, 0.0  # outcomes seen, and their sum
        self._recent: deque[float] = deque(maxlen=window)
        self.alpha = self._warming_up()

    def _warming_up(self) -> float:
        if self.optimistic:
            return optimistic_mean(self.prior, self.accepted, self.count, self.warmup)
        return (self.prior + self.accepted) / (1.0 + self.count)

    def observe(self, accepted: float) -> None:
        """Record one outcome: 1.0 accepted, 0.0 rejected (fractions for averaged events)."""
        checks.check_outcome(accepted)
        self.count += 1
        self.accepted += accepted
        self._recent.append(float(accepted))
        if self.count <= self.warmup:
            self.alpha = self._warming_up()
        else:
            window_mean = sum(self._recent) / len(self._recent)
            self.alpha = (1.0 - self.weight) * self.alpha + self.weight * window_mean


# ------------------------------------------------------------------ the cost model
def linear_seconds(seconds: Mapping[int, float], tokens: int) -> float:
    """The paper's linear latency model ``b0 + b1 T``, fitted by least squares to the measured
    sizes (one point each), never below the cheapest forward measured."""
    n = len(seconds)
    mean_t, mean_s = sum(seconds) / n, sum(seconds.values()) / n
    spread = sum((t - mean_t) ** 2 for t in seconds)
    covariance = sum((t - mean_t) * (s - mean_s) for t, s in seconds.items())
    slope = covariance / spread if spread > 0 else 0.0
    return max(mean_s + slope * (tokens - mean_t), min(seconds.values()))


class CostCurve:
    """Seconds of one forward by the number of tokens it processes, learned online: one running
    estimate per size (the first timing, then an EMA of weight `weight`), predicted by the linear
    model (`table`: read from the table, `dytc_refinements.table_seconds`). A size not measured in
    the last `horizon` steps is `stale`, and a new timing replaces its estimate."""

    def __init__(self, weight: float = 0.3, horizon: float = math.inf, *, table: bool = False):
        checks.check_cost_curve(weight, horizon)
        self.weight, self.horizon, self.table = weight, horizon, table
        self.seconds: dict[int, float] = {}
        self._last_seen: dict[int, int] = {}
        self._now = 0

    def __len__(self) -> int:
        return len(self.seconds)

    def tick(self) -> None:
        """One decoding step has passed."""
        self._now += 1

    def observe(self, tokens: int, seconds: float) -> None:
        """Record one forward over `tokens` tokens that took `seconds`."""
        checks.check_timing(tokens, seconds)
        old = None if self.stale(tokens) else self.seconds.get(tokens)
        self.seconds[tokens] = seconds if old is None else old + self.weight * (seconds - old)
        self._last_seen[tokens] = self._now

    def stale(self, tokens: int) -> bool:
        """True if `tokens` was never measured or not in the last `horizon` steps."""
        return tokens not in self._last_seen or self._now - self._last_seen[tokens] >= self.horizon

    def predict(self, tokens: int) -> float:
        """Predicted seconds of a forward over `tokens` tokens."""
        checks.check_measured(len(self.seconds))
        if self.table:
            return table_seconds(self.seconds, tokens)
        return linear_seconds(self.seconds, tokens)


# ------------------------------------------------------------------ the policy's state
@dataclass
class DyTCEstimates:
    """DyTC's online state and its predictions. Drafts are named: the DSIA levels' plan names,
    plus `PLD` and `RECYCLE`. `alpha` holds the paper's estimate per draft, `refined` the finer
    ones the refinements switched on learn (keyed by `Outcome`); `verify_cost` times the target's
    forward by its size, `draft_cost` one call of each draft."""

    drafts: Sequence[str]
    config: DyTCConfig = field(default_factory=DyTCConfig)

    def __post_init__(self) -> None:
        cfg = self.config
        checks.check_draft_names(self.drafts, FREE_DRAFTS)
        names = [*self.drafts, *FREE_DRAFTS]
        self.alpha = {name: self._estimator(name) for name in names}
        keys = refined_outcomes(cfg, self.drafts)
        self.refined = {key: self._estimator(key.draft) for key in keys}
        horizon = cfg.explore_horizon if cfg.exploration else math.inf
        self.verify_cost = CostCurve(cfg.cost_weight, horizon, table=cfg.cost_table)
        self.draft_cost = {
            n: CostCurve(cfg.cost_weight, horizon, table=cfg.cost_table) for n in names
        }
        self.exploration = Exploration(cfg.explore_fraction) if cfg.exploration else None
        self._seen: set[str] = set()

    def _estimator(self, draft: str) -> AcceptanceEstimator:
        cfg, free = self.config, draft in FREE_DRAFTS
        prior = {PLD: cfg.prior_pld_alpha, RECYCLE: cfg.prior_recycle_alpha}.get(draft)
        prior = cfg.prior_alpha if prior is None else prior
        # Refinement `optimistic_warmup`: a model draft starts optimistic; a free draft costs no
        # forward, needs no optimism to be tried, and follows the EMA from its first outcome.
        warmup = 0 if cfg.optimistic_warmup and free else cfg.warmup
        optimistic = cfg.optimistic_warmup and not free
        return AcceptanceEstimator(
            prior, weight=cfg.ema_weight, window=cfg.window, warmup=warmup, optimistic=optimistic
        )

    def estimate(self, key: Outcome) -> AcceptanceEstimator:
        """The estimator behind `key`: the draft's own (`alpha`) or a refined one."""
        return self.alpha[key.draft] if key.kind == "draft" else self.refined[key]

    def estimates(self) -> dict[Outcome, AcceptanceEstimator]:
        """Every estimator, by its `Outcome`: the drafts' own, then the refined ones."""
        return {**{Outcome(d): e for d, e in self.alpha.items()}, **self.refined}

    def margins_known(self, draft: str) -> bool:
        """True once an outcome of model draft `draft` came with its margin (`margin_bins`)."""
        keys = [k for k in self.refined if k.kind == "margin" and k.draft == draft]
        return any(self.refined[k].count > 0 for k in keys)

    def ready(self) -> bool:
        """True once a plain step has been timed, so that costs can be compared to it."""
        return len(self.verify_cost) > 0

    def step_seconds(self) -> float:
        """Predicted time of a plain decoding step (a tree of the root only)."""
        return max(self.verify_cost.predict(1), 1e-9)

    def verify_seconds(self, tree_size: int) -> float:
        """Predicted seconds of verifying `tree_size` nodes (refinement `exploration`: a stale
        size the budget can pay for is predicted at the floor)."""
        if self.exploration is not None:
            return self.exploration.verify_seconds(self.verify_cost, tree_size)
        return self.verify_cost.predict(tree_size)

    @property
    def explore_budget(self) -> float:
        """Seconds DyTC may still spend exploring tree sizes (0 without `exploration`)."""
        return self.exploration.budget if self.exploration is not None else 0.0

    def untimed(self, drafts: Sequence[str]) -> list[str]:
        """The model drafts among `drafts` whose cost was never measured or is stale (re-probed)."""
        return [d for d in drafts if d not in FREE_DRAFTS and self.draft_cost[d].stale(1)]

    def draft_seconds(self, draft: str) -> float:
        """Predicted seconds of one single-token call of `draft` (0 for an untimed free draft)."""
        curve = self.draft_cost[draft]
        if len(curve) == 0:
            return 0.0 if draft in FREE_DRAFTS else self.step_seconds()
        return curve.predict(1)

    def cost(self, draft: str) -> float:
        """c of a draft: one call's predicted seconds over a plain step's."""
        return self.draft_seconds(draft) / self.step_seconds()

    def observe_timings(
        self,
        verify_tokens: int,
        verify_seconds: float,
        draft_timings: Mapping[str, tuple[int, float]],
    ) -> None:
        """Learn one step's costs: the target forward's size and seconds; per draft, ``(calls,
        total seconds)`` spent drafting (a model draft's first timing pays one-time setup, an
        int8 weight copy or a cast: discarded, so the draft is probed once more)."""
        if self.exploration is not None:
            spent = verify_seconds + sum(seconds for _, seconds in draft_timings.values())
            self.exploration.settle(spent)
        self.verify_cost.observe(verify_tokens, verify_seconds)
        for name, (calls, seconds) in draft_timings.items():
            if calls < 1 or name not in self.draft_cost:
                continue
            if name not in self._seen and name not in FREE_DRAFTS:
                self._seen.add(name)
                continue
            self.draft_cost[name].observe(1, seconds / calls)
