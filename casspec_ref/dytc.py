"""DyTC, the dynamic tree cascade: the estimates and rules that decide what to draft.

Scope: CAS-Spec's dynamic tree cascade (docs/method.md §4; paper arXiv 2510.26843, the DyTC
section), written as small, separately testable pieces:

- `AcceptanceEstimator`: an online acceptance estimate alpha per draft configuration. After a
  warm-up (plain running mean, started from a prior), it moves as an exponential moving average
  ``a <- (1 - w) * a + w * mean(last `window` observations)``. Public notes on the paper give
  ``w = 0.3, window = 20, warm-up = 20``; the seed article's ``a <- 0.2 * current + 0.8 * a`` is
  ``w = 0.2, window = 1``. Both are parameters of `DyTCConfig`.
- `LatencyModel`: the seed article's ``latency = b0 + b1 * seq_len + b2 * depth`` per
  configuration, fitted online by (lightly ridge-regularized) least squares. Deviation: we read
  ``depth`` as the number of tokens the forward processes (the path length fed to a draft, the tree
  size for the target's verification), because that is what varies between calls of one
  configuration; the layer depth of a configuration is a constant absorbed into ``b0``. Old
  timings are forgotten exponentially (a shared CPU's load drifts) and a prediction is never
  below the fastest timing seen. The paper's Bayesian linear regression on roofline features is
  not reproduced.
- `t_score`: the paper's choice of draft S and length k at a leaf,
  ``T(S,k) = [a_S (1 - a_S^k) / (1 - a_S) + a_S^k a_PLD] / (c_S k + c_PLD)``.
- `ewif_chain`, `expected_tree_tokens`, `tree_ewif`: the expected walltime improvement factor of a
  chain (docs/method.md §1) and of a tree under i.i.d. acceptance; the tree stop rule keeps growing
  while the predicted tree EWIF improves (our reconstruction: the paper's exact rule was not
  available to us).
- `max_cascade_depth`: the seed article's rules of thumb as options, K = min(3, log2(L / 12))
  model levels and one level fewer above 512 tokens of context.
- `DyTCPolicy`: the mutable state one generation carries (estimates, latency models) and the
  growth decision `plan_expansion`, used by the speculative loop (`speculative.py`).

Costs are in seconds inside the policy and in target-forward units (c) in the formulas, exactly as
the paper writes them. Nothing here touches a model: the loop measures and reports, DyTC decides.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

#: The name the prompt-lookup draft is registered under in a `DyTCPolicy`.
PLD = "pld"


@dataclass(frozen=True)
class DyTCConfig:
    """Every DyTC knob, with the reconstruction's defaults.

    Attributes:
        ema_weight: w in ``a <- (1 - w) a + w mean(window)``, in (0, 1].
        window: how many recent observations the EMA averages, >= 1.
        warmup: observations before the EMA starts (running mean until then), >= 0.
        prior_alpha: the estimate before any observation, in [0, 1] (the seed article suggests
            starting the acceptance threshold at 0.6-0.7).
        prior_pld_alpha: the prior of the prompt-lookup draft, in [0, 1].
        max_k: the longest chain one expansion drafts, >= 1.
        max_tree_size: the most nodes a tree may have, root included, >= 1.
        max_depth: the deepest node allowed (root = depth 0), >= 1.
        siblings: how many children (the top-P tokens) a model draft proposes at the leaf it
            expands, in the same forward, >= 1 (1 = a chain).
        confidence_weight: how a model-drafted node's estimate mixes the draft's own probability
            of its token with the level's alpha (1 = the draft confidence only), in [0, 1].
        min_gain: grow the tree only while the predicted EWIF improves by this factor, >= 1.
        cascade_depth_rule: apply K = min(3, log2(n_layers / 12)) model levels (seed article).
        long_context_drop: use one model level fewer above `long_context` tokens (seed article).
        long_context: the context length that triggers `long_context_drop`.
        ridge: the ridge term of the latency least squares, > 0 (keeps the fit defined when
            seq_len or depth never vary).
        latency_forgetting: the forgetting factor of the latency least squares, in (0, 1]
            (1 = every timing weighs the same; below 1 recent timings weigh more).
        reexplore: per step in which a draft was not tested, its acceptance estimate moves this
            fraction of the way back to its prior, in [0, 1) (our addition: a draft whose
            estimate fell is never proposed, so without it its estimate could never recover
            when the text changes, e.g. from free answers to copying a passage).
    """

    ema_weight: float = 0.3
    window: int = 20
    warmup: int = 20
    prior_alpha: float = 0.6
    prior_pld_alpha: float = 0.5
    max_k: int = 8
    max_tree_size: int = 32
    max_depth: int = 16
    siblings: int = 1
    confidence_weight: float = 0.5
    min_gain: float = 1.0
    cascade_depth_rule: bool = False
    long_context_drop: bool = False
    long_context: int = 512
    ridge: float = 1e-6
    latency_forgetting: float = 0.98
    reexplore: float = 0.02

    def __post_init__(self) -> None:
        checks = [
            ("ema_weight", 0.0 < self.ema_weight <= 1.0, "in (0, 1]"),
            ("window", self.window >= 1, ">= 1"),
            ("warmup", self.warmup >= 0, ">= 0"),
            ("prior_alpha", 0.0 <= self.prior_alpha <= 1.0, "in [0, 1]"),
            ("prior_pld_alpha", 0.0 <= self.prior_pld_alpha <= 1.0, "in [0, 1]"),
            ("max_k", self.max_k >= 1, ">= 1"),
            ("max_tree_size", self.max_tree_size >= 1, ">= 1"),
            ("max_depth", self.max_depth >= 1, ">= 1"),
            ("siblings", self.siblings >= 1, ">= 1"),
            ("confidence_weight", 0.0 <= self.confidence_weight <= 1.0, "in [0, 1]"),
            ("min_gain", self.min_gain >= 1.0, ">= 1"),
            ("long_context", self.long_context >= 1, ">= 1"),
            ("ridge", self.ridge > 0.0, "> 0"),
            ("latency_forgetting", 0.0 < self.latency_forgetting <= 1.0, "in (0, 1]"),
            ("reexplore", 0.0 <= self.reexplore < 1.0, "in [0, 1)"),
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise ValueError(
                    f"DyTCConfig.{name}={getattr(self, name)!r} is invalid: allowed {allowed}"
                )


class AcceptanceEstimator:
    """Online acceptance estimate of one draft configuration (warm-up, then windowed EMA)."""

    def __init__(self, prior: float, *, weight: float, window: int, warmup: int) -> None:
        if not 0.0 <= prior <= 1.0:
            raise ValueError(f"prior={prior!r} is invalid: allowed is a probability in [0, 1]")
        self.prior = float(prior)
        self.alpha = float(prior)
        self.weight = weight
        self.warmup = warmup
        self.count = 0
        self._sum = 0.0
        self._recent: deque[float] = deque(maxlen=window)

    def observe(self, accepted: float) -> None:
        """Record one outcome: 1.0 accepted, 0.0 rejected (fractions for averaged events)."""
        if not 0.0 <= accepted <= 1.0:
            raise ValueError(f"an acceptance observation must lie in [0, 1], got {accepted!r}")
        self.count += 1
        self._sum += accepted
        self._recent.append(float(accepted))
        if self.count <= self.warmup:
            # Warm-up: a running mean in which the prior counts as one pseudo-observation, so
            # that one early rejection cannot drive the estimate to zero and switch a draft off.
            self.alpha = (self.prior + self._sum) / (1.0 + self.count)
        else:
            window_mean = sum(self._recent) / len(self._recent)
            self.alpha = (1.0 - self.weight) * self.alpha + self.weight * window_mean

    def relax(self, rate: float) -> None:
        """Move the estimate `rate` of the way back to the prior (a step without observations)."""
        self.alpha += rate * (self.prior - self.alpha)


class LatencyModel:
    """``latency = b0 + b1 * seq_len + b2 * depth`` for one configuration, by online least squares.

    The normal equations are accumulated (3 x 3), so each observation costs O(1) and the fit is
    exact least squares over everything seen, plus a tiny ridge term that keeps it defined while
    seq_len or depth have not varied yet.
    """

    def __init__(self, ridge: float = 1e-6, forgetting: float = 1.0) -> None:
        if ridge <= 0:
            raise ValueError(f"ridge={ridge!r} is invalid: allowed is > 0")
        if not 0.0 < forgetting <= 1.0:
            raise ValueError(f"forgetting={forgetting!r} is invalid: allowed is in (0, 1]")
        self.ridge = ridge
        self.forgetting = forgetting
        self.count = 0
        self.fastest = math.inf
        self._xtx = np.zeros((3, 3))
        self._xty = np.zeros(3)
        self._coef: np.ndarray | None = None

    @staticmethod
    def _features(seq_len: float, depth: float) -> np.ndarray:
        # seq_len in thousands keeps the normal equations well conditioned next to depth.
        return np.array([1.0, seq_len / 1000.0, float(depth)])

    def observe(self, seq_len: int, depth: int, seconds: float) -> None:
        """Record one measured forward: context length, tokens processed, wall time."""
        if seconds < 0 or not math.isfinite(seconds):
            raise ValueError(f"a latency must be a finite number of seconds >= 0, got {seconds!r}")
        x = self._features(seq_len, depth)
        # Exponential forgetting (recursive least squares): on a shared machine old timings
        # describe another load; 1.0 is plain least squares over everything.
        self._xtx = self.forgetting * self._xtx + np.outer(x, x)
        self._xty = self.forgetting * self._xty + x * seconds
        self.count += 1
        self.fastest = min(self.fastest, seconds)
        self._coef = None

    @property
    def coefficients(self) -> tuple[float, float, float]:
        """(b0, b1, b2) with b1 per token of context and b2 per token processed."""
        if self._coef is None:
            self._coef = np.linalg.solve(self._xtx + self.ridge * np.eye(3), self._xty)
        b0, b1k, b2 = (float(v) for v in self._coef)
        return b0, b1k / 1000.0, b2

    def predict(self, seq_len: int, depth: int) -> float:
        """Predicted seconds, never below the fastest timing observed (a noisy fit can
        extrapolate to zero or below, which would make every draft look free or infinitely
        expensive)."""
        if self.count == 0:
            raise ValueError("LatencyModel.predict needs at least one observation")
        b0, b1, b2 = self.coefficients
        return max(self.fastest, b0 + b1 * seq_len + b2 * depth)


def geometric_tokens(alpha: float, k: int) -> float:
    """sum_{i=1..k} alpha^i: expected accepted tokens of a k-chain under i.i.d. acceptance."""
    if k < 0:
        raise ValueError(f"k={k} is invalid: allowed is >= 0")
    return sum(alpha**i for i in range(1, k + 1))


def t_score(alpha_s: float, k: int, c_s: float, alpha_pld: float, c_pld: float) -> float:
    """The paper's T(S, k): expected tokens per unit cost of drafting k tokens with S, then PLD.

    ``T = [a_S (1 - a_S^k) / (1 - a_S) + a_S^k a_PLD] / (c_S k + c_PLD)``; the first term is
    written as the sum it equals so that a_S = 1 needs no special case.
    """
    if k < 1:
        raise ValueError(f"k={k} is invalid: allowed is >= 1")
    denominator = c_s * k + c_pld
    if denominator <= 0:
        raise ValueError(f"c_S * k + c_PLD must be > 0, got {denominator!r}")
    return (geometric_tokens(alpha_s, k) + alpha_s**k * alpha_pld) / denominator


def ewif_chain(alpha: float, k: int, c: float) -> float:
    """EWIF of one draft proposing k tokens: (1 - alpha^(k+1)) / ((1 - alpha) (c k + 1))."""
    return (1.0 + geometric_tokens(alpha, k)) / (c * k + 1.0)


def expected_tree_tokens(parents: Sequence[int], accept: Sequence[float]) -> float:
    """Expected tokens one step commits (bonus included) for a tree under i.i.d. acceptance.

    ``parents[i]`` is node i's parent (node 0 is the root, ``parents[0]`` is ignored) and
    ``accept[i]`` the probability that node i is accepted given its parent was; siblings are
    mutually exclusive (at most one child of a node is followed). The expectation is
    ``1 + sum_i P(path to i accepted)``: the bonus token plus every accepted node.
    """
    if len(parents) != len(accept):
        raise ValueError(f"parents ({len(parents)}) and accept ({len(accept)}) differ in length")
    reach = [1.0] * len(parents)
    for i in range(1, len(parents)):
        if not 0 <= parents[i] < i:
            raise ValueError(f"node {i} has parent {parents[i]}: parents must precede children")
        reach[i] = reach[parents[i]] * accept[i]
    return 1.0 + sum(reach[1:])


def tree_ewif(
    expected_tokens: float, draft_cost: float, verify_cost: float, step_cost: float
) -> float:
    """EWIF of one tree step: tokens per second relative to a plain step (one token per step_cost).

    With draft_cost = c k, verify_cost = 1 and step_cost = 1 this is `ewif_chain`.
    """
    total = draft_cost + verify_cost
    if total <= 0 or step_cost <= 0:
        raise ValueError("costs must be > 0 to form an EWIF")
    return expected_tokens * step_cost / total


def max_cascade_depth(n_layers: int, context_len: int, *, n_levels: int, config: DyTCConfig) -> int:
    """How many model draft levels DyTC may use (the seed article's rules, when enabled)."""
    levels = n_levels
    if config.cascade_depth_rule:
        # K = min(3, log2(L / 12)), at least one level: a 30-layer model gets 1.
        levels = min(levels, max(1, min(3, int(math.log2(max(n_layers, 12) / 12)))))
    if config.long_context_drop and context_len > config.long_context:
        levels = max(0, levels - 1)
    return levels


@dataclass
class Expansion:
    """One growth decision: draft `k` tokens with `draft` from tree node `leaf`."""

    leaf: int
    draft: str
    k: int
    predicted_ewif: float


@dataclass
class DyTCPolicy:
    """The online state of DyTC for one generation, and its growth rule.

    Drafts are named (the plan names of the DSIA levels and `PLD`). The loop reports what it
    measures (`observe_*`) and asks `plan_expansion` what to do next with a partial tree.
    """

    drafts: Sequence[str]
    config: DyTCConfig = field(default_factory=DyTCConfig)

    def __post_init__(self) -> None:
        cfg = self.config
        self.alpha: dict[str, AcceptanceEstimator] = {}
        for name in [*self.drafts, PLD]:
            prior = cfg.prior_pld_alpha if name == PLD else cfg.prior_alpha
            self.alpha[name] = AcceptanceEstimator(
                prior, weight=cfg.ema_weight, window=cfg.window, warmup=cfg.warmup
            )
        forget = cfg.latency_forgetting
        self.draft_latency = {name: LatencyModel(cfg.ridge, forget) for name in [*self.drafts, PLD]}
        self.verify_latency = LatencyModel(cfg.ridge, forget)
        self._seen: set[str] = set()

    # -- what the loop reports -------------------------------------------------------------
    def observe_acceptance(self, draft: str, outcomes: Iterable[bool]) -> None:
        """Record, per drafted node whose parent was accepted, whether the node was accepted."""
        for accepted in outcomes:
            self.alpha[draft].observe(1.0 if accepted else 0.0)

    def end_step(self, tested: Iterable[str]) -> None:
        """After a step: the drafts not tested in it relax towards their prior (`reexplore`)."""
        tested = set(tested)
        for name, estimator in self.alpha.items():
            if name not in tested and estimator.count > 0:
                estimator.relax(self.config.reexplore)

    def observe_draft(self, draft: str, seq_len: int, tokens: int, seconds: float) -> None:
        """Record one draft forward (or one prompt lookup) and its wall time.

        The first timing of each draft is discarded: it pays one-time setup (the int8 weight
        copy of a quantized level, the cast of a low-precision level) that would otherwise
        inflate the least-squares fit for many steps. The draft is then probed once more.
        """
        if draft not in self._seen:
            self._seen.add(draft)
            return
        self.draft_latency[draft].observe(seq_len, tokens, seconds)

    def observe_verify(self, seq_len: int, tree_size: int, seconds: float) -> None:
        """Record one target forward over `tree_size` tokens after `seq_len` cached ones."""
        self.verify_latency.observe(seq_len, tree_size, seconds)

    # -- what DyTC predicts ----------------------------------------------------------------
    def ready(self) -> bool:
        """True once a plain step has been timed, so that costs can be compared to it."""
        return self.verify_latency.count > 0

    def step_seconds(self, seq_len: int) -> float:
        """Predicted time of a plain decoding step (a tree of the root only)."""
        return max(self.verify_latency.predict(seq_len, 1), 1e-9)

    def cost(self, draft: str, seq_len: int) -> float:
        """c of a draft: predicted seconds of one single-token draft forward / a plain step.

        A draft never timed yet counts as costing one plain step, i.e. never free.
        """
        model = self.draft_latency[draft]
        if model.count == 0:
            return 1.0 if draft != PLD else 0.0
        return model.predict(seq_len, 1) / self.step_seconds(seq_len)

    def verify_seconds(self, seq_len: int, tree_size: int) -> float:
        """Predicted seconds of verifying a tree of `tree_size` nodes (root included)."""
        return self.verify_latency.predict(seq_len, tree_size)

    def choose_draft(
        self, available: Sequence[str], seq_len: int, max_k: int
    ) -> tuple[str, int, float]:
        """argmax over (S, k) of T(S, k) among the available drafts; returns (S, k, T)."""
        if not available or max_k < 1:
            raise ValueError("choose_draft needs at least one draft and max_k >= 1")
        a_pld = self.alpha[PLD].alpha
        c_pld = self.cost(PLD, seq_len)
        best: tuple[str, int, float] | None = None
        for name in available:
            a_s, c_s = self.alpha[name].alpha, self.cost(name, seq_len)
            for k in range(1, max_k + 1):
                # A free draft (PLD after PLD) would divide by zero: clamp the cost instead.
                numerator = geometric_tokens(a_s, k) + a_s**k * a_pld
                score = numerator / max(c_s * k + c_pld, 1e-9)
                if best is None or score > best[2]:
                    best = (name, k, score)
        assert best is not None
        return best

    def plan_expansion(
        self,
        leaves: Sequence[tuple[int, float, int]],
        tree_size: int,
        expected_tokens: float,
        draft_seconds: float,
        seq_len: int,
        available: dict[int, list[str]],
    ) -> Expansion | None:
        """Best-first growth and the stop rule, for one partial tree.

        Args:
            leaves: (node, cumulative acceptance estimate, depth) of every expandable leaf.
            tree_size: nodes in the tree so far, root included.
            expected_tokens: the tree's predicted tokens per step so far (bonus included).
            draft_seconds: the drafting time already spent on this tree.
            seq_len: the verified context length.
            available: per leaf, the drafts that can propose there (PLD only where it matches).

        Returns the expansion of the leaf with the highest cumulative estimate using the (S, k)
        that maximizes T(S, k), shortened to the k that maximizes the predicted tree EWIF; or
        None when no expansion improves the predicted EWIF by `min_gain` (stop: with a tree of
        the root only, this is the fall-back to a plain decoding step).
        """
        cfg = self.config
        if not self.ready() or tree_size >= cfg.max_tree_size:
            return None
        step = self.step_seconds(seq_len)
        current = tree_ewif(
            expected_tokens, draft_seconds, self.verify_seconds(seq_len, tree_size), step
        )
        for leaf, cum, depth in sorted(leaves, key=lambda item: -item[1]):
            room = min(cfg.max_k, cfg.max_depth - depth, cfg.max_tree_size - tree_size)
            drafts = available.get(leaf, [])
            if room < 1 or not drafts:
                continue
            name, k_best, _ = self.choose_draft(drafts, seq_len, room)
            alpha = self.alpha[name].alpha
            per_token = self.cost(name, seq_len) * step
            best: Expansion | None = None
            for k in range(1, k_best + 1):
                tokens = expected_tokens + cum * geometric_tokens(alpha, k)
                ewif = tree_ewif(
                    tokens,
                    draft_seconds + per_token * k,
                    self.verify_seconds(seq_len, tree_size + k),
                    step,
                )
                if best is None or ewif > best.predicted_ewif:
                    best = Expansion(leaf, name, k, ewif)
            # Best-first: only the most promising leaf is considered; if it does not pay, a
            # less promising one cannot pay more under the same costs, so growth stops.
            if best is not None and best.predicted_ewif > current * cfg.min_gain:
                return best
            return None
        return None

    def node_estimate(self, draft: str, draft_prob: float | None) -> float:
        """The per-token estimate a new drafted node multiplies into its path's cumulative one."""
        alpha = self.alpha[draft].alpha
        if draft_prob is None:
            return alpha
        w = self.config.confidence_weight
        return w * draft_prob + (1.0 - w) * alpha
