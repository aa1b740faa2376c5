"""DyTC, the dynamic tree cascade: every decision about what to draft, in reading order.

Scope: CAS-Spec's dynamic tree cascade (docs/method.md §4; paper arXiv 2510.26843, the DyTC
section). Read top to bottom, this module is the algorithm:

1. `AcceptanceEstimator`: an online acceptance estimate alpha per draft. After a warm-up (a running
   mean started from a prior) it moves as ``a <- (1 - w) a + w mean(last `window` outcomes)``.
   Public notes on the paper give ``w = 0.3, window = 20, warm-up = 20``; the seed article's
   ``a <- 0.2 current + 0.8 a`` is ``w = 0.2, window = 1``.
2. `CostCurve`: the measured seconds of a forward *by the number of tokens it processes*, one
   entry per size, updated online. Deviation from the paper's linear latency model (and from the
   seed article's ``b0 + b1 seq_len + b2 depth``): on a CPU the cost of a forward over T tokens is
   not a line in T (the fastest matmul form changes with the number of rows), so a straight line
   fitted on two sizes can conclude that nothing ever pays. A table learns the curve it lives on,
   non-monotone included. Context length is left to the online updates (the weights, not the
   cache, dominate a small model's forward).
3. `t_score`, `best_k`: the paper's choice of draft S and length k at a leaf,
   ``T(S,k) = [a_S (1 - a_S^k) / (1 - a_S) + a_S^k a_PLD] / (c_S k + c_PLD)``, to which we add
   the measured verify cost of the grown tree in the denominator (without it T always prefers
   k = 1, and a free draft divides by zero).
4. `expected_tree_tokens`, `tree_ewif`, `ewif_chain`: the expected walltime improvement factor of a
   chain (docs/method.md §1) and of a tree (tokens per second against a plain step), where the
   tree's cost is its drafting time plus the *measured* verify cost of its size.
5. `DyTCPolicy.grow`: best-first growth of a `TreeEstimate` (each node's parent and acceptance,
   scored by the formulas of 4). Every expandable leaf and every draft available there is
   scored (k from T(S,k), shortened to the k that maximizes the tree's EWIF); the best expansion
   is applied; its width (how many of the draft's top alternatives become siblings) is chosen by
   the same EWIF; growth stops when no expansion anywhere improves the EWIF. A tree of the root
   alone is a plain decoding step (the fall-back).
6. Exploration, so that one bad early estimate cannot switch drafting off for good: an untested
   draft's acceptance relaxes towards its prior (`reexplore`), and a tree size not measured
   recently (never tried, or measured during a load spike) is predicted as cheap as the
   cheapest size whenever the exploration budget can pay for being wrong. The budget earns
   `explore_fraction` of every step's time and pays the predicted extra cost of an optimistic
   size (`exploration_cost`) whenever a tree of that size is verified, so exploration costs at
   most that fraction of the time.
7. `DyTCPolicy.observe_step`: what one verified step teaches (acceptance per tested node, the
   verify and draft timings).

The drafting machinery is abstract here (`TreeDrafter`): the real one runs model drafts and
prompt lookup (`casspec_ref.draft.StepDrafter`); the simulator in the tests draws synthetic
acceptances and costs, and exercises exactly this code. Nothing here touches a model.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

#: The name the prompt-lookup draft is registered under in a `DyTCPolicy`.
PLD = "pld"
#: The name of the recycled-token draft (successors seen in earlier verify forwards).
RECYCLE = "recycle"
#: Drafts that cost no forward: their proposals are looked up, not computed.
FREE_DRAFTS = (PLD, RECYCLE)


@dataclass(frozen=True)
class DyTCConfig:
    """Every DyTC knob, with the reconstruction's defaults.

    Attributes:
        ema_weight: w in ``a <- (1 - w) a + w mean(window)``, in (0, 1].
        window: how many recent observations the EMA averages, >= 1.
        warmup: observations before the EMA starts (running mean until then), >= 0.
        prior_alpha: a model draft's estimate before any observation, in [0, 1].
        prior_pld_alpha: the prior of the prompt-lookup draft, in [0, 1].
        prior_recycle_alpha: the prior of the recycled-token draft, in [0, 1].
        max_k: the longest chain one expansion drafts, >= 1.
        max_tree_size: the most nodes a tree may have, root included, >= 1.
        max_depth: the deepest node allowed (root = depth 0), >= 1.
        siblings: the most children one expansion may give its leaf (the width DyTC chooses
            from), >= 1 (1 = chains only).
        confidence_weight: how a model-drafted node's estimate mixes the draft's own probability
            of its token with the draft's alpha (1 = the draft confidence only), in [0, 1].
        min_gain: grow the tree only while the predicted EWIF improves by this factor, >= 1.
        cascade_depth_rule: apply K = min(3, log2(n_layers / 12)) model levels (seed article).
        long_context_drop: use one model level fewer above `long_context` tokens (seed article).
        long_context: the context length that triggers `long_context_drop`.
        cost_weight: the weight of a new timing in its size's running estimate, in (0, 1].
        reexplore: per step in which a draft was not tested, its acceptance estimate moves this
            fraction of the way back to its prior, in [0, 1).
        explore_fraction: the share of the elapsed time DyTC may spend on trying tree sizes
            it predicts to be too expensive, in [0, 1) (0 = never explore sizes).
        explore_horizon: steps after which a size's measurement is stale, so that the size
            may be explored again, >= 1.
        calibration_sizes: the tree sizes whose verify cost the first step of a generation
            measures with scratch forwards (empty = learn them from the steps alone).
    """

    ema_weight: float = 0.3
    window: int = 20
    warmup: int = 20
    prior_alpha: float = 0.6
    prior_pld_alpha: float = 0.5
    prior_recycle_alpha: float = 0.3
    max_k: int = 8
    max_tree_size: int = 32
    max_depth: int = 16
    siblings: int = 3
    confidence_weight: float = 0.5
    min_gain: float = 1.0
    cascade_depth_rule: bool = False
    long_context_drop: bool = False
    long_context: int = 512
    cost_weight: float = 0.3
    reexplore: float = 0.02
    explore_fraction: float = 0.05
    explore_horizon: int = 128
    calibration_sizes: tuple[int, ...] = (2, 4, 8, 16)

    def __post_init__(self) -> None:
        checks = [
            ("ema_weight", 0.0 < self.ema_weight <= 1.0, "in (0, 1]"),
            ("window", self.window >= 1, ">= 1"),
            ("warmup", self.warmup >= 0, ">= 0"),
            ("prior_alpha", 0.0 <= self.prior_alpha <= 1.0, "in [0, 1]"),
            ("prior_pld_alpha", 0.0 <= self.prior_pld_alpha <= 1.0, "in [0, 1]"),
            ("prior_recycle_alpha", 0.0 <= self.prior_recycle_alpha <= 1.0, "in [0, 1]"),
            ("max_k", self.max_k >= 1, ">= 1"),
            ("max_tree_size", self.max_tree_size >= 1, ">= 1"),
            ("max_depth", self.max_depth >= 1, ">= 1"),
            ("siblings", self.siblings >= 1, ">= 1"),
            ("confidence_weight", 0.0 <= self.confidence_weight <= 1.0, "in [0, 1]"),
            ("min_gain", self.min_gain >= 1.0, ">= 1"),
            ("long_context", self.long_context >= 1, ">= 1"),
            ("cost_weight", 0.0 < self.cost_weight <= 1.0, "in (0, 1]"),
            ("reexplore", 0.0 <= self.reexplore < 1.0, "in [0, 1)"),
            ("explore_fraction", 0.0 <= self.explore_fraction < 1.0, "in [0, 1)"),
            ("explore_horizon", self.explore_horizon >= 1, ">= 1"),
            ("calibration_sizes", all(n >= 1 for n in self.calibration_sizes), "sizes >= 1"),
        ]
        for name, ok, allowed in checks:
            if not ok:
                raise ValueError(
                    f"DyTCConfig.{name}={getattr(self, name)!r} is invalid: allowed {allowed}"
                )


# ------------------------------------------------------------------ 1. acceptance estimates
class AcceptanceEstimator:
    """Online acceptance estimate of one draft (warm-up, then windowed EMA)."""

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


# ------------------------------------------------------------------ 2. the cost curve
class CostCurve:
    """Seconds of one forward by the number of tokens it processes, learned online.

    Each measured size keeps a running estimate (the first timing, then an EMA with weight
    `weight`). A size never measured is interpolated linearly between its measured neighbours
    and extrapolated beyond the largest with the slope of the last two (never below the last).
    A size not measured in the last `horizon` steps (`tick` counts them) is `stale`: DyTC may
    predict it as cheap as the cheapest size (`floor`) to explore it.
    """

    def __init__(self, weight: float = 0.3, horizon: int = 64) -> None:
        if not 0.0 < weight <= 1.0:
            raise ValueError(f"weight={weight!r} is invalid: allowed is in (0, 1]")
        if horizon < 1:
            raise ValueError(f"horizon={horizon!r} is invalid: allowed is >= 1")
        self.weight = weight
        self.horizon = horizon
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
        if tokens < 1:
            raise ValueError(f"a forward processes >= 1 token, got {tokens!r}")
        if seconds < 0 or not math.isfinite(seconds):
            raise ValueError(f"a latency must be a finite number of seconds >= 0, got {seconds!r}")
        old = self.seconds.get(tokens)
        self.seconds[tokens] = seconds if old is None else old + self.weight * (seconds - old)
        self._last_seen[tokens] = self._now

    def stale(self, tokens: int) -> bool:
        """True if `tokens` was never measured or not in the last `horizon` steps."""
        return tokens not in self._last_seen or self._now - self._last_seen[tokens] >= self.horizon

    def floor(self) -> float:
        """The cheapest estimate of the curve."""
        return min(self.seconds.values())

    def predict(self, tokens: int) -> float:
        """Predicted seconds of a forward over `tokens` tokens (needs one observation)."""
        if not self.seconds:
            raise ValueError("CostCurve.predict needs at least one observation")
        if tokens in self.seconds:
            return self.seconds[tokens]
        sizes = sorted(self.seconds)
        below = [s for s in sizes if s < tokens]
        above = [s for s in sizes if s > tokens]
        if not below:
            return self.seconds[above[0]]
        lo = below[-1]
        if above:
            hi = above[0]
        elif len(below) >= 2:
            lo, hi = below[-2], below[-1]
        else:
            return self.seconds[lo]
        slope = (self.seconds[hi] - self.seconds[lo]) / (hi - lo)
        if not above:  # extrapolate from the largest size, never downwards
            return self.seconds[hi] + max(slope, 0.0) * (tokens - hi)
        return self.seconds[lo] + slope * (tokens - lo)


# ------------------------------------------------------------------ 3-4. the formulas
def geometric_tokens(alpha: float, k: int) -> float:
    """sum_{i=1..k} alpha^i: expected accepted tokens of a k-chain under i.i.d. acceptance."""
    if k < 0:
        raise ValueError(f"k={k} is invalid: allowed is >= 0")
    return sum(alpha**i for i in range(1, k + 1))


def t_score(
    alpha_s: float, k: int, c_s: float, alpha_pld: float, c_pld: float, c_verify: float = 0.0
) -> float:
    """The paper's T(S, k): expected tokens per unit cost of drafting k tokens with S, then PLD.

    ``T = [a_S (1 - a_S^k) / (1 - a_S) + a_S^k a_PLD] / (c_S k + c_PLD + c_verify)``; the first
    term is written as the sum it equals so that a_S = 1 needs no special case. The paper's
    formula has ``c_verify = 0``: it then always favours short drafts, and a free draft has no
    cost at all. Our addition ``c_verify`` is the cost of verifying the grown tree (in plain
    steps), read from the measured cost curve, which puts back what verification costs.
    """
    if k < 1:
        raise ValueError(f"k={k} is invalid: allowed is >= 1")
    denominator = c_s * k + c_pld + c_verify
    if denominator <= 0:
        raise ValueError(f"c_S * k + c_PLD + c_verify must be > 0, got {denominator!r}")
    return (geometric_tokens(alpha_s, k) + alpha_s**k * alpha_pld) / denominator


def best_k(
    alpha_s: float, c_s: float, alpha_pld: float, c_pld: float, c_verify: Sequence[float]
) -> int:
    """The k in 1..len(c_verify) that maximizes T(S, k), ``c_verify[k - 1]`` being the verify
    cost (in plain steps) of the tree grown by k tokens (ties to the shorter draft)."""
    if not c_verify:
        raise ValueError("best_k needs the verify cost of at least one k")
    scores = [
        t_score(alpha_s, k, c_s, alpha_pld, c_pld, c_verify[k - 1])
        for k in range(1, len(c_verify) + 1)
    ]
    return 1 + scores.index(max(scores))


def reach_probabilities(parents: Sequence[int], accept: Sequence[float]) -> list[float]:
    """P(the path to node i is accepted), for every node of a tree (the root's is 1).

    ``parents[i]`` is node i's parent (node 0 is the root, ``parents[0]`` is ignored) and
    ``accept[i]`` the probability that node i is accepted given its parent was; siblings are
    mutually exclusive (at most one child of a node is followed), so a node is reached with the
    product of the acceptances along its path.
    """
    if len(parents) != len(accept):
        raise ValueError(f"parents ({len(parents)}) and accept ({len(accept)}) differ in length")
    reach = [1.0] * len(parents)
    for i in range(1, len(parents)):
        if not 0 <= parents[i] < i:
            raise ValueError(f"node {i} has parent {parents[i]}: parents must precede children")
        reach[i] = reach[parents[i]] * accept[i]
    return reach


def expected_tree_tokens(parents: Sequence[int], accept: Sequence[float]) -> float:
    """Expected tokens one step commits (bonus included): ``1 + sum_i P(path to i accepted)``,
    the bonus token plus every accepted node (see `reach_probabilities` for the arguments)."""
    return 1.0 + sum(reach_probabilities(parents, accept)[1:])


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


def ewif_chain(alpha: float, k: int, c: float) -> float:
    """EWIF of one draft proposing k tokens: (1 - alpha^(k+1)) / ((1 - alpha) (c k + 1)).

    It is `tree_ewif` of a k-chain whose tokens are accepted with probability alpha each,
    drafted at c plain steps per token and verified at the cost of one plain step.
    """
    return tree_ewif(1.0 + geometric_tokens(alpha, k), c * k, 1.0, 1.0)


def max_cascade_depth(n_layers: int, context_len: int, *, n_levels: int, config: DyTCConfig) -> int:
    """How many model draft levels DyTC may use (the seed article's rules, when enabled)."""
    levels = n_levels
    if config.cascade_depth_rule:
        # K = min(3, log2(L / 12)), at least one level: a 30-layer model gets 1.
        levels = min(levels, max(1, min(3, int(math.log2(max(n_layers, 12) / 12)))))
    if config.long_context_drop and context_len > config.long_context:
        levels = max(0, levels - 1)
    return levels


# ------------------------------------------------------------------ 5. growing the tree
class TreeDrafter(Protocol):
    """What DyTC needs from one step's drafting machinery.

    Node 0 is the root; nodes are numbered in the order they are added. `expand` is the only
    call that changes the tree; `alternatives` may run (and charge) the draft's forward.
    """

    def size(self) -> int:
        """Nodes in the tree, root included."""
        ...

    def room(self, node: int) -> int:
        """How many more nodes may hang below `node` along one path."""
        ...

    def is_leaf(self, node: int) -> bool:
        """True while `node` has no children."""
        ...

    def offers(self, node: int, draft: str) -> int:
        """How many tokens `draft` can propose below `node` (a free draft may have none)."""
        ...

    def alternatives(self, node: int, draft: str, width: int) -> list[float]:
        """The draft's confidence in its top-`width` candidates for the child of `node`."""
        ...

    def expand(
        self, node: int, draft: str, k: int, width: int
    ) -> list[tuple[int, int, float | None]]:
        """Add up to `width` children below `node`, the first continuing as a chain of up to
        `k` tokens; return ``(new node, its parent, the draft's confidence in its token or
        None)`` for every added node, parents before children."""
        ...

    def seconds(self) -> float:
        """Wall seconds spent drafting in this step so far."""
        ...


@dataclass
class Expansion:
    """One growth decision: draft `k` tokens with `draft` below `leaf`, `width` children wide."""

    leaf: int
    draft: str
    k: int
    width: int
    predicted_ewif: float


@dataclass
class TreeEstimate:
    """What DyTC believes of the tree it grows: node i's parent and the probability that node i
    is accepted given that its parent was (node 0, the root, is certain). The expected tokens
    and every node's reach are the module's formulas, `expected_tree_tokens` and
    `reach_probabilities`, applied to it."""

    parents: list[int] = field(default_factory=lambda: [-1])
    accept: list[float] = field(default_factory=lambda: [1.0])

    def add(self, node: int, parent: int, accept: float) -> None:
        """Record drafted node `node` (the drafter's number; an expansion may report a node
        before lower-numbered siblings of the same expansion)."""
        while len(self.parents) <= node:
            self.parents.append(-1)
            self.accept.append(0.0)
        self.parents[node], self.accept[node] = parent, accept

    def reach(self) -> dict[int, float]:
        """Each node's probability that the path to it is accepted."""
        return dict(enumerate(reach_probabilities(self.parents, self.accept)))

    def expected_tokens(self) -> float:
        return expected_tree_tokens(self.parents, self.accept)


@dataclass
class DyTCPolicy:
    """The online state of DyTC (estimates and cost curves) and its decisions.

    Drafts are named: the plan names of the DSIA levels, plus `PLD` and `RECYCLE`. The loop asks
    `grow` to build each step's tree and reports the outcome with `observe_step`.
    """

    drafts: Sequence[str]
    config: DyTCConfig = field(default_factory=DyTCConfig)

    def __post_init__(self) -> None:
        cfg = self.config
        priors = {PLD: cfg.prior_pld_alpha, RECYCLE: cfg.prior_recycle_alpha}
        self.alpha: dict[str, AcceptanceEstimator] = {
            name: AcceptanceEstimator(
                priors.get(name, cfg.prior_alpha),
                weight=cfg.ema_weight,
                window=cfg.window,
                warmup=cfg.warmup,
            )
            for name in [*self.drafts, *FREE_DRAFTS]
        }
        self.verify_cost = CostCurve(cfg.cost_weight, cfg.explore_horizon)
        self.draft_cost = {
            name: CostCurve(cfg.cost_weight, cfg.explore_horizon)
            for name in [*self.drafts, *FREE_DRAFTS]
        }
        self._seen: set[str] = set()
        #: seconds DyTC may still spend on exploring sizes predicted not to pay
        self.explore_budget = 0.0
        #: what exploring this step's tree costs the budget if it is verified (see `grow`)
        self._exploring = 0.0

    # -- what DyTC predicts ----------------------------------------------------------------
    def ready(self) -> bool:
        """True once a plain step has been timed, so that costs can be compared to it."""
        return len(self.verify_cost) > 0

    def verify_seconds(self, tree_size: int) -> float:
        """Predicted seconds of verifying a tree of `tree_size` nodes (root included).

        Exploration: a stale size whose predicted extra cost over a plain step the budget can
        pay is predicted at the curve's floor (optimism in the face of uncertainty).
        """
        if self.exploration_cost(tree_size) > 0:
            return self.verify_cost.floor()
        return self.verify_cost.predict(tree_size)

    def exploration_cost(self, tree_size: int) -> float:
        """How much cheaper than predicted `verify_seconds` assumes `tree_size` to be: its
        predicted extra cost over the floor when the size is stale and the budget can pay it,
        else 0."""
        curve = self.verify_cost
        extra = curve.predict(tree_size) - curve.floor()
        return extra if 0 < extra <= self.explore_budget and curve.stale(tree_size) else 0.0

    def step_seconds(self) -> float:
        """Predicted time of a plain decoding step (a tree of the root only)."""
        return max(self.verify_cost.predict(1), 1e-9)

    def untimed(self, drafts: Iterable[str]) -> list[str]:
        """The model drafts among `drafts` whose cost has not been measured yet."""
        return [d for d in drafts if d not in FREE_DRAFTS and len(self.draft_cost[d]) == 0]

    def draft_seconds(self, draft: str) -> float:
        """Predicted seconds of one single-token call of `draft` (0 for an untimed free draft)."""
        curve = self.draft_cost[draft]
        if len(curve) == 0:
            return 0.0 if draft in FREE_DRAFTS else self.step_seconds()
        return curve.predict(1)

    def cost(self, draft: str) -> float:
        """c of a draft: one call's predicted seconds over a plain step's."""
        return self.draft_seconds(draft) / self.step_seconds()

    def node_estimate(self, draft: str, confidence: float | None) -> float:
        """The per-token estimate a new drafted node multiplies into its path's cumulative one."""
        alpha = self.alpha[draft].alpha
        if confidence is None:
            return alpha
        w = self.config.confidence_weight
        return w * confidence + (1.0 - w) * alpha

    def _score(
        self, leaf: int, cum: float, draft: str, room: int, base: tuple[float, float, int]
    ) -> Expansion | None:
        """The best chain (k) of `draft` below `leaf`: k from T(S,k), shortened by tree EWIF."""
        tokens, spent, size = base
        step = self.step_seconds()
        a_s, c_s = self.alpha[draft].alpha, self.cost(draft)
        c_verify = [self.verify_seconds(size + k) / step for k in range(1, room + 1)]
        k_max = best_k(a_s, c_s, self.alpha[PLD].alpha, self.cost(PLD), c_verify)
        per_call = self.draft_seconds(draft)
        best: Expansion | None = None
        for k in range(1, k_max + 1):
            # A model draft runs one forward per token; a free draft one lookup per expansion.
            calls = k if draft not in FREE_DRAFTS else 1
            ewif = tree_ewif(
                tokens + cum * geometric_tokens(a_s, k),
                spent + per_call * calls,
                self.verify_seconds(size + k),
                step,
            )
            if best is None or ewif > best.predicted_ewif:
                best = Expansion(leaf, draft, k, 1, ewif)
        return best

    def _width(self, choice: Expansion, cum: float, confidences: Sequence[float],
               base: tuple[float, float, int]) -> int:  # fmt: skip
        """How many of the draft's alternatives to keep as children: add the next sibling
        while the tree's EWIF improves (a sibling costs no forward, only a verify row)."""
        tokens, spent, size = base
        step = self.step_seconds()
        a_s = self.alpha[choice.draft].alpha
        chain = cum * geometric_tokens(a_s, choice.k)
        spent_after = spent + self.draft_seconds(choice.draft) * choice.k
        best_width, best_ewif = 1, choice.predicted_ewif
        extra = 0.0
        for width in range(2, len(confidences) + 1):
            # The j-th sibling is reached when the earlier ones were rejected; its estimate is
            # the draft's confidence in it, scaled by the draft's measured alpha.
            extra += cum * confidences[width - 1] * a_s
            ewif = tree_ewif(
                tokens + chain + extra,
                spent_after,
                self.verify_seconds(size + choice.k + width - 1),
                step,
            )
            if ewif <= best_ewif * self.config.min_gain:
                break
            best_width, best_ewif = width, ewif
        return best_width

    def plan(
        self, drafter: TreeDrafter, tree: TreeEstimate, drafts: Sequence[str]
    ) -> Expansion | None:
        """The best expansion over every expandable leaf and every draft offered there, or
        None when none improves the tree's predicted EWIF by `min_gain` (stop)."""
        cfg = self.config
        size = drafter.size()
        if size >= cfg.max_tree_size:
            return None
        tokens = tree.expected_tokens()
        base = (tokens, drafter.seconds(), size)
        current = tree_ewif(tokens, base[1], self.verify_seconds(size), self.step_seconds())
        best: Expansion | None = None
        for leaf, cum in tree.reach().items():
            room = min(cfg.max_k, drafter.room(leaf), cfg.max_tree_size - size)
            if room < 1 or not drafter.is_leaf(leaf):
                continue
            for draft in drafts:
                offered = room if draft not in FREE_DRAFTS else drafter.offers(leaf, draft)
                if offered < 1:
                    continue
                candidate = self._score(leaf, cum, draft, min(room, offered), base)
                if candidate is not None and (
                    best is None or candidate.predicted_ewif > best.predicted_ewif
                ):
                    best = candidate
        if best is None or best.predicted_ewif <= current * cfg.min_gain:
            return None
        return best

    def grow(self, drafter: TreeDrafter, drafts: Sequence[str]) -> dict[int, float]:
        """Build one step's tree, best first; returns each node's reach probability."""
        tree = TreeEstimate()
        if not self.ready():
            return tree.reach()  # the first step is a plain step: it times the target
        untimed = self.untimed(drafts)
        if untimed:
            # Probe: one single-token draft to learn the draft's cost (its first timing pays
            # one-time setup and is discarded, so each draft is probed twice).
            self._record(tree, untimed[0], drafter.expand(0, untimed[0], 1, 1))
            return tree.reach()
        while (choice := self.plan(drafter, tree, drafts)) is not None:
            width = 1
            if self.config.siblings > 1 and choice.draft != PLD:
                base = (tree.expected_tokens(), drafter.seconds(), drafter.size())
                room = self.config.max_tree_size - drafter.size() - choice.k + 1
                limit = min(self.config.siblings, room)
                if limit > 1:
                    confidences = drafter.alternatives(choice.leaf, choice.draft, limit)
                    cum = tree.reach()[choice.leaf]
                    width = self._width(choice, cum, confidences, base)
            added = drafter.expand(choice.leaf, choice.draft, choice.k, width)
            if not added:
                break
            self._record(tree, choice.draft, added)
        # If the final size looked cheap only because it was stale, verifying it explores:
        # the budget pays its predicted extra cost when the step is observed.
        self._exploring = self.exploration_cost(drafter.size())
        return tree.reach()

    def _record(
        self, tree: TreeEstimate, draft: str, added: list[tuple[int, int, float | None]]
    ) -> None:
        """Each new node's acceptance given its parent: the first child continues the draft's
        chain (alpha mixed with confidence); a later sibling is reached only after the earlier
        ones were rejected (its confidence times alpha)."""
        has_child: set[int] = set()
        for node, parent, confidence in added:
            if parent not in has_child:
                per_token = self.node_estimate(draft, confidence)
            else:
                conf = confidence if confidence is not None else 1.0
                per_token = conf * self.alpha[draft].alpha
            has_child.add(parent)
            tree.add(node, parent, per_token)

    # -- 7. what a verified step teaches ------------------------------------------------------
    def observe_step(
        self,
        tested: Sequence[tuple[str, bool]],
        verify_tokens: int,
        verify_seconds: float,
        draft_timings: dict[str, tuple[int, float]],
    ) -> None:
        """Learn from one verified step.

        Args:
            tested: ``(draft, accepted)`` for every chain-continuing node whose parent was
                accepted (the nodes whose acceptance the step actually tested).
            verify_tokens, verify_seconds: the target forward's size and wall time.
            draft_timings: per draft, ``(calls, total seconds)`` spent drafting in the step.
        """
        # The exploration budget earns its share of the step and pays for an explored size.
        spent = verify_seconds + sum(seconds for _, seconds in draft_timings.values())
        self.explore_budget += self.config.explore_fraction * spent - self._exploring
        self._exploring = 0.0
        self.verify_cost.observe(verify_tokens, verify_seconds)
        for name, (calls, seconds) in draft_timings.items():
            if calls < 1 or name not in self.draft_cost:
                continue
            if name not in self._seen and name not in FREE_DRAFTS:
                # The first timing of a model draft pays one-time setup (an int8 weight copy,
                # a cast): discarded, so the draft is probed once more.
                self._seen.add(name)
                continue
            self.draft_cost[name].observe(1, seconds / calls)
        tested_names = set()
        for name, accepted in tested:
            if name in self.alpha:
                self.alpha[name].observe(1.0 if accepted else 0.0)
                tested_names.add(name)
        for name, estimator in self.alpha.items():
            if name not in tested_names and estimator.count > 0:
                estimator.relax(self.config.reexplore)
        for curve in [self.verify_cost, *self.draft_cost.values()]:
            curve.tick()
