"""A simulator of speculative decoding for DyTC: synthetic drafts, acceptances and cost curves.

It drives the real `casspec_ref.dytc.RefinedDyTC` (the same `grow` and `observe_step` the
decoding loop calls) through `SimDrafter`, a `TreeDrafter` whose drafts cost what a `World`
says and whose nodes are accepted with the world's true probabilities. Fixed schedules (plain
decoding, prompt lookup with a fixed k, a chain of one draft with a fixed k) run in the same world,
so DyTC's realised tokens per second can be compared with the best fixed schedule in hindsight.

Acceptance model (i.i.d., the one DyTC's formulas assume, so that the test measures the policy
and its learning, not a model mismatch): a drafted node that continues its draft's chain is
accepted with the draft's true alpha (a free draft extending its own chain with `alpha_next`,
by default the same); the j-th sibling (j >= 2), tried after the earlier ones were rejected, with
the draft's true sibling probabilities. Prompt lookup and recycled tokens are available at a node
with a fixed probability (drawn once per node).

The tests run it (tests/test_dytc*.py import it through tests/dytc_simulator.py), and so does
tutorial 07, which runs from the installed package.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from casspec_ref.dytc import DyTC
from casspec_ref.dytc_config import PLD, RECYCLE, DyTCConfig
from casspec_ref.dytc_estimates import Outcome
from casspec_ref.dytc_refinements import RefinedDyTC


@dataclass(frozen=True)
class World:
    """The truth the policy must learn: per-draft acceptance and cost, and the verify curve."""

    verify: Callable[[int], float]  # seconds of a target forward over T tokens
    alpha: dict[str, float]  # true chain acceptance per draft
    draft_seconds: dict[str, float]  # seconds per call (model drafts), per lookup (free ones)
    siblings: dict[str, tuple[float, ...]] = field(default_factory=dict)  # 2nd, 3rd... child
    offer: dict[str, float] = field(default_factory=dict)  # P(a free draft proposes at a node)
    offer_len: int = 10
    alpha_next: dict[str, float] = field(default_factory=dict)  # a free draft continuing its chain
    noise: float = 0.05  # relative timing noise


def interpolated(table: dict[int, float]) -> Callable[[int], float]:
    """A cost curve through measured points, linear in between, flat beyond the last."""
    sizes = sorted(table)

    def curve(t: int) -> float:
        if t in table:
            return table[t]
        below = [s for s in sizes if s < t]
        above = [s for s in sizes if s > t]
        if not above:
            return table[sizes[-1]]
        lo, hi = below[-1], above[0]
        return table[lo] + (t - lo) / (hi - lo) * (table[hi] - table[lo])

    return curve


#: The four cost curves of the test (seconds of one target forward over T tokens).
CURVES: dict[str, Callable[[int], float]] = {
    "linear": lambda t: 0.040 + 0.004 * (t - 1),
    # A CPU measurement with a slow kernel for 2-3 rows (T = 1, 2, 3, 4, 6, 8, 16).
    "non-monotone": interpolated(
        {1: 0.0398, 2: 0.0638, 3: 0.0761, 4: 0.058, 6: 0.0536, 8: 0.057, 16: 0.0672, 32: 0.09}
    ),
    "flat (GPU-like)": lambda t: 0.020 + 0.00005 * t,
    "steep": lambda t: 0.040 * t,
}


def default_world(curve: Callable[[int], float]) -> World:
    """Two model drafts (a good one and a cheap one), prompt lookup and recycled tokens."""
    step = curve(1)
    return World(
        verify=curve,
        alpha={"good": 0.85, "cheap": 0.55, PLD: 0.6, RECYCLE: 0.3},
        draft_seconds={"good": 0.45 * step, "cheap": 0.25 * step, PLD: 1e-5, RECYCLE: 1e-5},
        siblings={"good": (0.3, 0.1), "cheap": (0.25, 0.1), RECYCLE: (0.2, 0.1)},
        offer={PLD: 0.35, RECYCLE: 0.9},
    )


class SimDrafter:
    """A `TreeDrafter` over a synthetic world (nodes carry their draft and rank among siblings)."""

    def __init__(self, world: World, rng: random.Random, max_nodes: int, max_depth: int):
        self.world, self.rng = world, rng
        self.max_nodes, self.max_depth = max_nodes, max_depth
        self.parent: list[int] = [-1]
        self.depth: list[int] = [0]
        self.draft: list[str] = ["root"]
        self.rank: list[int] = [0]  # 0 = continues the chain, j >= 1 = the (j+1)-th sibling
        self.children: list[list[int]] = [[]]
        self.spent = 0.0
        self.calls: dict[str, int] = {}
        self.draft_time: dict[str, float] = {}
        self._offers: dict[tuple[int, str], int] = {}

    def _pay(self, draft: str) -> None:
        seconds = self.world.draft_seconds[draft] * (1 + self.world.noise * self.rng.uniform(-1, 1))
        self.spent += seconds
        self.calls[draft] = self.calls.get(draft, 0) + 1
        self.draft_time[draft] = self.draft_time.get(draft, 0.0) + seconds

    # -- TreeDrafter --------------------------------------------------------------------------
    def size(self) -> int:
        return len(self.parent)

    def room(self, node: int) -> int:
        return max(0, min(self.max_nodes - self.size(), self.max_depth - self.depth[node]))

    def is_leaf(self, node: int) -> bool:
        return not self.children[node]

    def seconds(self) -> float:
        return self.spent

    def offers(self, node: int, draft: str) -> int:
        key = (node, draft)
        if key not in self._offers:
            self._pay(draft)
            hit = self.rng.random() < self.world.offer.get(draft, 0.0)
            self._offers[key] = min(self.room(node), self.world.offer_len) if hit else 0
        return self._offers[key]

    def match(self, node: int) -> int:
        return 0  # the world's lookups carry no evidence: one estimate for a lookup's first token

    def margin(self, node: int) -> float | None:
        return None  # the world's drafts carry no margin: a node mixes confidence and alpha

    def alternatives(self, node: int, draft: str, width: int) -> list[float]:
        first = self.world.alpha[draft]
        return [first, *self.world.siblings.get(draft, ())][:width]

    def _add(self, parent: int, draft: str, rank: int) -> int:
        self.parent.append(parent)
        self.depth.append(self.depth[parent] + 1)
        self.draft.append(draft)
        self.rank.append(rank)
        self.children.append([])
        self.children[parent].append(self.size() - 1)
        return self.size() - 1

    def expand(
        self, node: int, draft: str, k: int, width: int
    ) -> list[tuple[int, int, float | None]]:
        free = draft in (PLD, RECYCLE)
        if free:
            k = min(k, self.offers(node, draft) or k)
        else:
            self._pay(draft)
        confidences = self.alternatives(node, draft, width)
        added: list[tuple[int, int, float | None]] = []
        first = self._add(node, draft, 0)
        added.append((first, node, None if draft == PLD else confidences[0]))
        parent = first
        for _ in range(k - 1):
            if self.room(parent) < 1:
                break
            if not free:
                self._pay(draft)
            child = self._add(parent, draft, 0)
            added.append((child, parent, None if draft == PLD else confidences[0]))
            parent = child
        for j in range(1, width):
            if self.size() >= self.max_nodes:
                break
            added.append((self._add(node, draft, j), node, confidences[j]))
        return added

    # -- the synthetic verifier ----------------------------------------------------------------
    def verify(self, policy: DyTC) -> tuple[list[tuple[Outcome, bool]], int]:
        """Walk the tree with the world's truth: (tested chain nodes, each with the outcome
        `policy` learns it by; tokens committed)."""
        tested: list[tuple[Outcome, bool]] = []
        node, tokens = 0, 1
        while self.children[node]:
            nxt = None
            for child in self.children[node]:
                draft, rank = self.draft[child], self.rank[child]
                name = policy.outcome(draft, self.draft[node], self.match(node), self.margin(child))
                if rank > 0:
                    p = self.world.siblings[draft][rank - 1]
                elif draft in (PLD, RECYCLE) and self.draft[node] == draft:  # extends its chain
                    p = self.world.alpha_next.get(draft, self.world.alpha[draft])
                else:
                    p = self.world.alpha[draft]
                accepted = self.rng.random() < p
                if rank == 0:
                    tested.append((name, accepted))
                if accepted:
                    nxt = child
                    break
            if nxt is None:
                break
            node, tokens = nxt, tokens + 1
        return tested, tokens


def run_dytc(
    world: World,
    steps: int,
    seed: int,
    config: DyTCConfig | None = None,
    drafts: Sequence[str] = ("cheap", "good", PLD, RECYCLE),
    policy: DyTC | None = None,
) -> tuple[float, DyTC, list[int]]:
    """DyTC for `steps` steps, as the loop runs it (`schedules.CasSpec`), `drafts` offered (the
    policy drafts a free one only if among its `free_drafts`); returns (tokens per second, the
    trained policy, tree sizes). A tree's depth is bounded by its node budget, as in the loop
    away from the end of the answer and of the cache."""
    rng = random.Random(seed)
    cfg = config if config is not None else DyTCConfig()
    if policy is None:
        policy = RefinedDyTC([d for d in drafts if d not in (PLD, RECYCLE)], cfg)
    cfg = policy.config
    tokens, seconds, sizes = 0, 0.0, []
    for _ in range(steps):
        drafter = SimDrafter(world, rng, cfg.max_tree_size, cfg.max_tree_size)
        policy.grow(drafter, drafts)
        tested, committed = drafter.verify(policy)
        verify = world.verify(drafter.size()) * (1 + world.noise * rng.uniform(-1, 1))
        timings = {d: (drafter.calls[d], drafter.draft_time[d]) for d in drafter.calls}
        policy.observe_step(tested, drafter.size(), verify, timings)
        tokens += committed
        seconds += drafter.seconds() + verify
        sizes.append(drafter.size())
    return tokens / seconds, policy, sizes


def run_fixed(world: World, steps: int, seed: int, draft: str | None, k: int) -> float:
    """A fixed schedule: `k` tokens of `draft` per step (None = plain decoding)."""
    rng = random.Random(seed)
    labels = RefinedDyTC([])  # names the tested nodes, once: a fixed schedule learns nothing
    tokens, seconds = 0, 0.0
    for _ in range(steps):
        drafter = SimDrafter(world, rng, 64, 64)
        if draft is not None and (draft not in (PLD, RECYCLE) or drafter.offers(0, draft)):
            drafter.expand(0, draft, k, 1)
        _, committed = drafter.verify(labels)
        tokens += committed
        seconds += drafter.seconds() + world.verify(drafter.size())
    return tokens / seconds


def best_fixed(world: World, steps: int, seed: int, drafts: Sequence[str]) -> dict[str, float]:
    """tokens/s of plain decoding and of every (draft, k) schedule, k = 1..8."""
    out = {"plain": run_fixed(world, steps, seed, None, 0)}
    for draft in drafts:
        for k in range(1, 9):
            out[f"{draft}-k{k}"] = run_fixed(world, steps, seed, draft, k)
    return out
