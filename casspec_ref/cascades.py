"""Draft schedules: how one speculative step drafts its token tree (DyTC and the baselines).

Scope: docs/method.md §3 (vertical and horizontal cascades) and §4 (DyTC and the ablation
baselines of the paper): chain speculative decoding with one DSIA draft, PLD only, vertical
cascade (VC), horizontal cascade (HC), VC+HC (CS-Drafting), a SWIFT-style confidence tree, a
static tree, and CAS-Spec's DyTC. Every schedule only *builds* a `DraftTree`; the loop in
`casspec_ref.speculative` verifies it with the one verifier, so every schedule is lossless by
the same argument.

The drafting primitives live in `StepDrafter` (one per step), which is also the `TreeDrafter`
DyTC grows its trees through: model drafts run through `DraftRunner` (scratch rows of the
target's cache, reused along a path), prompt lookup through the one `PromptLookup` (at the root
and below it), recycled tokens through `TokenRecycler`.

How children are declared (docs/method.md §5):
- Greedy (temperature 0): a model draft proposes the top-P tokens of its logits and argmax chains;
  prompt lookup and cascade-reviewed tokens are fixed proposals. All are `DETERMINISTIC`.
- Sampling: a model draft draws its children from its processed law q (the same temperature,
  top-k, top-p transforms as the target): one child is `INDEPENDENT` with that q, several are
  `WITHOUT_REPLACEMENT` from that one q. Prompt lookup and reviewed tokens stay `DETERMINISTIC`:
  rule 4 is lossless for any child set that does not depend on the verifier's coins.
- One expansion = the children of one leaf, so each node's children come from one rule.

Choices and deviations (our reconstruction; the paper's code was not available): the VC review
keeps the reviewed draft's agreeing prefix of the lower proposal and then the reviewer's own
token; HC drafts the first `hc_split` positions with the most accurate level and the rest with the
cheapest level; the SWIFT-style tree follows draft confidence with fixed thresholds; the static
tree has a fixed branching per depth. Each is a named parameter of `ScheduleOptions`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from casspec_ref.dsia.prompt_lookup import PromptLookup
from casspec_ref.dsia.recycle import TokenRecycler
from casspec_ref.dsia.virtual_draft import DraftRunner
from casspec_ref.dytc import PLD, RECYCLE, DyTCConfig, DyTCPolicy, max_cascade_depth
from casspec_ref.plan import ExecutionPlan
from casspec_ref.sampling import RandomSource, target_law
from casspec_ref.tree import ChildRule, DraftTree


@dataclass(frozen=True)
class ScheduleOptions:
    """Parameters of the baseline schedules (DyTC's own live in `DyTCConfig`).

    Attributes:
        chain_k: tokens a chain (and VC, HC) drafts per step, >= 1.
        hc_split: positions HC drafts with the upper (most accurate) level before the lower one.
        swift_threshold: the SWIFT-style tree extends a node while the draft's probability of its
            own token is at least this, in [0, 1].
        swift_sibling: a sibling is added where the draft gives it at least this probability.
        swift_max_depth: depth budget of the SWIFT-style tree, >= 1.
        static_branching: children per node at each depth of the static tree (non-empty).
    """

    chain_k: int = 4
    hc_split: int = 2
    swift_threshold: float = 0.6
    swift_sibling: float = 0.2
    swift_max_depth: int = 8
    static_branching: tuple[int, ...] = (2, 2, 1, 1)

    def __post_init__(self) -> None:
        for name in ("chain_k", "swift_max_depth"):
            if getattr(self, name) < 1:
                raise ValueError(f"ScheduleOptions.{name}={getattr(self, name)} must be >= 1")
        if self.hc_split < 0:
            raise ValueError(f"ScheduleOptions.hc_split={self.hc_split} must be >= 0")
        for name in ("swift_threshold", "swift_sibling"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"ScheduleOptions.{name}={getattr(self, name)} must be in [0, 1]")
        if not self.static_branching or any(b < 1 for b in self.static_branching):
            raise ValueError(
                f"ScheduleOptions.static_branching={self.static_branching} must be a non-empty "
                "tuple of integers >= 1"
            )


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
    """Bookkeeping of one tree node: who drafted it, and whether it continues its draft's chain
    (the first child of an expansion) rather than being a sibling."""

    source: str
    primary: bool


class StepDrafter:
    """The tree under construction in one step, and the drafting primitives that grow it.

    It is the `casspec_ref.dytc.TreeDrafter` DyTC grows trees through (`size`, `room`,
    `is_leaf`, `offers`, `alternatives`, `expand`, `seconds`); the baselines call the primitives
    (`propose_children`, `draft_chain`, `review`, `lookup`, `add_chain`) directly.
    """

    def __init__(
        self,
        root_token: int,
        context: Sequence[int],
        runner: DraftRunner | None,
        pld: PromptLookup,
        levels: dict[str, ExecutionPlan],
        sampling: DraftSampling,
        rng: RandomSource,
        options: ScheduleOptions,
        max_nodes: int,
        max_depth: int,
        clock: Callable[[], float] = time.perf_counter,
        recycler: TokenRecycler | None = None,
    ) -> None:
        self.tree = DraftTree(root_token)
        self.info: list[NodeInfo] = [NodeInfo("root", True)]
        self.context = context  # prompt + committed tokens; its last token is the root
        self.runner = runner
        self.pld = pld
        self.recycler = recycler
        self.levels = levels
        self.sampling = sampling
        self.rng = rng
        self.options = options
        self.max_nodes = max_nodes
        self.max_depth = max_depth
        self.clock = clock  # injectable, so that DyTC's decisions can be made deterministic
        #: wall seconds and calls spent per draft name in this step
        self.spent: dict[str, float] = {}
        self.calls: dict[str, int] = {}
        self._lookups: dict[int, list[int]] = {}
        self._laws: dict[tuple[str, int], tuple[np.ndarray | None, np.ndarray]] = {}

    # -- reading the tree (and the TreeDrafter protocol) -------------------------------------
    def size(self) -> int:
        return len(self.tree)

    def room(self, node: int) -> int:
        """How many more nodes may hang below `node` along one path."""
        return max(0, min(self.max_nodes - len(self.tree), self.max_depth - self.tree.depth(node)))

    def is_leaf(self, node: int) -> bool:
        return not self.tree.children(node)

    def seconds(self) -> float:
        return sum(self.spent.values())

    def path_tokens(self, node: int) -> list[int]:
        """[root token, drafted tokens down to `node`]: what a draft is fed to continue `node`."""
        return [self.tree.token(0)] + [self.tree.token(i) for i in self.tree.path_to(node)]

    def _charge(self, name: str, start: float, calls: int = 1) -> None:
        self.spent[name] = self.spent.get(name, 0.0) + self.clock() - start
        self.calls[name] = self.calls.get(name, 0) + calls

    def _add(
        self, parent: int, token: int, rule: ChildRule, q: np.ndarray | None, info: NodeInfo
    ) -> int:
        node = self.tree.add_child(parent, token, rule, q)
        self.info.append(info)
        return node

    # -- model drafts -----------------------------------------------------------------------
    def draft_logits(self, level: str, node: int) -> torch.Tensor:
        """The draft `level`'s logits (V,) for the token after `node`."""
        if self.runner is None:
            raise ValueError("this step has no draft runner (no model draft levels)")
        start, forwards = self.clock(), self.runner.forwards
        rows = self.runner.logits(self.levels[level], self.path_tokens(node))  # (len(path), V)
        # A call answered from the runner's stored logits is not a forward: it must not halve
        # the per-forward cost DyTC learns.
        self._charge(level, start, calls=self.runner.forwards - forwards)
        return rows[-1]  # (V,)

    def draft_law(
        self, level: str, node: int, logits: torch.Tensor
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """(q, confidence) of draft `level` after `node`, from its `logits` (V,): q is the
        processed law children are sampled from (None under greedy, where children are the
        top tokens), confidence the draft's probability of each token (q itself when sampling,
        its temperature-1 law under greedy). Computed once per level and node: DyTC's width
        decision and the drafting that follows share them."""
        key = (level, node)
        if key not in self._laws:
            s = self.sampling
            if s.greedy:
                self._laws[key] = (None, torch.softmax(logits.double(), -1).numpy())  # (V,)
            else:
                q = target_law(logits, s.temperature, s.top_k, s.top_p).numpy()  # (V,) float64
                self._laws[key] = (q, q)
        return self._laws[key]

    def propose_children(self, level: str, node: int, count: int) -> list[tuple[int, float]]:
        """Add up to `count` children of `node` proposed by model draft `level`; the first one
        continues the chain. Greedy: the top-`count` tokens; sampling: drawn from q without
        replacement. Returns ``(child, the draft's probability of its token)``."""
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
            support = int(np.count_nonzero(q))
            tokens, rest = [], q.copy()
            for _ in range(min(count, support)):
                # Without replacement: each draw from q conditioned on the earlier draws.
                token = int(self.rng.categorical(rest / rest.sum()))
                tokens.append(token)
                rest[token] = 0.0
            rule = ChildRule.INDEPENDENT if len(tokens) == 1 else ChildRule.WITHOUT_REPLACEMENT
            law = q
        added = []
        for rank, token in enumerate(tokens):
            child = self._add(node, token, rule, law, NodeInfo(level, rank == 0))
            added.append((child, float(confidence[token])))
        return added

    def draft_chain(self, level: str, node: int, k: int, siblings: int = 1) -> int:
        """Draft up to `k` tokens below `node` with `level` (top-`siblings` at the first
        position); returns the deepest node of the chain."""
        for i in range(k):
            children = self.propose_children(level, node, siblings if i == 0 else 1)
            if not children:
                break
            node = children[0][0]
        return node

    def review(self, level: str, node: int, proposal: Sequence[int]) -> int:
        """Vertical cascade: `level` reviews a lower proposal in one forward, keeps its agreeing
        prefix and adds its own token at the first disagreement; returns the deepest node."""
        proposal = list(proposal)[: self.room(node)]  # never feed more than the cache has room
        if not proposal:
            return node
        if self.runner is None:
            raise ValueError("a vertical cascade needs a model draft level")
        path = self.path_tokens(node)
        start = self.clock()
        rows = self.runner.logits(self.levels[level], path + proposal)  # (len, V)
        self._charge(level, start)
        s = self.sampling
        for j, token in enumerate(proposal):
            if self.room(node) < 1:
                return node
            row = rows[len(path) - 1 + j]  # (V,)
            # The reviewer's choice: argmax of its processed law (ties to the lowest id).
            choice = int(target_law(row, 0.0).argmax()) if not s.greedy else int(row.argmax())
            info = NodeInfo(PLD if choice == token else level, True)
            node = self._add(node, choice, ChildRule.DETERMINISTIC, None, info)
            if choice != token:
                return node
        return node

    def time_target(self, sizes: Sequence[int]) -> dict[int, float]:
        """Seconds of one target forward over each of `sizes` scratch tokens (the root
        repeated), as far as the cache has room: the verify cost curve DyTC starts from."""
        if self.runner is None:
            return {}
        model, cache, base = self.runner.model, self.runner.cache, self.runner.base
        seconds = {}
        for size in sizes:
            if size > self.room(0) + 1:
                break
            tokens = torch.full((1, size), self.tree.token(0), device=cache.k.device)  # (1, T)
            positions = torch.arange(base, base + size, device=cache.k.device)[None]  # (1, T)
            start = self.clock()
            with torch.no_grad():
                model.forward(tokens, positions, cache=cache)
            seconds[size] = self.clock() - start
            cache.truncate(base)  # scratch rows go; the verified prefix is untouched
        return seconds

    # -- free drafts: prompt lookup and recycled tokens --------------------------------------
    def lookup(self, node: int, k: int) -> list[int]:
        """Prompt-lookup proposal after `node`: the one `PromptLookup` over the committed context
        followed by the path to `node`."""
        start = self.clock()
        tokens = self.pld.propose_after(self.path_tokens(node)[1:], k)
        self._charge(PLD, start)
        return tokens

    def add_chain(self, node: int, tokens: Sequence[int], source: str) -> list[int]:
        """Append fixed proposals (`DETERMINISTIC`) below `node`; returns the added nodes."""
        added = []
        for token in tokens:
            if self.room(node) < 1:
                break
            node = self._add(node, token, ChildRule.DETERMINISTIC, None, NodeInfo(source, True))
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

    def expand(
        self, node: int, draft: str, k: int, width: int
    ) -> list[tuple[int, int, float | None]]:
        """DyTC's one growth primitive: `width` children of `node` from `draft`, the first
        continuing as a chain of up to `k` tokens (see `casspec_ref.dytc.TreeDrafter`)."""
        if draft == PLD:
            tokens = self._lookups.get(node) or self.lookup(node, k)
            nodes = self.add_chain(node, tokens[:k], PLD)
            return [
                (child, parent, None)
                for child, parent in zip(nodes, [node, *nodes[:-1]], strict=True)
            ]
        if draft == RECYCLE:
            return self._expand_recycled(node, k, width)
        first = self.propose_children(draft, node, width)
        if not first:
            return []
        added: list[tuple[int, int, float | None]] = [(first[0][0], node, first[0][1])]
        for _ in range(k - 1):
            parent = added[-1][0]
            children = self.propose_children(draft, parent, 1)
            if not children:
                break
            added.append((children[0][0], parent, children[0][1]))
        added.extend((child, node, conf) for child, conf in first[1:])
        return added

    def _expand_recycled(
        self, node: int, k: int, width: int
    ) -> list[tuple[int, int, float | None]]:
        """Recycled tokens below `node`: the table's top-`width` successors as children, the
        first continued by walking the table (all `DETERMINISTIC`: no coin was involved)."""
        if self.recycler is None:
            return []
        start = self.clock()
        first = self.recycler.alternatives(self.tree.token(node), width)
        chain = self.recycler.chain(first[0][0], k - 1) if first else []
        self._charge(RECYCLE, start)
        added: list[tuple[int, int, float | None]] = []
        siblings: list[tuple[int, int, float | None]] = []
        for rank, (token, prob) in enumerate(first):
            if self.room(node) < 1:
                break
            child = self._add(
                node, token, ChildRule.DETERMINISTIC, None, NodeInfo(RECYCLE, rank == 0)
            )
            (added if rank == 0 else siblings).append((child, node, prob))
        for token, prob in chain if added else []:
            parent = added[-1][0]
            if self.room(parent) < 1:
                break
            child = self._add(parent, token, ChildRule.DETERMINISTIC, None, NodeInfo(RECYCLE, True))
            added.append((child, parent, prob))
        return added + siblings


class Schedule:
    """A tree-drafting schedule. `build` drafts one step's tree; `observe` learns from it."""

    name = "schedule"
    needs_levels = True

    def build(self, drafter: StepDrafter) -> None:
        raise NotImplementedError

    def observe(
        self, drafter: StepDrafter, accepted: Sequence[int], verify_seconds: float, prefix_len: int
    ) -> None:
        """Default: nothing to learn."""


def _top(levels: Sequence[str]) -> str:
    # Hierarchies are ordered cheapest first (casspec_ref.dsia.compose): the last level is the
    # most accurate one.
    return levels[-1]


class PLDOnly(Schedule):
    """Prompt lookup alone: its whole proposal as one deterministic chain (no model draft)."""

    name = "pld"
    needs_levels = False

    def build(self, drafter: StepDrafter) -> None:
        drafter.add_chain(0, drafter.lookup(0, drafter.pld.config.max_proposal), PLD)


class RecycleOnly(Schedule):
    """Recycled tokens alone: a walk of the successor table as one deterministic chain, as long
    as prompt lookup's proposals (`PromptLookupConfig.max_proposal`)."""

    name = "recycle"
    needs_levels = False

    def build(self, drafter: StepDrafter) -> None:
        drafter.expand(0, RECYCLE, drafter.pld.config.max_proposal, 1)


class Chain(Schedule):
    """Chain speculative decoding with one DSIA draft (the most accurate level)."""

    name = "chain"

    def build(self, drafter: StepDrafter) -> None:
        drafter.draft_chain(_top(list(drafter.levels)), 0, drafter.options.chain_k)


class VerticalCascade(Schedule):
    """VC: prompt lookup proposes, the most accurate level reviews it, then drafts on."""

    name = "vc"

    def build(self, drafter: StepDrafter) -> None:
        level, k = _top(list(drafter.levels)), drafter.options.chain_k
        node = drafter.review(level, 0, drafter.lookup(0, k))
        drafter.draft_chain(level, node, k - drafter.tree.depth(node))


class HorizontalCascade(Schedule):
    """HC: the most accurate level drafts the early positions, the cheapest the later ones."""

    name = "hc"

    def build(self, drafter: StepDrafter) -> None:
        names = list(drafter.levels)
        opts = drafter.options
        node = drafter.draft_chain(_top(names), 0, min(opts.hc_split, opts.chain_k))
        drafter.draft_chain(names[0], node, opts.chain_k - drafter.tree.depth(node))


class VCHC(Schedule):
    """CS-Drafting: HC whose later positions come from a VC (lookup reviewed by the cheapest)."""

    name = "vchc"

    def build(self, drafter: StepDrafter) -> None:
        names = list(drafter.levels)
        opts = drafter.options
        node = drafter.draft_chain(_top(names), 0, min(opts.hc_split, opts.chain_k))
        rest = opts.chain_k - drafter.tree.depth(node)
        if rest > 0:
            node = drafter.review(names[0], node, drafter.lookup(node, rest))
            drafter.draft_chain(names[0], node, opts.chain_k - drafter.tree.depth(node))


class SwiftTree(Schedule):
    """A SWIFT-style confidence tree with the cheapest (layer-skipping) level: extend the chain
    while the draft is confident, add a sibling wherever the runner-up is likely."""

    name = "swift-tree"

    def build(self, drafter: StepDrafter) -> None:
        level, opts = list(drafter.levels)[0], drafter.options
        node = 0
        while drafter.tree.depth(node) < opts.swift_max_depth and drafter.room(node) >= 1:
            logits = drafter.draft_logits(level, node)  # (V,), reused by propose_children
            probs = torch.softmax(logits.double(), -1)  # (V,)
            top2 = torch.topk(probs, 2).values.tolist()
            width = 2 if top2[1] >= opts.swift_sibling else 1
            children = drafter.propose_children(level, node, width)
            if not children or top2[0] < opts.swift_threshold:
                break
            node = children[0][0]


class StaticTree(Schedule):
    """A fixed-shape tree: at depth d every node gets `static_branching[d]` children."""

    name = "static-tree"

    def build(self, drafter: StepDrafter) -> None:
        level = _top(list(drafter.levels))
        frontier = [0]
        for width in drafter.options.static_branching:
            nxt: list[int] = []
            for node in frontier:
                nxt.extend(child for child, _ in drafter.propose_children(level, node, width))
            frontier = nxt
            if not frontier:
                break


class DyTC(Schedule):
    """CAS-Spec's dynamic tree cascade: the tree is grown by `DyTCPolicy.grow`.

    The model levels allowed at this context length (the seed article's depth rules, when
    enabled), prompt lookup and recycled tokens are the drafts DyTC chooses from; every
    decision is the policy's (casspec_ref/dytc.py). This class only connects the policy to one
    step's `StepDrafter` and reports the verified outcome back.
    """

    name = "cas-spec"
    needs_levels = False

    def __init__(
        self,
        levels: Sequence[str],
        n_layers: int,
        config: DyTCConfig | None = None,
        policy: DyTCPolicy | None = None,
    ):
        self.level_names = list(levels)
        if policy is not None:
            # A caller-owned policy carries its estimates across generations (updated in place).
            missing = sorted(set(self.level_names) - set(policy.drafts))
            if missing:
                raise ValueError(
                    f"the DyTC policy knows drafts {list(policy.drafts)} but the hierarchy has "
                    f"levels {missing} it does not know"
                )
            self.config = policy.config
            self.policy = policy
        else:
            self.config = config if config is not None else DyTCConfig()
            self.policy = DyTCPolicy(self.level_names, self.config)
        self.n_layers = n_layers

    def _allowed_levels(self, context_len: int) -> list[str]:
        k = max_cascade_depth(
            self.n_layers, context_len, n_levels=len(self.level_names), config=self.config
        )
        # Keep the k most accurate levels (hierarchies are ordered cheapest first).
        return self.level_names[len(self.level_names) - k :] if k > 0 else []

    def build(self, drafter: StepDrafter) -> None:
        if not self.policy.ready():
            # The first step measures what the decisions need: the target's cost over a few
            # tree sizes (this step itself is plain, and times a single token).
            for size, seconds in drafter.time_target(self.config.calibration_sizes).items():
                self.policy.verify_cost.observe(size, seconds)
            return
        drafts = [*self._allowed_levels(len(drafter.context)), PLD]
        if drafter.recycler is not None:
            drafts.append(RECYCLE)
        self.policy.grow(drafter, drafts)

    def observe(
        self, drafter: StepDrafter, accepted: Sequence[int], verify_seconds: float, prefix_len: int
    ) -> None:
        on_path = {0, *accepted}
        tested = [
            (info.source, node in on_path)
            for node, info in enumerate(drafter.info)
            if node > 0 and info.primary and drafter.tree.parent(node) in on_path
        ]
        timings = {
            name: (drafter.calls.get(name, 0), seconds) for name, seconds in drafter.spent.items()
        }
        self.policy.observe_step(tested, len(drafter.tree), verify_seconds, timings)


@dataclass
class ScheduleSpec:
    """What `make_schedule` needs to know about the model and the hierarchy."""

    levels: list[str]
    n_layers: int
    dytc: DyTCConfig = field(default_factory=DyTCConfig)
    policy: DyTCPolicy | None = None


def make_schedule(method: str, spec: ScheduleSpec) -> Schedule:
    """The schedule of a method name (`casspec_ref.speculative.METHODS`, "ar" excluded)."""
    simple: dict[str, type[Schedule]] = {
        "pld": PLDOnly,
        "recycle": RecycleOnly,
        "chain": Chain,
        "vc": VerticalCascade,
        "hc": HorizontalCascade,
        "vchc": VCHC,
        "swift-tree": SwiftTree,
        "static-tree": StaticTree,
    }
    if method == "cas-spec":
        return DyTC(spec.levels, spec.n_layers, spec.dytc, spec.policy)
    if method not in simple:
        raise ValueError(f"unknown method {method!r}: allowed are {sorted([*simple, 'cas-spec'])}")
    schedule = simple[method]()
    if schedule.needs_levels and not spec.levels:
        raise ValueError(f"method {method!r} needs at least one model draft level; got none")
    return schedule
