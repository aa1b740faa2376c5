"""Early exit: run the first ``exit_after`` blocks, then the shared final norm and LM head.

Scope: docs/method.md §2 ("Early exit"); the seed article's L1 draft combines it with sparsity.
No extra head is trained or stored: the exit reuses the target's own final norm and head
(`ExecutionPlan.exit_after`), so the draft adds no weights. On small models it is a weak draft
(docs/smollm2.md: exiting after 25 of 30 layers keeps ~0.39 greedy agreement).
"""

from __future__ import annotations

from casspec_ref.config import ModelConfig
from casspec_ref.plan import ExecutionPlan


def early_exit_plan(config: ModelConfig, exit_after: int, name: str | None = None) -> ExecutionPlan:
    """Run blocks ``[0, exit_after)`` then the shared head; ``exit_after`` in ``1..n_layers``."""
    if isinstance(exit_after, bool) or not isinstance(exit_after, int):
        raise ValueError(f"exit_after must be an int in 1..{config.n_layers}, got {exit_after!r}")
    plan = ExecutionPlan(exit_after=exit_after, name=name if name else f"exit{exit_after}")
    plan.validate(config)
    return plan


def exit_for_fraction(config: ModelConfig, fraction: float) -> int:
    """The ``exit_after`` that keeps ``fraction`` of the blocks (rounded, at least one)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"early-exit fraction={fraction} must be within (0, 1]")
    return max(1, min(config.n_layers, round(fraction * config.n_layers)))
