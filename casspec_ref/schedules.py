"""Draft schedules: how one speculative step drafts its token tree (DyTC and the baselines).

Scope: docs/method.md §3 (vertical and horizontal cascades) and §4 (DyTC and the ablation
baselines of the paper): chain speculative decoding with one DSIA draft, PLD only, recycled tokens
only, vertical cascade (VC), horizontal cascade (HC), VC+HC (CS-Drafting), a SWIFT-style
confidence tree, a static tree, and CAS-Spec's DyTC. Every schedule only *builds* a `DraftTree`
through the step's `casspec_ref.draft.StepDrafter`; the loop in `casspec_ref.speculative`
verifies it with the one verifier, so every schedule is lossless by the same argument.

Choices and deviations (our reconstruction; the paper's code was not available): the VC review
keeps the reviewed draft's agreeing prefix of the lower proposal and then the reviewer's own
token; HC drafts the first `hc_split` positions with the most accurate level and the rest with the
cheapest level; the SWIFT-style tree follows draft confidence with fixed thresholds; the static
tree has a fixed branching per depth. Each is a named parameter of `ScheduleOptions`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from casspec_ref.draft import StepDrafter
from casspec_ref.dytc import PLD, RECYCLE, DyTCConfig, DyTCPolicy, max_cascade_depth


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


class Schedule:
    """A tree-drafting schedule. `build` drafts one step's tree; `observe` learns from it."""

    name = "schedule"
    needs_levels = True

    def __init__(self, options: ScheduleOptions | None = None) -> None:
        self.options = options if options is not None else ScheduleOptions()

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
        drafter.draft_chain(_top(list(drafter.levels)), 0, self.options.chain_k)


class VerticalCascade(Schedule):
    """VC: prompt lookup proposes, the most accurate level reviews it, then drafts on."""

    name = "vc"

    def build(self, drafter: StepDrafter) -> None:
        level, k = _top(list(drafter.levels)), self.options.chain_k
        node = drafter.review(level, 0, drafter.lookup(0, k))
        drafter.draft_chain(level, node, k - drafter.tree.depth(node))


class HorizontalCascade(Schedule):
    """HC: the most accurate level drafts the early positions, the cheapest the later ones."""

    name = "hc"

    def build(self, drafter: StepDrafter) -> None:
        names = list(drafter.levels)
        opts = self.options
        node = drafter.draft_chain(_top(names), 0, min(opts.hc_split, opts.chain_k))
        drafter.draft_chain(names[0], node, opts.chain_k - drafter.tree.depth(node))


class VCHC(Schedule):
    """CS-Drafting: HC whose later positions come from a VC (lookup reviewed by the cheapest)."""

    name = "vchc"

    def build(self, drafter: StepDrafter) -> None:
        names = list(drafter.levels)
        opts = self.options
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


class StaticTree(Schedule):
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
        super().__init__()
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
    options: ScheduleOptions = field(default_factory=ScheduleOptions)


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
    schedule = simple[method](spec.options)
    if schedule.needs_levels and not spec.levels:
        raise ValueError(f"method {method!r} needs at least one model draft level; got none")
    return schedule
