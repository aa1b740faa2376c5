"""Layer sparsity (docs/method.md §2, as in SWIFT): skip attention and/or MLP sub-layers; a skipped
sub-layer does not run (a skipped attention writes no K/V). See docs/dsia.md."""

import math
from collections.abc import Iterable, Sequence
from typing import Literal

from casspec_ref.base.dsia_checks import check_sublayers, skip_count, validated
from casspec_ref.config import ModelConfig
from casspec_ref.plan import ExecutionPlan

#: One skippable unit: (block index, "attn" | "mlp").
SubLayer = tuple[int, Literal["attn", "mlp"]]


def sublayer_plan(
    config: ModelConfig, sublayers: Iterable[SubLayer], name: str | None = None
) -> ExecutionPlan:
    """A plan that skips exactly the given sub-layers; validated against ``config``."""
    units = check_sublayers(sublayers)
    attn = frozenset(int(layer) for layer, kind in units if kind == "attn")
    mlp = frozenset(int(layer) for layer, kind in units if kind == "mlp")
    label = name if name is not None else f"skip{len(attn) + len(mlp)}"
    return validated(ExecutionPlan(skip_attention=attn, skip_mlp=mlp, name=label), config)


def skip_layers_plan(
    config: ModelConfig, layers: Iterable[int], name: str | None = None
) -> ExecutionPlan:
    """Skip whole blocks (both sub-layers of each listed layer)."""
    layers = sorted(set(int(i) for i in layers))
    units: list[SubLayer] = [(i, "attn") for i in layers] + [(i, "mlp") for i in layers]
    return sublayer_plan(config, units, name if name is not None else f"skipL{layers}")


def alternate_skip_plan(
    config: ModelConfig, ratio: float, keep_first: int = 2, keep_last: int = 2
) -> ExecutionPlan:
    """Skip ``round(ratio * 2 * n_layers) // 2`` whole blocks, spread evenly over the middle
    blocks (the naive baseline): the sub-layers ``ratio`` asks for (`skip_count`), halved and
    rounded down, so ratio 0.25 of 30 layers skips 7 blocks (14 of 60 sub-layers). The first
    ``keep_first`` and last ``keep_last`` blocks always run."""
    middle = list(range(keep_first, config.n_layers - keep_last))
    n_skip = skip_count(ratio, config.n_layers, 2 * len(middle)) // 2
    # Evenly spaced picks: index floor((j + 0.5) * len / n_skip) for j < n_skip.
    picks = sorted({middle[math.floor((j + 0.5) * len(middle) / n_skip)] for j in range(n_skip)})
    return skip_layers_plan(config, picks, name=f"alt{ratio:.2f}")


def ranked_skip_plan(
    config: ModelConfig, ranking: Sequence[SubLayer], ratio: float, name: str | None = None
) -> ExecutionPlan:
    """Skip the first ``round(ratio * 2 * n_layers)`` sub-layers of ``ranking`` (cheapest first):
    one ranking at several ratios gives nested sets (a stronger level skips a superset)."""
    k = skip_count(ratio, config.n_layers, len(ranking))
    return sublayer_plan(config, ranking[:k], name if name is not None else f"ranked{ratio:.2f}")


def sparsity(plan: ExecutionPlan, config: ModelConfig) -> float:
    """Fraction of the ``2 * n_layers`` sub-layers that ``plan`` does not run (exit included)."""
    runs = config.n_layers if plan.exit_after is None else plan.exit_after
    skipped = sum(1 for units in (plan.skip_attention, plan.skip_mlp) for i in units if i < runs)
    return 1.0 - (2 * runs - skipped) / (2 * config.n_layers)
