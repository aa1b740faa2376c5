"""Layer sparsity: skip the attention and/or MLP sub-layers of chosen blocks.

Scope: docs/method.md §2 ("Layer sparsity"), the strategy SWIFT and CAS-Spec's sparse drafts use.
A skipped sub-layer does not run at all: the residual stream passes through unchanged and no K/V
is written for a skipped attention (the model reads `ExecutionPlan.skip_attention`/`skip_mlp`).

Notable choices:
- Granularity is the *sub-layer* (SWIFT's choice): a unit is ``(layer, "attn")`` or
  ``(layer, "mlp")``. "Sparsity" is the fraction of the ``2 * n_layers`` sub-layers that do not
  run (early exit included), so that one number compares every plan.
- Two ways to pick the set: `alternate_skip_plan` (evenly spaced whole layers, keeping the first
  and last blocks, the naive baseline) and `ranked_skip_plan` (the first k units of a ranking,
  e.g. the one `layer_search` finds). Scaling a ranking gives nested sets, so a hierarchy of
  strengths is consistent (a stronger level skips a superset of a weaker one).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Literal

from casspec_ref.config import ModelConfig
from casspec_ref.plan import ExecutionPlan

SubLayerKind = Literal["attn", "mlp"]
#: One skippable unit: (block index, "attn" | "mlp").
SubLayer = tuple[int, SubLayerKind]


def sublayer_plan(
    config: ModelConfig, sublayers: Iterable[SubLayer], name: str | None = None
) -> ExecutionPlan:
    """A plan that skips exactly the given sub-layers; validated against ``config``."""
    attn: set[int] = set()
    mlp: set[int] = set()
    for unit in sublayers:
        layer, kind = unit
        if kind == "attn":
            attn.add(int(layer))
        elif kind == "mlp":
            mlp.add(int(layer))
        else:
            raise ValueError(f"sub-layer kind {kind!r} in {unit!r}: allowed are 'attn' and 'mlp'")
    label = name if name is not None else f"skip{len(attn) + len(mlp)}"
    plan = ExecutionPlan(skip_attention=frozenset(attn), skip_mlp=frozenset(mlp), name=label)
    plan.validate(config)
    return plan


def skip_layers_plan(
    config: ModelConfig, layers: Iterable[int], name: str | None = None
) -> ExecutionPlan:
    """Skip whole blocks (both sub-layers of each listed layer)."""
    layers = sorted(set(int(i) for i in layers))
    units: list[SubLayer] = [(i, "attn") for i in layers] + [(i, "mlp") for i in layers]
    return sublayer_plan(config, units, name if name is not None else f"skipL{layers}")


def _count(config: ModelConfig, ratio: float, available: int) -> int:
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"sparsity ratio={ratio} must be within [0, 1]")
    k = round(ratio * 2 * config.n_layers)
    if k > available:
        raise ValueError(
            f"sparsity ratio={ratio} asks for {k} skipped sub-layers but only {available} "
            f"are skippable here"
        )
    return k


def alternate_skip_plan(
    config: ModelConfig, ratio: float, keep_first: int = 2, keep_last: int = 2
) -> ExecutionPlan:
    """Skip ``round(ratio * n_layers)`` whole blocks spread evenly over the middle blocks.

    ``keep_first``/``keep_last`` blocks always run (docs/method.md §2: the first and last layers
    are usually kept; on SmolLM2 layers 0-1 and 28-29 are essential).
    """
    middle = list(range(keep_first, config.n_layers - keep_last))
    n_skip = _count(config, ratio, 2 * len(middle)) // 2
    if n_skip == 0:
        return ExecutionPlan(name=f"alt{ratio:.2f}")
    # Evenly spaced picks: index floor((j + 0.5) * len / n_skip) for j < n_skip.
    picks = sorted({middle[math.floor((j + 0.5) * len(middle) / n_skip)] for j in range(n_skip)})
    return skip_layers_plan(config, picks, name=f"alt{ratio:.2f}")


def ranked_skip_plan(
    config: ModelConfig, ranking: Sequence[SubLayer], ratio: float, name: str | None = None
) -> ExecutionPlan:
    """Skip the first ``round(ratio * 2 * n_layers)`` sub-layers of ``ranking`` (cheapest first)."""
    k = _count(config, ratio, len(ranking))
    return sublayer_plan(config, ranking[:k], name if name is not None else f"ranked{ratio:.2f}")


def sparsity(plan: ExecutionPlan, config: ModelConfig) -> float:
    """Fraction of the ``2 * n_layers`` sub-layers that ``plan`` does not run (exit included)."""
    runs = config.n_layers if plan.exit_after is None else plan.exit_after
    skipped = sum(1 for i in plan.skip_attention if i < runs) + sum(
        1 for i in plan.skip_mlp if i < runs
    )
    return 1.0 - (2 * runs - skipped) / (2 * config.n_layers)
