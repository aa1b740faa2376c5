"""Drafting primitives: one step's token tree under construction, and how drafts add to it.

A `StepDrafter` lives for one speculative step: its schedule grows the step's `DraftTree` through
it (model drafts through `DraftRunner`, prompt lookup, recycled tokens), declaring how each
node's children were proposed (docs/method.md §5); the loop then verifies the tree. The child
rules each draft declares: `propose_children` (a model draft) and `add_chain` (prompt lookup and
recycled tokens, `DETERMINISTIC`); why each rule is lossless: docs/algorithm.md.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from casspec_ref.dsia.prompt_lookup import PromptLookup
from casspec_ref.dsia.recycle import TokenRecycler
from casspec_ref.dsia.virtual_draft import DraftRunner
from casspec_ref.dytc_config import PLD, RECYCLE
from casspec_ref.dytc_tree import Grown
from casspec_ref.plan import ExecutionPlan
from casspec_ref.sampling import RandomSource, target_law
from casspec_ref.tree import ChildRule, DraftTree


@dataclass(frozen=True)
class DraftSampling:
    """The sampling transforms drafts apply, identical to the target's (docs/method.md §5)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class NodeInfo:
    """Who drafted a node, and whether it continues its draft's chain (the first child of an
    expansion) rather than being a sibling."""

    source: str
    primary: bool


@dataclass(eq=False)
class StepDrafter:
    """The tree under construction in one step, and the primitives that grow it: the
    `dytc_tree.TreeDrafter` DyTC grows trees through, and the pieces the baselines use."""

    root_token: int
    context: Sequence[int]  # prompt + committed tokens; its last token is the root
    runner: DraftRunner | None
    pld: PromptLookup
    levels: dict[str, ExecutionPlan]
    sampling: DraftSampling
    rng: RandomSource
    max_nodes: int
    max_depth: int
    clock: Callable[[], float] = time.perf_counter  # injectable: DyTC's decisions read it
    recycler: TokenRecycler | None = None

    def __post_init__(self) -> None:
        self.tree = DraftTree(self.root_token)
        self.info: list[NodeInfo] = [NodeInfo("root", True)]
        self.charged: dict[str, tuple[int, float]] = {}  # per draft: (calls, seconds)
        self._lookups: dict[int, list[int]] = {}
        self._matched: dict[int, int] = {}  # node -> the length of lookup's match below it
        self._law_of: dict[int, tuple[str, int]] = {}  # chain-continuing model node -> law key
        self._margins: dict[int, float] = {}  # its margin, once asked for
        self._laws: dict[tuple[str, int], tuple[np.ndarray | None, np.ndarray]] = {}

    def size(self) -> int:
        return len(self.tree)

    def room(self, node: int) -> int:
        """How many more nodes may hang below `node` along one path."""
        return max(0, min(self.max_nodes - len(self.tree), self.max_depth - self.tree.depth(node)))

    def is_leaf(self, node: int) -> bool:
        return not self.tree.children(node)

    def seconds(self) -> float:
        return sum(seconds for _, seconds in self.charged.values())

    def path_tokens(self, node: int) -> list[int]:
        """[root token, drafted tokens down to `node`]: what a draft is fed to continue `node`."""
        return [self.tree.token(0)] + [self.tree.token(i) for i in self.tree.path_to(node)]

    def charge(self, name: str, start: float, calls: int = 1) -> None:
        """Book the time since `start` (and `calls` calls) to draft `name`."""
        calls_before, seconds = self.charged.get(name, (0, 0.0))
        self.charged[name] = (calls_before + calls, seconds + self.clock() - start)

    def add_node(
        self,
        parent: int,
        token: int,
        info: NodeInfo,
        rule: ChildRule = ChildRule.DETERMINISTIC,
        q: np.ndarray | None = None,
    ) -> int:
        """Add one child of `parent` (its rule and law q as `DraftTree.add_child` takes them)."""
        node = self.tree.add_child(parent, token, rule, q)
        self.info.append(info)
        return node

    def draft_logits(self, level: str, node: int) -> torch.Tensor:
        """The draft `level`'s logits (V,) for the token after `node`."""
        if self.runner is None:
            raise ValueError("this step has no draft runner (no model draft levels)")
        start, forwards = self.clock(), self.runner.forwards
        rows = self.runner.logits(self.levels[level], self.path_tokens(node))  # (len(path), V)
        # An answer from the runner's stored logits is no forward (DyTC learns per forward).
        self.charge(level, start, calls=self.runner.forwards - forwards)
        return rows[-1]  # (V,)

    def draft_law(
        self, level: str, node: int, logits: torch.Tensor
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """(q, confidence) after `node`, once per level and node: q is the processed law children
        are drawn from (None under greedy: children are the top tokens), confidence the draft's
        probability of each token (q itself when sampling, its temperature-1 law if greedy)."""
        key = (level, node)
        if key not in self._laws:
            s = self.sampling
            if s.greedy:
                self._laws[key] = (None, torch.softmax(logits.double(), -1).cpu().numpy())  # (V,)
            else:
                q = target_law(logits, s.temperature, s.top_k, s.top_p).cpu().numpy()  # (V,)
                self._laws[key] = (q, q)
        return self._laws[key]

    def propose_children(self, level: str, node: int, count: int) -> list[tuple[int, float]]:
        """Up to `count` children of `node` from model draft `level` (the first continues the
        chain): greedy, the top tokens; sampling, draws from q without replacement. Returns
        ``(child, the draft's probability of its token)``."""
        # Siblings need no extra depth, only room in the node budget.
        count = min(count, self.max_nodes - len(self.tree))
        if count < 1 or self.room(node) < 1:
            return []
        logits = self.draft_logits(level, node)  # (V,)
        q, confidence = self.draft_law(level, node, logits)
        if q is None:  # greedy
            tokens = torch.topk(logits, count).indices.tolist()
            rule, law = ChildRule.DETERMINISTIC, None
        else:
            tokens, rest = [], q.copy()
            for _ in range(min(count, int(np.count_nonzero(q)))):
                # Without replacement: each draw from q conditioned on the earlier draws.
                token = int(self.rng.categorical(rest / rest.sum()))
                tokens.append(token)
                rest[token] = 0.0
            rule = ChildRule.INDEPENDENT if len(tokens) == 1 else ChildRule.WITHOUT_REPLACEMENT
            law = q
        added = []
        for rank, token in enumerate(tokens):
            child = self.add_node(node, token, NodeInfo(level, rank == 0), rule, law)
            added.append((child, float(confidence[token])))
        if added:  # the chain's token: its margin is read from this law if asked (`margin`)
            self._law_of[added[0][0]] = (level, node)
        return added

    def time_target(self, sizes: Sequence[int]) -> dict[int, float]:
        """Seconds of one target forward over each of `sizes` scratch tokens, as far as the cache
        has room: the verify cost curve DyTC starts from. Each size runs twice and the faster
        counts: a size's first forward may pay one-time setup (a kernel's packed weights)."""
        if self.runner is None:
            return {}
        model, cache, base = self.runner.model, self.runner.cache, self.runner.base
        seconds: dict[int, float] = {}
        for size in [s for s in sizes if s <= self.room(0) + 1] * 2:
            tokens = torch.full((1, size), self.tree.token(0), device=cache.k.device)  # (1, T)
            positions = torch.arange(base, base + size, device=cache.k.device)[None]  # (1, T)
            start = self.clock()
            with torch.no_grad():
                logits = model(tokens, positions, cache=cache)  # (1, T, V)
            logits[0, -1, 0].item()  # a GPU runs the forward asynchronously: wait for it
            seconds[size] = min(seconds.get(size, math.inf), self.clock() - start)
            cache.truncate(base)  # scratch rows go; the verified prefix is untouched
        return seconds

    def lookup(self, node: int, k: int) -> list[int]:
        """Prompt lookup's proposal after the committed context and the path to `node`."""
        start = self.clock()
        found = self.pld.match(k, self.path_tokens(node)[1:])
        self._matched[node] = found.ngram
        self.charge(PLD, start)
        return list(found.tokens)

    def match(self, node: int) -> int:
        """How long a context suffix prompt lookup matched below `node` (0: none, or no lookup)."""
        return self._matched.get(node, 0)

    def margin(self, node: int) -> float | None:
        """A chain-continuing model-drafted node's margin (the refinement `margin_bins`,
        `dytc_refinements.outcome`), computed when first asked: only DyTC asks, so a fixed
        schedule pays nothing for it."""
        if node not in self._margins and node in self._law_of:
            confidence = self._laws[self._law_of[node]][1]  # (V,)
            p, best = confidence[self.tree.token(node)], int(confidence.argmax())
            first, second = confidence[best], np.delete(confidence, best).max(initial=-np.inf)
            self._margins[node] = float(p - (first if p < first else second))
        return self._margins.get(node)

    def add_chain(self, node: int, tokens: Sequence[int], source: str) -> list[int]:
        """Append fixed proposals (`DETERMINISTIC`) below `node`; returns the added nodes."""
        added = []
        for token in tokens:
            if self.room(node) < 1:
                break
            node = self.add_node(node, token, NodeInfo(source, True))
            added.append(node)
        return added

    def offers(self, node: int, draft: str) -> int:
        """How many tokens a free draft proposes below `node` (looked up once per node)."""
        room = self.room(node)
        if draft == PLD:
            if node not in self._lookups:
                self._lookups[node] = self.lookup(node, room)
            return len(self._lookups[node])
        if draft == RECYCLE and self.recycler is not None:
            return len(self.recycler.chain(self.tree.token(node), room))
        return 0

    def alternatives(self, node: int, draft: str, width: int) -> list[float]:
        """Confidence in the draft's top-`width` candidates below `node`, best first."""
        if draft == RECYCLE:
            if self.recycler is None:
                return []
            return [p for _, p in self.recycler.alternatives(self.tree.token(node), width)]
        logits = self.draft_logits(draft, node)  # (V,); the runner reuses it in `expand`
        _, confidence = self.draft_law(draft, node, logits)
        probs = torch.from_numpy(confidence)  # (V,)
        return torch.topk(probs, min(width, probs.shape[-1])).values.tolist()

    def expand(self, node: int, draft: str, k: int, width: int) -> Grown:
        """DyTC's one growth primitive: `width` children of `node` from `draft`, the first
        continuing as a chain of up to `k` tokens (see `casspec_ref.dytc_tree.TreeDrafter`)."""
        if draft == PLD:
            tokens = self._lookups.get(node) or self.lookup(node, k)
            nodes = self.add_chain(node, tokens[:k], PLD)
            return [(child, self.tree.parent(child), None) for child in nodes]
        if draft == RECYCLE:
            return self._expand_recycled(node, k, width)
        first = self.propose_children(draft, node, width)
        chain: Grown = [(child, node, conf) for child, conf in first[:1]]
        while chain and len(chain) < k:
            children = self.propose_children(draft, chain[-1][0], 1)
            if not children:
                break
            chain.append((children[0][0], chain[-1][0], children[0][1]))
        return chain + [(child, node, conf) for child, conf in first[1:]]

    def _expand_recycled(self, node: int, k: int, width: int) -> Grown:
        """The table's top-`width` successors of `node` as children, the first continued by
        walking the table (all `DETERMINISTIC`: no coin was involved)."""
        if self.recycler is None:
            return []
        start = self.clock()
        first = self.recycler.alternatives(self.tree.token(node), width)
        walk = self.recycler.chain(first[0][0], k - 1) if first else []
        self.charge(RECYCLE, start)
        grown: Grown = []
        for rank, (token, prob) in enumerate(first):
            if self.room(node) < 1:
                break
            grown.append((self.add_node(node, token, NodeInfo(RECYCLE, rank == 0)), node, prob))
        nodes = self.add_chain(grown[0][0], [t for t, _ in walk], RECYCLE) if grown else []
        chain = [(child, self.tree.parent(child), walk[i][1]) for i, child in enumerate(nodes)]
        return grown[:1] + chain + grown[1:]
