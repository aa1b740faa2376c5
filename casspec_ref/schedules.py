"""Draft schedules: how one speculative step drafts its token tree (docs/method.md §3-§4).

A schedule only *builds* a `DraftTree` through the step's `StepDrafter`; the loop verifies it with
the one verifier, so every schedule is lossless by the same argument. CAS-Spec's `DyTC` lives
here; the paper's baselines (`casspec_ref.baselines`) register themselves in `SCHEDULES`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from casspec_ref.base.dytc_checks import check_paper_config
from casspec_ref.base.input_checks import check_policy_knows
from casspec_ref.draft import StepDrafter
from casspec_ref.dytc import PLD, RECYCLE, DyTCConfig, DyTCPolicy, Outcome
from casspec_ref.dytc_refinements import max_cascade_depth, outcome


@dataclass
class ScheduleSpec:
    """What a schedule is built from (the baselines' ``options`` are passed through untyped)."""

    levels: list[str]
    n_layers: int
    dytc: DyTCConfig = field(default_factory=DyTCConfig)
    policy: DyTCPolicy | None = None
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


class DyTC(Schedule):
    """CAS-Spec's dynamic tree cascade: every decision is `DyTCPolicy`'s (casspec_ref/dytc.py),
    among the model levels allowed at this context length, prompt lookup and recycled tokens."""

    name = "cas-spec"
    uses_recycler = True

    def __init__(self, spec: ScheduleSpec) -> None:
        self.level_names = list(spec.levels)
        # A caller-owned policy carries its estimates across generations (updated in place).
        self.policy = spec.policy or DyTCPolicy(self.level_names, spec.dytc)
        check_policy_knows(self.policy.drafts, self.level_names)
        self.config = self.policy.config
        self.n_layers = spec.n_layers
        self.max_nodes = self.config.max_tree_size

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
        drafts = [*self.level_names[n - k :], PLD] if k > 0 else [PLD]
        if drafter.recycler is not None:
            drafts.append(RECYCLE)
        self.policy.grow(drafter, drafts)

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
            key = outcome(self.config, draft, parent_draft, match, margin)
            tested.append((key, node in on_path))
        self.policy.observe_step(tested, len(drafter.tree), verify_seconds, drafter.charged)


class PaperDyTC(DyTC):
    """DyTC running the paper's policy alone (`DyTCConfig.paper()`): what it loses against
    `cas-spec` is what this reference's refinements are worth. A config or policy passed in must
    have every refinement off (`DyTCConfig.paper(...)` sets the other knobs)."""

    name = "cas-spec:paper"

    def __init__(self, spec: ScheduleSpec) -> None:
        if spec.policy is None and spec.dytc == DyTCConfig():  # no config given: the preset
            spec = replace(spec, dytc=DyTCConfig.paper())
        config = spec.policy.config if spec.policy is not None else spec.dytc
        check_paper_config(self.name, config.refinements())
        super().__init__(spec)


#: Method name -> schedule class: DyTC, and the baselines (`casspec_ref.baselines` adds them
#: when `casspec_ref/__init__.py` imports it).
SCHEDULES: dict[str, type[Schedule]] = {DyTC.name: DyTC, PaperDyTC.name: PaperDyTC}
