"""DyTC, the dynamic tree cascade: every decision about what to draft (docs/method.md §4).

Reading order, top to bottom:
1. `AcceptanceEstimator`: each draft's online acceptance estimate alpha.
2. `CostCurve`: the measured seconds of a forward by the number of tokens it processes.
3. `t_score`, `best_k`: the paper's T(S, k), plus the measured verify cost of the grown tree.
4. `expected_tree_tokens`, `tree_ewif`, `ewif_chain`: the expected walltime improvement factor.
5. `DyTCPolicy.grow`: best-first growth of a `TreeEstimate` while the tree's EWIF improves.
6. Exploration (`reexplore`, `exploration_cost`): one bad estimate cannot switch drafting off.
7. `DyTCPolicy.observe_step`: what one verified step teaches.
Drafting is abstract (`TreeDrafter`): nothing here touches a model. Where this departs from the
paper, and why: docs/design.md, `dytc.py`.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from casspec_ref.base import dytc_checks as checks

PLD = "pld"  # the prompt-lookup draft's name in a `DyTCPolicy`
RECYCLE = "recycle"  # the recycled-token draft (successors seen in earlier verify forwards)
FREE_DRAFTS = (PLD, RECYCLE)  # drafts that cost no forward: looked up, not computed
Base = tuple[float, float, list[float], str, int]  # what `DyTCPolicy._score` scores a leaf on


MARGINS = (0.02, 0.05, 0.1, 0.2)  # bin edges of a model draft's margin (design.md, `dytc.py`)


def outcome_name(draft: str, parent_draft: str, match: int = 0, margin: float | None = None) -> str:
    """The estimate a drafted node's outcome teaches: a free draft extending its own chain is
    learned apart (a lookup's first token is a guess, the next ones extend a match), a lookup's
    first token by the length of the match it copies from (1, 2, 3 or more tokens), and a model
    draft's token by its margin (the draft's probability of it minus the best other's), binned."""
    if draft in FREE_DRAFTS and parent_draft == draft:
        return draft + "+"
    if draft not in FREE_DRAFTS and margin is not None:
        return f"{draft}@{bisect.bisect(MARGINS, margin)}"
    return f"{PLD}#{min(match, 3)}" if draft == PLD and match > 0 else draft


def margin_names(draft: str) -> list[str]:
    """The names of model draft `draft`'s per-margin-bin estimates (as `outcome_name` makes)."""
    return [f"{draft}@{b}" for b in range(len(MARGINS) + 1)]


def pooled(name: str) -> str:
    """The draft's own estimate behind a finer one (``pld#2`` -> ``pld``, ``l1@3`` -> ``l1``)."""
    return name.split("#")[0].split("@")[0]


@dataclass(frozen=True)
class DyTCConfig:
    """Every DyTC knob, with the reconstruction's defaults (allowed values: base/dytc_checks.py)."""

    ema_weight: float = 0.3  # w in a <- (1 - w) a + w mean(last `window` outcomes)
    window: int = 40  # the paper's notes: 20 (docs/design.md, `dytc.py`)
    warmup: int = 20  # outcomes before the EMA starts (a running mean until then)
    prior_alpha: float = 0.6  # a model draft's estimate before any outcome
    prior_pld_alpha: float = 0.5
    prior_recycle_alpha: float = 0.3
    max_k: int = 8  # the longest chain one expansion drafts
    max_tree_size: int = 32  # nodes, root included
    max_depth: int = 16  # root = depth 0
    siblings: int = 3  # the most children one expansion gives its leaf (1 = chains only)
    confidence_weight: float = 0.5  # w: a model-drafted node's estimate is w conf + (1 - w) alpha
    min_gain: float = 1.0  # grow only while the predicted EWIF improves by this factor
    cascade_depth_rule: bool = False  # K = min(3, log2(n_layers / 12)) model levels (seed article)
    long_context_drop: bool = False  # one model level fewer above `long_context` tokens
    long_context: int = 512  # the context length that triggers `long_context_drop`
    cost_weight: float = 0.3  # the weight of a new timing in its size's running estimate
    reexplore: float = 0.02  # per step untested, how far up an estimate moves (`relax`)
    explore_fraction: float = 0.02  # the most of the time spent exploring sizes (0 = never)
    explore_horizon: int = 128  # steps after which a size's timing is stale
    calibration_sizes: tuple[int, ...] = (2, 4, 8, 16)  # timed by scratch forwards first (or none)

    def __post_init__(self) -> None:
        checks.check_dytc_config(self)


# ------------------------------------------------------------------ 1. acceptance estimates
class AcceptanceEstimator:
    """Online acceptance estimate of one draft: an optimistic mean during warm-up, then an EMA."""

    def __init__(self, prior: float, *, weight: float, window: int, warmup: int) -> None:
        checks.check_prior(prior)
        self.prior, self.weight, self.warmup = float(prior), weight, warmup
        self.count, self._sum = 0, 0.0
        self._recent: deque[float] = deque(maxlen=window)
        self.alpha = self._optimistic()

    def _optimistic(self) -> float:
        """The warm-up estimate: the prior as one pseudo-outcome, the outcomes seen, and those
        still to come counted as accepted. A draft is tried until its outcomes speak: a chance
        start (one rejection in two) cannot switch a good draft off before it is tested."""
        return (self.prior + self._sum + self.warmup - self.count) / (1.0 + self.warmup)

    def observe(self, accepted: float) -> None:
        """Record one outcome: 1.0 accepted, 0.0 rejected (fractions for averaged events)."""
        checks.check_outcome(accepted)
        self.count += 1
        self._sum += accepted
        self._recent.append(float(accepted))
        if self.count <= self.warmup:
            self.alpha = self._optimistic()
        else:
            window_mean = sum(self._recent) / len(self._recent)
            self.alpha = (1.0 - self.weight) * self.alpha + self.weight * window_mean

    def relax(self, rate: float) -> None:
        """A step without observations: an estimate below the prior or the draft's long-run mean
        moves `rate` of the way up to the higher one, so a draft switched off, or stuck below where
        it pays after a bad stretch, is tried again; one above both is not pulled down (biased)."""
        target = max(self.prior, (self.prior + self._sum) / (1.0 + self.count))
        if self.alpha < target:
            self.alpha += rate * (target - self.alpha)


# ------------------------------------------------------------------ 2. the cost curve
class CostCurve:
    """Seconds of one forward by the number of tokens it processes, learned online: one EMA per
    size. A size not measured in the last `horizon` steps is `stale`: a new timing replaces it."""

    def __init__(self, weight: float = 0.3, horizon: int = 64) -> None:
        checks.check_cost_curve(weight, horizon)
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
        checks.check_timing(tokens, seconds)
        old = None if self.stale(tokens) else self.seconds.get(tokens)  # stale: replaced
        self.seconds[tokens] = seconds if old is None else old + self.weight * (seconds - old)
        self._last_seen[tokens] = self._now

    def stale(self, tokens: int) -> bool:
        """True if `tokens` was never measured or not in the last `horizon` steps."""
        return tokens not in self._last_seen or self._now - self._last_seen[tokens] >= self.horizon

    def floor(self) -> float:
        """The cheapest estimate of the curve."""
        return min(self.seconds.values())

    def predict(self, tokens: int) -> float:
        """Predicted seconds over `tokens` tokens: as measured, else linear between the measured
        neighbours, else extrapolated from the two largest sizes (never downwards)."""
        checks.check_measured(len(self.seconds))
        s = self.seconds
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
    c_verify = 0, ours is the grown tree's measured verify cost in plain steps."""
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


def max_cascade_depth(n_layers: int, context_len: int, *, n_levels: int, config: DyTCConfig) -> int:
    """How many model draft levels DyTC may use (the seed article's rules, when enabled)."""
    if config.cascade_depth_rule:
        # K = min(3, log2(L / 12)), at least one level: a 30-layer model gets 1.
        n_levels = min(n_levels, max(1, min(3, int(math.log2(max(n_layers, 12) / 12)))))
    if config.long_context_drop and context_len > config.long_context:
        n_levels = max(0, n_levels - 1)
    return n_levels


# ------------------------------------------------------------------ 5. growing the tree
class TreeDrafter(Protocol):
    """What DyTC needs from one step's drafting machinery. Node 0 is the root, nodes are
    numbered as added; only `expand` changes the tree; `alternatives` may run a draft forward."""

    def size(self) -> int:
        """Nodes in the tree, root included."""

    def room(self, node: int) -> int:
        """How many more nodes may hang below `node` along one path."""

    def is_leaf(self, node: int) -> bool:
        """True while `node` has no children."""

    def offers(self, node: int, draft: str) -> int:
        """How many tokens `draft` can propose below `node` (a free draft may have none)."""

    def match(self, node: int) -> int:
        """How long a context suffix prompt lookup matched below `node` (0: none, or unknown)."""

    def margin(self, node: int) -> float | None:
        """A model-drafted chain node's margin (see `outcome_name`); None if not known."""

    def alternatives(self, node: int, draft: str, width: int) -> list[float]:
        """The draft's confidence in its top-`width` candidates for the child of `node`."""

    def expand(
        self, node: int, draft: str, k: int, width: int
    ) -> list[tuple[int, int, float | None]]:
        """Add up to `width` children below `node`, the first continuing as a chain of up to `k`
        tokens; return (node, parent, the draft's confidence or None) per node, parents first."""

    def seconds(self) -> float:
        """Wall seconds spent drafting in this step so far."""


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


@dataclass
class DyTCPolicy:
    """The online state of DyTC (estimates, cost curves, exploration budget) and its decisions.
    Drafts are named: the DSIA levels' plan names, plus `PLD` and `RECYCLE`."""

    drafts: Sequence[str]
    config: DyTCConfig = field(default_factory=DyTCConfig)

    def __post_init__(self) -> None:
        cfg = self.config
        checks.check_draft_names(self.drafts, FREE_DRAFTS)
        names = [*self.drafts, *FREE_DRAFTS]
        priors = {PLD: cfg.prior_pld_alpha, RECYCLE: cfg.prior_recycle_alpha}

        def estimator(name: str) -> AcceptanceEstimator:
            draft = pooled(name).rstrip("+")  # whose estimate it is
            # A free draft fills a tree at no forward's cost: no warm-up optimism for it.
            warmup = 0 if draft in FREE_DRAFTS else cfg.warmup
            prior = priors.get(draft, cfg.prior_alpha)
            return AcceptanceEstimator(
                prior, weight=cfg.ema_weight, window=cfg.window, warmup=warmup
            )

        finer = [name for d in self.drafts for name in margin_names(d)]
        finer += [outcome_name(n, n) for n in FREE_DRAFTS]
        finer += [outcome_name(PLD, "", m) for m in (1, 2, 3)]
        self.alpha = {name: estimator(name) for name in [*names, *finer]}
        self.verify_cost = CostCurve(cfg.cost_weight, cfg.explore_horizon)
        self.draft_cost = {name: CostCurve(cfg.cost_weight, cfg.explore_horizon) for name in names}
        self._seen: set[str] = set()
        self.explore_budget = 0.0  # seconds DyTC may still spend exploring sizes
        self._exploring = 0.0  # what this step's tree costs the budget if verified (`grow`)

    # -- what DyTC predicts ----------------------------------------------------------------
    def ready(self) -> bool:
        """True once a plain step has been timed, so that costs can be compared to it."""
        return len(self.verify_cost) > 0

    def verify_seconds(self, tree_size: int) -> float:
        """Predicted seconds of verifying `tree_size` nodes; a size being explored (see
        `exploration_cost`) is predicted at the curve's floor."""
        if self.exploration_cost(tree_size) > 0:
            return self.verify_cost.floor()
        return self.verify_cost.predict(tree_size)

    def exploration_cost(self, tree_size: int) -> float:
        """The predicted extra cost of `tree_size` over the floor when the size is stale and the
        budget can pay it (it is then explored), else 0."""
        curve = self.verify_cost
        extra = curve.predict(tree_size) - curve.floor()
        return extra if 0 < extra <= self.explore_budget and curve.stale(tree_size) else 0.0

    def step_seconds(self) -> float:
        """Predicted time of a plain decoding step (a tree of the root only)."""
        return max(self.verify_cost.predict(1), 1e-9)

    def untimed(self, drafts: Iterable[str]) -> list[str]:
        """The model drafts among `drafts` whose cost was never measured or is stale (re-probed)."""
        return [d for d in drafts if d not in FREE_DRAFTS and self.draft_cost[d].stale(1)]

    def draft_seconds(self, draft: str) -> float:
        """Predicted seconds of one single-token call of `draft` (0 for an untimed free draft)."""
        curve = self.draft_cost[draft]
        if len(curve) == 0:
            return 0.0 if draft in FREE_DRAFTS else self.step_seconds()
        return curve.predict(1)

    def chain_tokens(self, draft: str, k: int, below: str = "", match: int = 0) -> float:
        """Expected accepted tokens of a k-chain of `draft` below a node (drafted by `below`, its
        lookup matched on `match` tokens) surely reached: the first at alpha, the next ones at the
        continuing alpha."""
        first = self.alpha[outcome_name(draft, below, match)].alpha
        rest = self.alpha[outcome_name(draft, draft)].alpha
        return first * (1.0 + geometric_tokens(rest, k - 1))

    def margins_known(self, draft: str) -> bool:
        """True once an outcome of model draft `draft` came with its margin (`outcome_name`)."""
        return any(self.alpha[n].count > 0 for n in margin_names(draft) if n in self.alpha)

    def cost(self, draft: str) -> float:
        """c of a draft: one call's predicted seconds over a plain step's."""
        return self.draft_seconds(draft) / self.step_seconds()

    def _score(self, leaf: int, cum: float, draft: str, room: int, base: Base) -> Expansion:
        """The best chain of `draft` below `leaf` by the tree's EWIF, k up to T(S,k)'s best (a free
        draft: `room`). `base`: the tree's expected tokens, drafting seconds, predicted verify
        seconds with k more nodes (k = 0, 1, ...); leaf's draft and lookup match."""
        tokens, spent, verify, below, match = base
        step = self.step_seconds()
        a_s, c_s = self.alpha[draft].alpha, self.cost(draft)
        c_verify = [seconds / step for seconds in verify[1 : room + 1]]
        free = draft in FREE_DRAFTS  # one lookup per expansion, k by the EWIF alone
        k_max = room if free else best_k(a_s, c_s, self.alpha[PLD].alpha, self.cost(PLD), c_verify)
        per_call = self.draft_seconds(draft)
        options = []
        for k in range(1, k_max + 1):
            drafting = spent + per_call * (1 if free else k)  # a model draft: a forward per token
            tree_tokens = tokens + cum * self.chain_tokens(draft, k, below, match)
            ewif = tree_ewif(tree_tokens, drafting, verify[k], step)
            options.append(Expansion(leaf, draft, k, 1, ewif))
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
        tokens, spent = tree.expected_tokens(), drafter.seconds()
        verify = [self.verify_seconds(size + k) for k in range(cfg.max_k + 1)]  # once a plan
        current = tree_ewif(tokens, spent, verify[0], self.step_seconds())
        options = []
        for leaf, cum in tree.reach().items():
            room = min(cfg.max_k, drafter.room(leaf), cfg.max_tree_size - size)
            if room < 1 or not drafter.is_leaf(leaf):
                continue
            for draft in drafts:
                offered = room if draft not in FREE_DRAFTS else drafter.offers(leaf, draft)
                if offered >= 1:
                    base = (tokens, spent, verify, tree.drafts[leaf], drafter.match(leaf))
                    options.append(self._score(leaf, cum, draft, min(room, offered), base))
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
        cum, step = tree.reach()[choice.leaf], self.step_seconds()
        a_s = self.alpha[outcome_name(choice.draft, tree.drafts[choice.leaf])].alpha  # as `_record`
        chain = cum * self.chain_tokens(choice.draft, choice.k, tree.drafts[choice.leaf])
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
        """Build one step's tree, best first; returns each node's reach probability."""
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
            # A model chain planned k deep is drafted a token at a time once the draft's margins
            # are known: the next plan values the drafted token by its margin's estimate.
            k = 1 if self.margins_known(choice.draft) else choice.k
            added = drafter.expand(choice.leaf, choice.draft, k, width)
            if not added:
                break
            self._record(tree, choice.draft, added, drafter)
        # A size that looked cheap only because it was stale is explored when it is verified:
        # the budget pays its predicted extra cost in `observe_step`.
        self._exploring = self.exploration_cost(drafter.size())
        return tree.reach()

    def _record(
        self, tree: TreeEstimate, draft: str, added: list[tuple[int, int, float | None]],
        drafter: TreeDrafter,
    ) -> None:  # fmt: skip
        """Each new node's acceptance given its parent: the first child continues the draft's
        chain (the estimate its outcome teaches, `outcome_name`; one with no margin known mixes
        the draft's alpha with its confidence); a later sibling is reached only after the
        earlier ones were rejected (confidence x alpha)."""
        w = self.config.confidence_weight
        has_child: set[int] = set()
        for node, parent, confidence in added:  # parents first
            margin = drafter.margin(node)  # known for a chain-continuing model node only
            name = outcome_name(draft, tree.drafts[parent], drafter.match(parent), margin)
            alpha = self.alpha[name].alpha
            if parent in has_child:
                per_token = (confidence if confidence is not None else 1.0) * alpha
            elif confidence is None or margin is not None:
                per_token = alpha
            else:
                per_token = w * confidence + (1.0 - w) * alpha
            has_child.add(parent)
            tree.add(node, parent, per_token, draft)

    # -- 7. what a verified step teaches ------------------------------------------------------
    def observe_step(
        self, tested: Sequence[tuple[str, bool]], verify_tokens: int, verify_seconds: float,
        draft_timings: dict[str, tuple[int, float]],
    ) -> None:  # fmt: skip
        """Learn from one verified step: `tested` is ``(estimate name, accepted)`` per
        chain-continuing node whose parent was accepted; the target forward's size and seconds;
        per draft, ``(calls, total seconds)`` spent drafting."""
        # The exploration budget earns its share of the step and pays for an explored size.
        spent = verify_seconds + sum(seconds for _, seconds in draft_timings.values())
        self.explore_budget += self.config.explore_fraction * spent - self._exploring
        self._exploring = 0.0
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
        # A finer estimate's outcome teaches the draft's pooled one too (T(S,k) and the next
        # token of a chain count on it: its match or margin is not known yet).
        tested = [*tested, *((pooled(name), ok) for name, ok in tested if pooled(name) != name)]
        for name, accepted in tested:
            if name in self.alpha:
                self.alpha[name].observe(1.0 if accepted else 0.0)
        tested_names = {name for name, _ in tested}
        for name, estimator in self.alpha.items():
            if name not in tested_names and estimator.count > 0:
                estimator.relax(self.config.reexplore)
        for curve in [self.verify_cost, *self.draft_cost.values()]:
            curve.tick()
