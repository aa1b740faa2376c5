"""Early exit (docs/method.md §2): run the first ``exit_after`` blocks, then the target's own final
norm and LM head (no weights added). See docs/dsia.md."""

from casspec_ref.base.dsia_checks import check_exit_after, check_exit_fraction, validated
from casspec_ref.config import ModelConfig
from casspec_ref.plan import ExecutionPlan


def early_exit_plan(config: ModelConfig, exit_after: int, name: str | None = None) -> ExecutionPlan:
    """Run blocks ``[0, exit_after)`` then the shared head; ``exit_after`` in ``1..n_layers``."""
    check_exit_after(exit_after, config.n_layers)
    return validated(ExecutionPlan(exit_after=exit_after, name=name or f"exit{exit_after}"), config)


def exit_for_fraction(config: ModelConfig, fraction: float) -> int:
    """The ``exit_after`` that keeps ``fraction`` of the blocks (rounded, at least one)."""
    check_exit_fraction(fraction)
    return max(1, min(config.n_layers, round(fraction * config.n_layers)))
