"""DyTC, the dynamic tree cascade, as the paper describes it (docs/method.md §4).

Read top to bottom:
1. `t_score`, `best_k`: the paper's T(S, k), which caps how far one draft goes.
2. `tree_ewif`, `ewif_chain`: the expected walltime improvement factor (EWIF) of a tree step.
3. `DyTCPolicy.plan`, `DyTCPolicy.grow`: best-first growth of a tree while its EWIF improves;
   a tree of the root alone is the fall-back to plain decoding.
4. `DyTCPolicy.observe_step`: what one verified step teaches.
It stands on `dytc_estimates` (each draft's acceptance EMA, the cost model, and the policy's
state, `DyTCEstimates`, which `DyTCPolicy` extends) and `dytc_tree` (the tree as DyTC estimates
it). Drafting is abstract (`TreeDrafter`): nothing here touches a model. This reference's
refinements are `DyTCConfig` switches (all off in `DyTCConfig.paper()`), written in
`dytc_refinements`; the policy calls them where a comment says "refinement".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from casspec_ref.base import dytc_checks as checks
from casspec_ref.dytc_config import FREE_DRAFTS, PLD, RECYCLE, DyTCConfig, TreeDrafter
from casspec_ref.dytc_estimates import AcceptanceEstimator, CostCurve, DyTCEstimates
from casspec_ref.dytc_refinements import Outcome, outcome, relax
from casspec_ref.dytc_tree import Expansion, Leaf, TreeEstimate, TreeSoFar, expected_tree_tokens

__all__ = [
    "FREE_DRAFTS",
    "PLD",
    "RECYCLE",
    "AcceptanceEstimator",
    "CostCurve",
    "DyTCConfig",
    "DyTCPolicy",
    "Expansion",
    "Outcome",
    "TreeDrafter",
    "TreeEstimate",
    "expected_tree_tokens",
]


# ------------------------------------------------------------------ 1-2. the formulas
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


# ------------------------------------------------------------------ 3. growing the tree
class DyTCPolicy(DyTCEstimates):
    """DyTC's decisions, on the estimates and costs it learns online (`DyTCEstimates`):
    `DyTCPolicy(drafts, config)`, `drafts` the DSIA levels' plan names."""

    def chain_tokens(self, draft: str, k: int, below: str = "", match: int = 0) -> float:
        """Expected accepted tokens of a k-chain of `draft` below a node (drafted by `below`, its
        lookup matched on `match` tokens) surely reached: the first token at its estimate, the
        next ones at the draft's continuing estimate (the paper: one alpha, a geometric sum)."""
        first = self.estimate(outcome(self.config, draft, below, match)).alpha
        rest = self.estimate(outcome(self.config, draft, draft)).alpha
        return first * (1.0 + geometric_tokens(rest, k - 1))

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

    # -- 4. what a verified step teaches ------------------------------------------------------
    def observe_step(
        self,
        tested: Sequence[tuple[Outcome, bool]],
        verify_tokens: int,
        verify_seconds: float,
        draft_timings: Mapping[str, tuple[int, float]],
    ) -> None:
        """Learn from one verified step: `tested` is ``(outcome, accepted)`` per chain-continuing
        node whose parent was accepted; the target forward's size and seconds; per draft,
        ``(calls, total seconds)`` spent drafting (`DyTCEstimates.observe_timings`)."""
        self.observe_timings(verify_tokens, verify_seconds, draft_timings)
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
