"""DyTC's knobs (the paper's, and a switch for each of this reference's refinements) and its
free drafts' names.

`DyTCConfig.paper()` is what the paper's policy reads (every refinement off, the notes' window of
20): `casspec_ref.dytc.DyTC` runs it. `DyTCConfig()` is this reference's refined policy:
`casspec_ref.dytc_refinements.RefinedDyTC` runs it, and with every switch off it decides exactly
as `DyTC` does. What each switch is worth depends on the machine's costs: the replay record in
docs/results.md measures each one alone. docs/method.md §4 sets one beside the other.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from casspec_ref.base import dytc_checks as checks

PLD = "pld"  # the prompt-lookup draft's name in a `RefinedDyTC`
RECYCLE = "recycle"  # the recycled-token draft (successors seen in earlier verify forwards)
FREE_DRAFTS = (PLD, RECYCLE)  # drafts that cost no forward: looked up, not computed

#: The switches of this reference's refinements, each documented at its field below.
REFINEMENTS = (
    "recycled_tokens",
    "optimistic_warmup",
    "margin_bins",
    "match_bins",
    "continuation_rate",
    "cost_table",
    "exploration",
)


@dataclass(frozen=True)
class DyTCConfig:
    """Every DyTC knob (allowed values: base/dytc_checks.py). Defaults: the refined policy."""

    # -- the paper's policy (docs/method.md §4) -----------------------------------------------
    ema_weight: float = 0.3  # w in a <- (1 - w) a + w mean(last `window` outcomes)
    # Outcomes in the window the EMA averages; the paper's notes say 20. 40 halves the window
    # mean's variance, for a lookup whose first token is accepted near the rate where it pays.
    window: int = 40
    # Outcomes before the EMA starts. Until then the estimate is the running mean with the prior
    # as one pseudo-outcome, or, with `optimistic_warmup`, the optimistic mean for a model draft
    # (`dytc_refinements.optimistic_mean`; a free draft then has no warm-up at all).
    warmup: int = 20
    prior_alpha: float = 0.6  # a model draft's estimate before any outcome
    prior_pld_alpha: float = 0.5
    prior_recycle_alpha: float = 0.3
    max_k: int = 8  # the longest chain one expansion drafts
    max_tree_size: int = 32  # nodes, root included
    siblings: int = 3  # the most children one expansion gives its leaf (1 = chains only)
    confidence_weight: float = 0.5  # w: a model-drafted node's estimate is w conf + (1 - w) alpha
    min_gain: float = 1.0  # grow only while the predicted EWIF improves by this factor
    cascade_depth_rule: bool = False  # K = min(3, log2(n_layers / 12)) model levels (seed article)
    long_context_drop: bool = False  # one model level fewer above `long_context` tokens
    long_context: int = 512  # the context length that triggers `long_context_drop`
    cost_weight: float = 0.3  # the weight of a new timing in its size's running estimate
    calibration_sizes: tuple[int, ...] = (2, 4, 8, 16)  # timed by scratch forwards first (or none)

    # -- this reference's refinements (dytc_refinements.py; `paper()` turns each off) ----------
    # A third free draft: the target's own top successors of a token, seen in earlier verify
    # forwards (`RECYCLE`, dsia/recycle.py); the paper drafts with the DSIA levels and PLD only.
    recycled_tokens: bool = True
    # A model draft's warm-up estimate counts the outcomes still to come as accepted, so a
    # chance start cannot switch a costly good draft off; free drafts skip the warm-up.
    optimistic_warmup: bool = True
    # A model draft's token is learned and valued by its margin's bin (`MARGINS`), and a chain is
    # drafted a token at a time once margins are known.
    margin_bins: bool = True
    # A lookup's first token is learned and valued by the length of the match it copies from.
    match_bins: bool = True
    # A free draft continuing its own chain is learned apart from its first token.
    continuation_rate: bool = True
    # Forward costs predicted from the per-size table (interpolated), not the linear model.
    cost_table: bool = True
    # Untested estimates relax up (`reexplore`), stale timings are retaken, and stale tree sizes
    # are predicted at the floor while a budget of `explore_fraction` of the time pays for it.
    exploration: bool = True
    reexplore: float = 0.02  # per step untested, how far up an estimate moves (`relax`)
    explore_fraction: float = 0.02  # the most of the time spent exploring sizes (0 = never)
    explore_horizon: int = 128  # steps after which a size's timing is stale

    def __post_init__(self) -> None:
        checks.check_dytc_config(self)

    @classmethod
    def paper(cls, **changes: Any) -> DyTCConfig:
        """The paper's policy alone: every refinement off and the notes' window of 20 outcomes;
        `changes` set any other field (a refinement switched back on measures that one)."""
        paper: dict[str, Any] = {name: False for name in REFINEMENTS}
        return cls(**{**paper, "window": 20, **changes})

    def refinements(self) -> list[str]:
        """The names of the refinements switched on."""
        return [name for name in REFINEMENTS if getattr(self, name)]
