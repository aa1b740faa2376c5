"""DyTC, the dynamic tree cascade: the paper's policy alone, in the order docs/method.md §4.1
presents it. Read top to bottom:

1-2. What DyTC learns online (`casspec_ref.dytc_estimates`): each draft's acceptance estimate
   alpha (`AcceptanceEstimator`) and the seconds of a forward by its size (`CostCurve`).
3. `t_score`, `best_k`: the paper's T(S, k), which caps how far one draft goes.
4. `tree_ewif`: the expected walltime improvement factor (EWIF) of a tree step.
5. `DyTC.plan`, `DyTC._score`, `DyTC._width`, `DyTC.grow`: best-first growth while the tree's
   EWIF improves; a tree of the root alone is the fall-back to plain decoding.
6. `DyTC.observe_step`: what one verified step teaches.

Drafting is abstract (`dytc_tree.TreeDrafter`): nothing here touches a model. This reference's
refinements override named methods of `DyTC` in `dytc_refinements.RefinedDyTC`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from casspec_ref.base import dytc_checks as checks
from casspec_ref.dytc_config import FREE_DRAFTS, PLD
from casspec_ref.dytc_estimates import DyTCState, Outcome
from casspec_ref.dytc_tree import Expansion, Grown, Leaf, TreeDrafter, TreeEstimate, TreeSoFar


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


# ------------------------------------------------------------------ 5. the policy
class DyTC(DyTCState):
    """The paper's DyTC: `DyTC(drafts)`, `drafts` the DSIA levels' plan names; it drafts with
    them and prompt lookup (`free_drafts`), on what it learns online (`DyTCState`)."""

    @property
    def free_drafts(self) -> tuple[str, ...]:
        """The drafts that cost no forward which this policy offers: prompt lookup."""
        return (PLD,)

    def outcome(
        self, draft: str, parent_draft: str, match: int = 0, margin: float | None = None
    ) -> Outcome:
        """The estimate a node drafted by `draft` below a `parent_draft` node is valued by and
        teaches: the paper's one estimate per draft."""
        return Outcome(draft)

    def chain_tokens(self, draft: str, k: int, below: str = "", match: int = 0) -> float:
        """Expected accepted tokens of a k-chain of `draft` below a node (drafted by `below`, its
        lookup matched on `match` tokens) surely reached: the first token at its estimate, the
        next ones at the draft's continuing estimate (the paper: one alpha, a geometric sum)."""
        first = self.estimate(self.outcome(draft, below, match)).alpha
        rest = self.estimate(self.outcome(draft, draft)).alpha
        return first * (1.0 + geometric_tokens(rest, k - 1))

    def plan(
        self, drafter: TreeDrafter, tree: TreeEstimate, drafts: Sequence[str]
    ) -> Expansion | None:
        """The best expansion over every expandable leaf and every draft offered there, or
        None when none improves the tree's predicted EWIF by `min_gain` (stop)."""
        cfg, size = self.config, drafter.size()
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

    def _width(self, choice: Expansion, tree: TreeEstimate, drafter: TreeDrafter) -> int:
        """How many of the draft's top alternatives become children: add the next sibling while
        the tree's EWIF improves (a sibling costs no forward, only a verify row)."""
        cfg, size = self.config, drafter.size()
        limit = min(cfg.siblings, cfg.max_tree_size - size - choice.k + 1)
        if limit < 2 or choice.draft == PLD:
            return 1
        tokens, spent = tree.expected_tokens(), drafter.seconds()
        confidences = drafter.alternatives(choice.leaf, choice.draft, limit)
        cum, step, below = tree.reach()[choice.leaf], self.step_seconds(), tree.drafts[choice.leaf]
        a_s = self.estimate(self.outcome(choice.draft, below)).alpha  # as `_record` values it
        chain = cum * self.chain_tokens(choice.draft, choice.k, below)
        spent_after = spent + self.draft_seconds(choice.draft) * choice.k
        best_width, best_ewif, extra = 1, choice.predicted_ewif, 0.0
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
        """Build one step's tree, best first, from `drafts` (a free draft only if among
        `free_drafts`); returns each node's reach probability. A tree of the root alone is a
        plain decoding step: the fall-back when no expansion pays."""
        drafts = [d for d in drafts if d not in FREE_DRAFTS or d in self.free_drafts]
        tree = TreeEstimate()
        if not self.ready():
            return tree.reach()  # the first step is a plain step: it times the target
        if untimed := self.untimed(drafts):
            # Probe: one single-token draft to learn the draft's cost (its first timing pays
            # one-time setup and is discarded, so each draft is probed twice).
            self._record(tree, untimed[0], drafter.expand(0, untimed[0], 1, 1), drafter)
            return tree.reach()
        self.grow_best_first(tree, drafter, drafts)
        return tree.reach()

    def grow_best_first(
        self, tree: TreeEstimate, drafter: TreeDrafter, drafts: Sequence[str]
    ) -> None:
        """Draft the best expansion, as wide as pays, until no expansion pays (`plan`)."""
        while (choice := self.plan(drafter, tree, drafts)) is not None:
            width = self._width(choice, tree, drafter)
            added = drafter.expand(choice.leaf, choice.draft, self.chain_length(choice), width)
            if not added:
                break
            self._record(tree, choice.draft, added, drafter)

    def chain_length(self, choice: Expansion) -> int:
        """How many of the chain's k tokens to draft before planning again: all k."""
        return choice.k

    def _record(self, tree: TreeEstimate, draft: str, added: Grown, drafter: TreeDrafter) -> None:
        """Each new node's acceptance given its parent: the first child continues the draft's
        chain (a model draft's token by `confidence_weight` x its confidence + the rest x
        alpha); a later sibling is reached only after the earlier ones were rejected
        (confidence x alpha)."""
        w = self.config.confidence_weight
        has_child: set[int] = set()
        for node, parent, confidence in added:  # parents first
            margin = self.node_margin(drafter, node)
            alpha = self.estimate(
                self.outcome(draft, tree.drafts[parent], drafter.match(parent), margin)
            ).alpha
            if parent in has_child:
                per_token = (confidence if confidence is not None else 1.0) * alpha
            elif confidence is None or margin is not None:
                per_token = alpha
            else:
                per_token = w * confidence + (1.0 - w) * alpha
            has_child.add(parent)
            tree.add(node, parent, per_token, draft)

    def node_margin(self, drafter: TreeDrafter, node: int) -> float | None:
        """A drafted token's margin, as far as the policy reads it: the paper does not."""
        return None

    # -- 6. what a verified step teaches ----------------------------------------------------
    def observe_step(
        self,
        tested: Sequence[tuple[Outcome, bool]],
        verify_tokens: int,
        verify_seconds: float,
        draft_timings: Mapping[str, tuple[int, float]],
    ) -> None:
        """Learn from one verified step: `tested` is ``(outcome, accepted)`` per chain-continuing
        node whose parent was accepted; the target forward's size and seconds; per draft,
        ``(calls, total seconds)`` spent drafting (`DyTCState.observe_timings`)."""
        self.observe_timings(verify_tokens, verify_seconds, draft_timings)
        for key, accepted in tested:
            self.estimate(key).observe(1.0 if accepted else 0.0)
