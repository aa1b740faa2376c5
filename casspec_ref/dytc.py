"""DyTC, the dynamic tree cascade, as the paper describes it (docs/method.md §4).

Read top to bottom:
1. `AcceptanceEstimator`: each draft's acceptance estimate alpha, an EMA after a warm-up.
2. `CostCurve`: seconds of a forward by the tokens it processes, the paper's linear model.
3. `t_score`, `best_k`: the paper's T(S, k), which caps how far one draft goes.
4. `expected_tree_tokens`, `tree_ewif`, `ewif_chain`: the expected walltime improvement factor.
5. `DyTCPolicy.grow`: best-first growth of a tree while its EWIF improves; a tree of the root
   alone is the fall-back to plain decoding.
6. `DyTCPolicy.observe_step`: what one verified step teaches.
Drafting is abstract (`TreeDrafter`): nothing here touches a model. This reference's refinements
are `DyTCConfig` switches (all off in `DyTCConfig.paper()`), written in `dytc_refinements`; the
policy calls them where a comment says "refinement".
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from casspec_ref.base import dytc_checks as checks
from casspec_ref.dytc_config import FREE_DRAFTS, PLD, RECYCLE, DyTCConfig, TreeDrafter
from casspec_ref.dytc_refinements import (
    Exploration,
    Outcome,
    optimistic_mean,
    outcome,
    refined_outcomes,
    relax,
    table_seconds,
)

__all__ = ["FREE_DRAFTS", "PLD", "RECYCLE", "DyTCConfig", "DyTCPolicy", "Outcome", "TreeDrafter"]


# ------------------------------------------------------------------ 1. acceptance estimates
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


# ------------------------------------------------------------------ 2. the cost model
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


# ------------------------------------------------------------------ 3-4. the formulas
def geometric_tokens(alpha: float, k: int) -> float:
    """sum_{i=1..k} alpha^i: expected accepted tokens of a k-chain under i.i.d. acceptance."""
    checks.check_k(k, 0)
    return sum(alpha**i for i in range(1, k + 1))


def t_score(
    alpha_s: float, k: int, c_s: float, alpha_pld: float, c_pld: float, c_verify: float = 0.0
) -> float:
    """The paper's T(S, k): expected tokens per unit cost of drafting k tokens with S, then PLD,
    ``[a_S (1 - a_S^k) / (1 - a_S) + a_S^k a_PLD] / (c_S k + c_PLD + c_verify)``; the paper has
    c_verify = 0 (then k = 1 always wins); here: the grown tree's verify cost in plain steps."""
    checks.check_k(k, 1)
    denominator = c_s * k + c_pld + c_verify
    checks.check_t_score_cost(denominator)
    return (geometric_tokens(alpha_s, k) + alpha_s**k * alpha_pld) / denominator


def best_k(
    alpha_s: float, c_s: float, alpha_pld: float, c_pld: float, c_verify: Sequence[float]
) -> int:
    """The k in 1..len(c_verify) that maximizes T(S, k), ``c_verify[k - 1]`` being the verify
    cost (in plain steps) of the tree grown by k tokens (ties to the shorter draft)."""
    checks.check_verify_costs(c_verify)
    scores = [t_score(alpha_s, k, c_s, alpha_pld, c_pld, c) for k, c in enumerate(c_verify, 1)]
    return 1 + scores.index(max(scores))


def reach_probabilities(parents: Sequence[int], accept: Sequence[float]) -> list[float]:
    """P(the path to node i is accepted): the product of ``accept`` (node i's acceptance given
    its parent's) along the path; siblings are mutually exclusive, the root's reach is 1."""
    checks.check_tree_estimate(parents, accept)
    reach = [1.0] * len(parents)
    for i in range(1, len(parents)):
        reach[i] = reach[parents[i]] * accept[i]
    return reach


def expected_tree_tokens(parents: Sequence[int], accept: Sequence[float]) -> float:
    """Expected tokens one step commits: the bonus token plus every node's reach."""
    return 1.0 + sum(reach_probabilities(parents, accept)[1:])


def tree_ewif(
    expected_tokens: float, draft_cost: float, verify_cost: float, step_cost: float
) -> float:
    """EWIF of one tree step: its tokens per second over a plain step's (1 per `step_cost`)."""
    total = draft_cost + verify_cost
    checks.check_ewif_costs(total, step_cost)
    return expected_tokens * step_cost / total


def ewif_chain(alpha: float, k: int, c: float) -> float:
    """EWIF of one draft proposing k tokens at c plain steps each, verified in one plain step:
    (1 - alpha^(k+1)) / ((1 - alpha) (c k + 1))."""
    return tree_ewif(1.0 + geometric_tokens(alpha, k), c * k, 1.0, 1.0)


# ------------------------------------------------------------------ 5. growing the tree
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
    is accepted given that its parent was (node 0, the root, is certain)."""

    parents: list[int] = field(default_factory=lambda: [-1])
    accept: list[float] = field(default_factory=lambda: [1.0])
    drafts: list[str] = field(default_factory=lambda: ["root"])  # who drafted each node

    def add(self, node: int, parent: int, accept: float, draft: str = "") -> None:
        """Record node `node` (an expansion may report it before lower-numbered siblings)."""
        while len(self.parents) <= node:
            self.parents.append(-1)
            self.accept.append(0.0)
            self.drafts.append("")
        self.parents[node], self.accept[node], self.drafts[node] = parent, accept, draft

    def reach(self) -> dict[int, float]:
        return dict(enumerate(reach_probabilities(self.parents, self.accept)))

    def expected_tokens(self) -> float:
        return expected_tree_tokens(self.parents, self.accept)


@dataclass(frozen=True)
class TreeSoFar:
    """The tree a plan extends: its expected tokens, the seconds drafted so far, and the
    predicted seconds of verifying it with k more nodes (``verify[k]``, k = 0..max_k)."""

    tokens: float
    spent: float
    verify: list[float]


@dataclass(frozen=True)
class Leaf:
    """A leaf a plan may extend: its node, its reach, who drafted it, its lookup match."""

    node: int
    reach: float
    draft: str
    match: int


@dataclass
class DyTCPolicy:
    """The online state of DyTC (estimates, costs) and its decisions. Drafts are named: the DSIA
    levels' plan names, plus `PLD` and `RECYCLE`. `alpha` holds the paper's estimate per draft,
    `refined` the finer ones the refinements switched on learn (keyed by `Outcome`)."""

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

    # -- what DyTC predicts ----------------------------------------------------------------
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

    def chain_tokens(self, draft: str, k: int, below: str = "", match: int = 0) -> float:
        """Expected accepted tokens of a k-chain of `draft` below a node (drafted by `below`, its
        lookup matched on `match` tokens) surely reached: the first token at its estimate, the
        next ones at the draft's continuing estimate (the paper: one alpha, a geometric sum)."""
        first = self.estimate(outcome(self.config, draft, below, match)).alpha
        rest = self.estimate(outcome(self.config, draft, draft)).alpha
        return first * (1.0 + geometric_tokens(rest, k - 1))

    def margins_known(self, draft: str) -> bool:
        """True once an outcome of model draft `draft` came with its margin (`margin_bins`)."""
        keys = [k for k in self.refined if k.kind == "margin" and k.draft == draft]
        return any(self.refined[k].count > 0 for k in keys)

    # -- what DyTC decides ---------------------------------------------------------------------
    def _score(self, leaf: Leaf, draft: str, room: int, tree: TreeSoFar) -> Expansion:
        """The best chain of `draft` below `leaf` by the grown tree's EWIF, k up to T(S, k)'s
        best (a free draft, whose lookup costs the same for any k: up to `room`)."""
        step = self.step_seconds()
        a_s, c_s = self.alpha[draft].alpha, self.cost(draft)
        c_verify = [seconds / step for seconds in tree.verify[1 : room + 1]]
        free = draft in FREE_DRAFTS
        k_max = room if free else best_k(a_s, c_s, self.alpha[PLD].alpha, self.cost(PLD), c_verify)
        per_call = self.draft_seconds(draft)
        options = []
        for k in range(1, k_max + 1):
            drafting = tree.spent + per_call * (1 if free else k)  # a model draft: k forwards
            tokens = tree.tokens + leaf.reach * self.chain_tokens(draft, k, leaf.draft, leaf.match)
            ewif = tree_ewif(tokens, drafting, tree.verify[k], step)
            options.append(Expansion(leaf.node, draft, k, 1, ewif))
        return max(options, key=lambda e: e.predicted_ewif)

    def plan(
        self, drafter: TreeDrafter, tree: TreeEstimate, drafts: Sequence[str]
    ) -> Expansion | None:
        """The best expansion over every expandable leaf and every draft offered there, or
        None when none improves the tree's predicted EWIF by `min_gain` (stop)."""
        cfg = self.config
        size = drafter.size()
        if size >= cfg.max_tree_size:
            return None
        verify = [self.verify_seconds(size + k) for k in range(cfg.max_k + 1)]
        now = TreeSoFar(tree.expected_tokens(), drafter.seconds(), verify)
        current = tree_ewif(now.tokens, now.spent, verify[0], self.step_seconds())
        options = []
        for node, reach in tree.reach().items():
            room = min(cfg.max_k, drafter.room(node), cfg.max_tree_size - size)
            if room < 1 or not drafter.is_leaf(node):
                continue
            leaf = Leaf(node, reach, tree.drafts[node], drafter.match(node))
            for draft in drafts:
                offered = room if draft not in FREE_DRAFTS else drafter.offers(node, draft)
                if offered >= 1:
                    options.append(self._score(leaf, draft, min(room, offered), now))
        best = max(options, key=lambda e: e.predicted_ewif, default=None)
        if best is None or best.predicted_ewif <= current * cfg.min_gain:
            return None
        return best

    def _width(self, choice: Expansion, tree: TreeEstimate, drafter: TreeDrafter) -> int:
        """How many of the draft's alternatives become children: add the next sibling while the
        tree's EWIF improves (a sibling costs no forward, only a verify row)."""
        cfg = self.config
        size = drafter.size()
        limit = min(cfg.siblings, cfg.max_tree_size - size - choice.k + 1)
        if limit < 2 or choice.draft == PLD:
            return 1
        tokens, spent = tree.expected_tokens(), drafter.seconds()
        confidences = drafter.alternatives(choice.leaf, choice.draft, limit)
        cum, step, below = tree.reach()[choice.leaf], self.step_seconds(), tree.drafts[choice.leaf]
        a_s = self.estimate(outcome(cfg, choice.draft, below)).alpha  # as `_record` values it
        chain = cum * self.chain_tokens(choice.draft, choice.k, below)
        spent_after = spent + self.draft_seconds(choice.draft) * choice.k
        best_width, best_ewif = 1, choice.predicted_ewif
        extra = 0.0
        for width in range(2, len(confidences) + 1):
            # The j-th sibling is reached when the earlier ones were rejected; its estimate is
            # the draft's confidence in it, scaled by the draft's measured alpha.
            extra += cum * confidences[width - 1] * a_s
            verify = self.verify_seconds(size + choice.k + width - 1)
            ewif = tree_ewif(tokens + chain + extra, spent_after, verify, step)
            if ewif <= best_ewif * cfg.min_gain:
                break
            best_width, best_ewif = width, ewif
        return best_width

    def grow(self, drafter: TreeDrafter, drafts: Sequence[str]) -> dict[int, float]:
        """Build one step's tree, best first; returns each node's reach probability. A tree of
        the root alone is a plain decoding step: the fall-back when no expansion pays."""
        tree = TreeEstimate()
        if not self.ready():
            return tree.reach()  # the first step is a plain step: it times the target
        if untimed := self.untimed(drafts):
            # Probe: one single-token draft to learn the draft's cost (its first timing pays
            # one-time setup and is discarded, so each draft is probed twice).
            self._record(tree, untimed[0], drafter.expand(0, untimed[0], 1, 1), drafter)
            return tree.reach()
        while (choice := self.plan(drafter, tree, drafts)) is not None:
            width = self._width(choice, tree, drafter)
            # Refinement `margin_bins`: once the draft's margins are known, a chain planned k
            # deep is drafted a token at a time, so the next plan values each by its margin.
            k = 1 if self.margins_known(choice.draft) else choice.k
            added = drafter.expand(choice.leaf, choice.draft, k, width)
            if not added:
                break
            self._record(tree, choice.draft, added, drafter)
        if self.exploration is not None:  # `observe_step` pays for a size explored
            self.exploration.owed = self.exploration.cost(self.verify_cost, drafter.size())
        return tree.reach()

    def _record(
        self,
        tree: TreeEstimate,
        draft: str,
        added: list[tuple[int, int, float | None]],
        drafter: TreeDrafter,
    ) -> None:
        """Each new node's acceptance given its parent: the first child continues the draft's
        chain (valued by the estimate its outcome teaches; a model draft's token with no margin
        known by `confidence_weight` x confidence + the rest x alpha); a later sibling is
        reached only after the earlier ones were rejected (confidence x alpha)."""
        cfg, w = self.config, self.config.confidence_weight
        has_child: set[int] = set()
        for node, parent, confidence in added:  # parents first
            margin = drafter.margin(node) if cfg.margin_bins else None
            key = outcome(cfg, draft, tree.drafts[parent], drafter.match(parent), margin)
            alpha = self.estimate(key).alpha
            if parent in has_child:
                per_token = (confidence if confidence is not None else 1.0) * alpha
            elif confidence is None or margin is not None:
                per_token = alpha
            else:
                per_token = w * confidence + (1.0 - w) * alpha
            has_child.add(parent)
            tree.add(node, parent, per_token, draft)

    # -- 6. what a verified step teaches ------------------------------------------------------
    def observe_step(
        self,
        tested: Sequence[tuple[Outcome, bool]],
        verify_tokens: int,
        verify_seconds: float,
        draft_timings: Mapping[str, tuple[int, float]],
    ) -> None:
        """Learn from one verified step: `tested` is ``(outcome, accepted)`` per chain-continuing
        node whose parent was accepted; the target forward's size and seconds; per draft,
        ``(calls, total seconds)`` spent drafting."""
        if self.exploration is not None:
            spent = verify_seconds + sum(seconds for _, seconds in draft_timings.values())
            self.exploration.settle(spent)
        self.verify_cost.observe(verify_tokens, verify_seconds)
        for name, (calls, seconds) in draft_timings.items():
            if calls < 1 or name not in self.draft_cost:
                continue
            if name not in self._seen and name not in FREE_DRAFTS:
                # A model draft's first timing pays one-time setup (an int8 weight copy, a
                # cast): discarded, so the draft is probed once more.
                self._seen.add(name)
                continue
            self.draft_cost[name].observe(1, seconds / calls)
        # A finer outcome teaches the draft's own estimate too (`Outcome.pooled`).
        pooled = [(key.pooled(), ok) for key, ok in tested if key.pooled() != key]
        taught = [*tested, *pooled]
        for key, accepted in taught:
            if key in self.refined or (key.kind == "draft" and key.draft in self.alpha):
                self.estimate(key).observe(1.0 if accepted else 0.0)
        if self.exploration is not None:  # refinement: an untested estimate relaxes up
            keys = {key for key, _ in taught}
            for key, estimate in self.estimates().items():
                if key not in keys and estimate.count > 0:
                    relax(estimate, self.config.reexplore)
        for curve in [self.verify_cost, *self.draft_cost.values()]:
            curve.tick()
