"""Argument checks of DyTC's configuration, estimates, cost curves and formulas.

Pure value checks (`casspec_ref.dytc`), each raising a `ValueError` that names the argument, its
value and what is allowed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def check_dytc_config(cfg: Any) -> None:
    """Every field of a `DyTCConfig` against its allowed range."""
    checks = [
        ("ema_weight", 0.0 < cfg.ema_weight <= 1.0, "in (0, 1]"),
        ("window", cfg.window >= 1, ">= 1"),
        ("warmup", cfg.warmup >= 0, ">= 0"),
        ("prior_alpha", 0.0 <= cfg.prior_alpha <= 1.0, "in [0, 1]"),
        ("prior_pld_alpha", 0.0 <= cfg.prior_pld_alpha <= 1.0, "in [0, 1]"),
        ("prior_recycle_alpha", 0.0 <= cfg.prior_recycle_alpha <= 1.0, "in [0, 1]"),
        ("max_k", cfg.max_k >= 1, ">= 1"),
        ("max_tree_size", cfg.max_tree_size >= 1, ">= 1"),
        ("siblings", cfg.siblings >= 1, ">= 1"),
        ("confidence_weight", 0.0 <= cfg.confidence_weight <= 1.0, "in [0, 1]"),
        ("min_gain", cfg.min_gain >= 1.0, ">= 1"),
        ("long_context", cfg.long_context >= 1, ">= 1"),
        ("cost_weight", 0.0 < cfg.cost_weight <= 1.0, "in (0, 1]"),
        ("reexplore", 0.0 <= cfg.reexplore < 1.0, "in [0, 1)"),
        ("explore_fraction", 0.0 <= cfg.explore_fraction < 1.0, "in [0, 1)"),
        ("explore_horizon", cfg.explore_horizon >= 1, ">= 1"),
        ("calibration_sizes", all(n >= 1 for n in cfg.calibration_sizes), "sizes >= 1"),
    ]
    for name, ok, allowed in checks:
        if not ok:
            value = getattr(cfg, name)
            raise ValueError(f"DyTCConfig.{name}={value!r} is invalid: allowed {allowed}")


def check_draft_names(drafts: Sequence[str], reserved: Sequence[str]) -> None:
    """A model draft's name is a non-empty string, not a free draft's."""
    for name in drafts:
        if not isinstance(name, str) or not name or name in reserved:
            raise ValueError(
                f"draft name {name!r} is invalid: allowed is a non-empty string "
                f"other than {list(reserved)}"
            )


def check_paper_config(method: str, refinements: Sequence[str]) -> None:
    """The paper's preset runs with every refinement off."""
    if refinements:
        raise ValueError(
            f"method {method!r} runs the paper's policy alone, but the DyTC config switches on "
            f"{', '.join(refinements)}: pass DyTCConfig.paper(...) or use method 'cas-spec'"
        )


def check_prior(prior: float) -> None:
    if not 0.0 <= prior <= 1.0:
        raise ValueError(f"prior={prior!r} is invalid: allowed is a probability in [0, 1]")


def check_outcome(accepted: float) -> None:
    if not 0.0 <= accepted <= 1.0:
        raise ValueError(f"an acceptance observation must lie in [0, 1], got {accepted!r}")


def check_cost_curve(weight: float, horizon: float) -> None:
    if not 0.0 < weight <= 1.0:
        raise ValueError(f"weight={weight!r} is invalid: allowed is in (0, 1]")
    if horizon < 1:
        raise ValueError(f"horizon={horizon!r} is invalid: allowed is >= 1")


def check_timing(tokens: int, seconds: float) -> None:
    if tokens < 1:
        raise ValueError(f"a forward processes >= 1 token, got {tokens!r}")
    if seconds < 0 or not math.isfinite(seconds):
        raise ValueError(f"a latency must be a finite number of seconds >= 0, got {seconds!r}")


def check_measured(n_sizes: int) -> None:
    if n_sizes == 0:
        raise ValueError("CostCurve.predict needs at least one observation")


def check_k(k: int, smallest: int) -> None:
    if k < smallest:
        raise ValueError(f"k={k} is invalid: allowed is >= {smallest}")


def check_t_score_cost(denominator: float) -> None:
    if denominator <= 0:
        raise ValueError(f"c_S * k + c_PLD + c_verify must be > 0, got {denominator!r}")


def check_verify_costs(c_verify: Sequence[float]) -> None:
    if not c_verify:
        raise ValueError("best_k needs the verify cost of at least one k")


def check_tree_estimate(parents: Sequence[int], accept: Sequence[float]) -> None:
    """Node i's parent and acceptance, for every node; parents precede children."""
    if len(parents) != len(accept):
        raise ValueError(f"parents ({len(parents)}) and accept ({len(accept)}) differ in length")
    for i in range(1, len(parents)):
        if not 0 <= parents[i] < i:
            raise ValueError(f"node {i} has parent {parents[i]}: parents must precede children")


def check_ewif_costs(total: float, step_cost: float) -> None:
    if total <= 0 or step_cost <= 0:
        raise ValueError("costs must be > 0 to form an EWIF")
