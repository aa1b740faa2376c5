"""The paper's comparison schedules: chain speculative decoding with one DSIA draft, prompt
lookup or recycled tokens alone, the vertical (VC) and horizontal (HC) cascades, VC+HC
(CS-Drafting), a SWIFT-style confidence tree and a static tree; and ours, prompt lookup else a
chain (the fixed rule DyTC must beat on a CPU). Their parameters: `ScheduleOptions`; the choices
behind them: docs/design.md ("The loop, the baselines and the bench")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from casspec_ref.base.input_checks import check_option_type
from casspec_ref.baselines.drafting import draft_chain, review
from casspec_ref.draft import StepDrafter
from casspec_ref.dytc_config import PLD, RECYCLE
from casspec_ref.schedules import Schedule, ScheduleSpec


@dataclass(frozen=True)
class ScheduleOptions:
    """Parameters of the baseline schedules (DyTC's own live in `DyTCConfig`)."""

    chain_k: int = 4  # tokens a chain (and VC, HC, pld-or-chain) drafts per step, >= 1
    lookup_k: int = 5  # the most tokens pld-or-chain takes from prompt lookup, >= 1
    hc_split: int = 2  # positions HC drafts with the most accurate level, then the cheapest
    swift_threshold: float = 0.6  # SWIFT extends a node while its token's probability >= this
    swift_sibling: float = 0.2  # ... and adds a sibling with at least this probability
    swift_max_depth: int = 8  # depth budget of the SWIFT-style tree, >= 1
    static_branching: tuple[int, ...] = (2, 2, 1, 1)  # children per node at each depth

    def __post_init__(self) -> None:
        for name in ("chain_k", "lookup_k", "swift_max_depth"):
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


class Baseline(Schedule):
    """A fixed schedule, parameterized by `ScheduleOptions` (``spec.options``)."""

    def __init__(self, spec: ScheduleSpec) -> None:
        if spec.options is not None:
            check_option_type(spec.options, ScheduleOptions)
        if self.uses_levels and not spec.levels:
            raise ValueError(f"method {self.name!r} needs at least one model draft level; got none")
        self.options = spec.options if spec.options is not None else ScheduleOptions()


def _top(levels: Sequence[str]) -> str:
    # Hierarchies are ordered cheapest first (casspec_ref.dsia.compose): the last level is the
    # most accurate one.
    return levels[-1]


def _vertical(drafter: StepDrafter, level: str, node: int, depth: int) -> None:
    """A vertical cascade below `node`, down to `depth`: prompt lookup proposes, `level` reviews
    the proposal in one forward, then drafts on (VC from the root; VC+HC's later positions)."""
    rest = depth - drafter.tree.depth(node)
    if rest > 0:
        node = review(drafter, level, node, drafter.lookup(node, rest))
        draft_chain(drafter, level, node, depth - drafter.tree.depth(node))


def _early_positions(drafter: StepDrafter, opts: ScheduleOptions) -> int:
    """HC's and VC+HC's first `hc_split` positions, drafted by the most accurate level; returns
    the deepest node."""
    k = min(opts.hc_split, opts.chain_k)
    return draft_chain(drafter, _top(list(drafter.levels)), 0, k)


class PLDOnly(Baseline):
    """Prompt lookup alone: its whole proposal as one deterministic chain (no model draft)."""

    name = "pld"
    uses_levels = False

    def build(self, drafter: StepDrafter) -> None:
        drafter.add_chain(0, drafter.lookup(0, drafter.pld.config.max_proposal), PLD)


class RecycleOnly(Baseline):
    """Recycled tokens alone: a walk of the successor table as one deterministic chain, as long
    as prompt lookup's proposals (`PromptLookupConfig.max_proposal`)."""

    name = "recycle"
    uses_levels = False
    uses_recycler = True

    def build(self, drafter: StepDrafter) -> None:
        drafter.expand(0, RECYCLE, drafter.pld.config.max_proposal, 1)


class Chain(Baseline):
    """Chain speculative decoding with one DSIA draft (the most accurate level)."""

    name = "chain"

    def build(self, drafter: StepDrafter) -> None:
        draft_chain(drafter, _top(list(drafter.levels)), 0, self.options.chain_k)


class LookupOrChain(Baseline):
    """Prompt lookup's proposal when it has one, else a chain of the most accurate level: the
    simplest fixed cascade of a free draft and a model draft (one rule, no estimates)."""

    name = "pld-or-chain"

    def build(self, drafter: StepDrafter) -> None:
        if tokens := drafter.lookup(0, self.options.lookup_k):
            drafter.add_chain(0, tokens, PLD)
        else:
            draft_chain(drafter, _top(list(drafter.levels)), 0, self.options.chain_k)


class VerticalCascade(Baseline):
    """VC: prompt lookup proposes, the most accurate level reviews it, then drafts on."""

    name = "vc"

    def build(self, drafter: StepDrafter) -> None:
        _vertical(drafter, _top(list(drafter.levels)), 0, self.options.chain_k)


class HorizontalCascade(Baseline):
    """HC: the most accurate level drafts the early positions, the cheapest the later ones."""

    name = "hc"

    def build(self, drafter: StepDrafter) -> None:
        node = _early_positions(drafter, self.options)
        cheapest, k = list(drafter.levels)[0], self.options.chain_k
        draft_chain(drafter, cheapest, node, k - drafter.tree.depth(node))


class VCHC(Baseline):
    """CS-Drafting: HC whose later positions come from a VC (lookup reviewed by the cheapest)."""

    name = "vchc"

    def build(self, drafter: StepDrafter) -> None:
        node = _early_positions(drafter, self.options)
        _vertical(drafter, list(drafter.levels)[0], node, self.options.chain_k)


class SwiftTree(Baseline):
    """A SWIFT-style confidence tree with the cheapest (layer-skipping) level: extend the chain
    while the draft is confident, add a sibling wherever the runner-up is likely."""

    name = "swift-tree"

    def build(self, drafter: StepDrafter) -> None:
        level, opts = list(drafter.levels)[0], self.options
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


class StaticTree(Baseline):
    """A fixed-shape tree: at depth d every node gets `static_branching[d]` children."""

    name = "static-tree"

    def build(self, drafter: StepDrafter) -> None:
        level = _top(list(drafter.levels))
        frontier = [0]
        for width in self.options.static_branching:
            nxt: list[int] = []
            for node in frontier:
                nxt.extend(child for child, _ in drafter.propose_children(level, node, width))
            frontier = nxt
            if not frontier:
                break


#: In the order `casspec_ref.speculative.METHODS` lists them.
BASELINES = (
    PLDOnly,
    Chain,
    LookupOrChain,
    VerticalCascade,
    HorizontalCascade,
    VCHC,
    SwiftTree,
    StaticTree,
    RecycleOnly,
)
