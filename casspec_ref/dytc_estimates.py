"""What the paper's DyTC learns online (docs/method.md §4.1, items 1-2): each draft's
acceptance estimate alpha (`AcceptanceEstimator`, keyed by an `Outcome`) and the seconds of a
forward by its size (`CostCurve`, the paper's linear model). The policy that reads them is
`casspec_ref.dytc`; the refinements' variants of both are in `casspec_ref.dytc_refinements`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from casspec_ref.base import dytc_checks as checks
from casspec_ref.dytc_config import FREE_DRAFTS, PLD, RECYCLE, DyTCConfig


# ------------------------------------------------------------------ acceptance estimates
@dataclass(frozen=True)
class Outcome:
    """Which acceptance estimate a drafted node's verdict teaches. The paper keeps one per draft
    (kind ``"draft"``); the refinements add finer kinds (`dytc_refinements.outcome`)."""

    draft: str
    kind: str = "draft"
    bin: int = 0

    @property
    def label(self) -> str:
        """How a report names it: ``pld``, ``pld next``, ``pld match 2``, ``l1 margin 3``."""
        if self.kind == "draft":
            return self.draft
        return f"{self.draft} {self.kind}" + (f" {self.bin}" if self.kind != "next" else "")


class AcceptanceEstimator:
    """alpha of one draft: for the first `warmup` outcomes the running mean with the prior as one
    pseudo-outcome, then ``a <- (1 - weight) a + weight mean(last window outcomes)``."""

    def __init__(self, prior: float, *, weight: float, window: int, warmup: int) -> None:
        checks.check_prior(prior)
        self.prior, self.weight, self.warmup = float(prior), weight, warmup
        self.count, self.accepted = 0, 0.0  # outcomes seen, and their sum
        self._recent: deque[float] = deque(maxlen=window)
        self.alpha = self._warming_up()

    def _warming_up(self) -> float:
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
    """The linear latency model ``b0 + b1 T``, fitted by least squares to the measured sizes
    (one point each), never below the cheapest forward measured."""
    n = len(seconds)
    mean_t, mean_s = sum(seconds) / n, sum(seconds.values()) / n
    spread = sum((t - mean_t) ** 2 for t in seconds)
    covariance = sum((t - mean_t) * (s - mean_s) for t, s in seconds.items())
    slope = covariance / spread if spread > 0 else 0.0
    return max(mean_s + slope * (tokens - mean_t), min(seconds.values()))


class CostCurve:
    """Seconds of one forward by the tokens it processes: one running estimate per size (the
    first timing, then an EMA of weight `weight`), predicted by `linear_seconds`."""

    def __init__(self, weight: float = 0.3) -> None:
        checks.check_cost_curve(weight, float("inf"))
        self.weight = weight
        self.seconds: dict[int, float] = {}

    def __len__(self) -> int:
        return len(self.seconds)

    def observe(self, tokens: int, seconds: float) -> None:
        """Record one forward over `tokens` tokens that took `seconds`."""
        checks.check_timing(tokens, seconds)
        old = self.previous(tokens)
        self.seconds[tokens] = seconds if old is None else old + self.weight * (seconds - old)

    def previous(self, tokens: int) -> float | None:
        """The running estimate a new timing of `tokens` updates (None: it starts one)."""
        return None if self.stale(tokens) else self.seconds[tokens]

    def stale(self, tokens: int) -> bool:
        """True if `tokens` needs a (new) timing: the paper's curve, if it was never measured."""
        return tokens not in self.seconds

    def predict(self, tokens: int) -> float:
        """Predicted seconds of a forward over `tokens` tokens."""
        checks.check_measured(len(self.seconds))
        return linear_seconds(self.seconds, tokens)


# ------------------------------------------------------------------ the policy's state
class DyTCState:
    """What DyTC knows: `alpha` per draft, `verify_cost` (the target's forward by its size) and
    `draft_cost` (one call of each draft), and the predictions its decisions read. Drafts are
    named: the DSIA levels' plan names, `PLD` and `RECYCLE` (docs/method.md §4.1, items 1-2)."""

    def __init__(self, drafts: Sequence[str], config: DyTCConfig | None = None) -> None:
        self.drafts, self.config = list(drafts), config or DyTCConfig.paper()
        checks.check_draft_names(self.drafts, FREE_DRAFTS)
        names = [*self.drafts, *FREE_DRAFTS]
        self.alpha = {name: self.estimator(name) for name in names}
        self.verify_cost = self.cost_curve()
        self.draft_cost = {name: self.cost_curve() for name in names}
        self._seen: set[str] = set()  # model drafts whose first (setup-paying) timing is gone

    def prior(self, draft: str) -> float:
        """`draft`'s acceptance estimate before any outcome."""
        cfg = self.config
        prior = {PLD: cfg.prior_pld_alpha, RECYCLE: cfg.prior_recycle_alpha}.get(draft)
        return cfg.prior_alpha if prior is None else prior

    def estimator(self, draft: str) -> AcceptanceEstimator:
        """A new acceptance estimate for `draft`, at its prior."""
        cfg = self.config
        return AcceptanceEstimator(
            self.prior(draft), weight=cfg.ema_weight, window=cfg.window, warmup=cfg.warmup
        )

    def cost_curve(self) -> CostCurve:
        """A new, empty cost curve."""
        return CostCurve(self.config.cost_weight)

    def estimate(self, key: Outcome) -> AcceptanceEstimator:
        """The estimator behind `key`: the paper has one per draft."""
        return self.alpha[key.draft]

    def estimates(self) -> dict[Outcome, AcceptanceEstimator]:
        """Every estimator, by its `Outcome`."""
        return {Outcome(draft): estimate for draft, estimate in self.alpha.items()}

    def ready(self) -> bool:
        """True once a plain step has been timed, so that costs can be compared to it."""
        return len(self.verify_cost) > 0

    def step_seconds(self) -> float:
        """Predicted time of a plain decoding step (a tree of the root only)."""
        return max(self.verify_cost.predict(1), 1e-9)

    def verify_seconds(self, tree_size: int) -> float:
        """Predicted seconds of verifying `tree_size` nodes in one target forward."""
        return self.verify_cost.predict(tree_size)

    def untimed(self, drafts: Sequence[str]) -> list[str]:
        """The model drafts among `drafts` whose cost needs a timing (`CostCurve.stale`): each is
        probed before anything is planned."""
        return [d for d in drafts if d not in FREE_DRAFTS and self.draft_cost[d].stale(1)]

    def draft_seconds(self, draft: str) -> float:
        """Predicted seconds of one single-token call of `draft` (0 for an untimed free draft)."""
        if len(self.draft_cost[draft]) == 0:
            return 0.0 if draft in FREE_DRAFTS else self.step_seconds()
        return self.draft_cost[draft].predict(1)

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
        self.verify_cost.observe(verify_tokens, verify_seconds)
        for name, (calls, seconds) in draft_timings.items():
            if calls < 1 or name not in self.draft_cost:
                continue
            if name not in self._seen and name not in FREE_DRAFTS:
                self._seen.add(name)
                continue
            self.draft_cost[name].observe(1, seconds / calls)
