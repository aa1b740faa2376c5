"""Draft schedules: how one speculative step drafts its token tree (docs/method.md §3-§4).

A schedule only *builds* a `DraftTree` through the step's `StepDrafter`; the loop verifies it with
the one verifier, so every schedule is lossless by the same argument. CAS-Spec's schedules live
here (`CasSpec`, on this reference's DyTC, and `PaperCasSpec`, on the paper's); the paper's
baselines (`casspec_ref.baselines`) register themselves in `SCHEDULES`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from casspec_ref.base.dytc_checks import check_paper_config
from casspec_ref.base.input_checks import check_policy_knows
from casspec_ref.draft import StepDrafter
from casspec_ref.dytc import DyTC
from casspec_ref.dytc_config import RECYCLE, DyTCConfig
from casspec_ref.dytc_estimates import Outcome
from casspec_ref.dytc_refinements import RefinedDyTC


@dataclass
class ScheduleSpec:
    """What a schedule is built from (the baselines' ``options`` are passed through untyped)."""

    levels: list[str]
    n_layers: int
    dytc: DyTCConfig = field(default_factory=DyTCConfig)
    policy: DyTC | None = None
    options: Any = None


class Schedule:
    """A tree-drafting schedule. `build` drafts one step's tree; `observe` learns from it."""

    name = "schedule"
    uses_levels = True  # its steps get the model draft levels
    uses_recycler = False  # its steps keep a table of recycled tokens
    max_nodes = 64  # the largest tree one step may draft

    def __init__(self, spec: ScheduleSpec) -> None:
        raise NotImplementedError

    def build(self, drafter: StepDrafter) -> None:
        raise NotImplementedError

    def observe(self, drafter: StepDrafter, accepted: Sequence[int], verify_seconds: float) -> None:
        """Default: nothing to learn."""


def max_cascade_depth(n_layers: int, context_len: int, *, n_levels: int, config: DyTCConfig) -> int:
    """How many model draft levels DyTC may use: all, unless the seed article's rules are on."""
    if config.cascade_depth_rule:
        # K = min(3, log2(L / 12)), at least one level: a 30-layer model gets 1.
        n_levels = min(n_levels, max(1, min(3, int(math.log2(max(n_layers, 12) / 12)))))
    if config.long_context_drop and context_len > config.long_context:
        n_levels = max(0, n_levels - 1)
    return n_levels


class CasSpec(Schedule):
    """CAS-Spec: every decision is its DyTC policy's (this reference's, `RefinedDyTC`), among
    the model levels allowed at this context length and the policy's free drafts."""

    name = "cas-spec"

    def __init__(self, spec: ScheduleSpec) -> None:
        self.level_names = list(spec.levels)
        # A caller-owned policy carries its estimates across generations (updated in place).
        self.policy = spec.policy or self.new_policy(spec)
        check_policy_knows(self.policy.drafts, self.level_names)
        self.config = self.policy.config
        self.n_layers = spec.n_layers
        self.max_nodes = self.config.max_tree_size
        self.uses_recycler = RECYCLE in self.policy.free_drafts

    def new_policy(self, spec: ScheduleSpec) -> DyTC:
        return RefinedDyTC(self.level_names, spec.dytc)

    def build(self, drafter: StepDrafter) -> None:
        if not self.policy.ready():
            # The first step measures what the decisions need: the target's cost over a few
            # tree sizes (this step itself is plain, and times a single token).
            for size, seconds in drafter.time_target(self.config.calibration_sizes).items():
                self.policy.verify_cost.observe(size, seconds)
            return
        n = len(self.level_names)
        k = max_cascade_depth(self.n_layers, len(drafter.context), n_levels=n, config=self.config)
        # The k most accurate levels are allowed (hierarchies are ordered cheapest first).
        levels = self.level_names[n - k :] if k > 0 else []
        free = [d for d in self.policy.free_drafts if d != RECYCLE or drafter.recycler is not None]
        self.policy.grow(drafter, [*levels, *free])

    def observe(self, drafter: StepDrafter, accepted: Sequence[int], verify_seconds: float) -> None:
        """Each chain-continuing node whose parent was accepted was tested: its outcome teaches
        the estimate it was valued by (a sibling is valued from its draft's confidence)."""
        on_path = {0, *accepted}
        tested: list[tuple[Outcome, bool]] = []
        for node in range(1, len(drafter.info)):
            parent = drafter.tree.parent(node)
            if not drafter.info[node].primary or parent not in on_path:
                continue
            draft, parent_draft = drafter.info[node].source, drafter.info[parent].source
            match, margin = drafter.match(parent), drafter.margin(node)
            key = self.policy.outcome(draft, parent_draft, match, margin)
            tested.append((key, node in on_path))
        self.policy.observe_step(tested, len(drafter.tree), verify_seconds, drafter.charged)


class PaperCasSpec(CasSpec):
    """CAS-Spec on the paper's DyTC alone (`casspec_ref.dytc.DyTC`, `DyTCConfig.paper()`): no
    recycled tokens, no refinement. What it loses against `cas-spec` is what this reference's
    refinements are worth. A config passed in must have every refinement off
    (`DyTCConfig.paper(...)` sets the other knobs); a policy passed in must be a paper `DyTC`."""

    name = "cas-spec:paper"

    def __init__(self, spec: ScheduleSpec) -> None:
        if spec.policy is None and spec.dytc == DyTCConfig():  # no config given: the preset
            spec = replace(spec, dytc=DyTCConfig.paper())
        policy = spec.policy
        config = policy.config if policy is not None else spec.dytc
        check_paper_config(self.name, config.refinements())
        if policy is not None and type(policy) is not DyTC:
            raise ValueError(
                f"method {self.name!r} runs the paper's DyTC, but the policy passed in is a "
                f"{type(policy).__name__}: pass casspec_ref.dytc.DyTC(...) or use 'cas-spec'"
            )
        super().__init__(spec)

    def new_policy(self, spec: ScheduleSpec) -> DyTC:
        return DyTC(self.level_names, spec.dytc)


#: Method name -> schedule class: CAS-Spec, and the baselines (`casspec_ref.baselines` adds them
#: when `casspec_ref/__init__.py` imports it).
SCHEDULES: dict[str, type[Schedule]] = {CasSpec.name: CasSpec, PaperCasSpec.name: PaperCasSpec}
