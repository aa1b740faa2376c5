"""Composing DSIA strategies into draft hierarchies: Mixing, Scaling, Replacing.

Scope: docs/method.md §2 ("Ways to build a hierarchy"). The seed article's example hierarchy
(L1: 70% sparsity + early exit; L2: 30% sparsity + 8-bit activations; L3: 8-bit only) is built
from these three operations by `casspec_ref.io.presets.seed_hierarchy`.

- Mixing (`mix`): orthogonal strategies combined into one plan (union of skipped sub-layers,
  the earliest exit, one linear kernel, one compute dtype). Two different kernels or dtypes
  conflict: that is a Replacing decision, so `mix` refuses instead of guessing.
- Scaling (`scale`): one strategy at several strengths, e.g. ``scale(lambda r:
  ranked_skip_plan(cfg, ranking, r), (0.2, 0.4))``.
- Replacing (`replace`): swap one strategy of a plan for another (``dataclasses.replace`` with a
  new name).
A `Hierarchy` is an ordered tuple of plans, cheapest (most aggressive) first. Every level is the
same model object with the same weights: a hierarchy adds no weight copy, except the quantized
copy a kernel with quantized weights caches and the one low-precision copy the model keeps for a
``compute_dtype`` level.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from casspec_ref.config import ModelConfig
from casspec_ref.plan import ExecutionPlan


def mix(*plans: ExecutionPlan, name: str | None = None) -> ExecutionPlan:
    """Combine orthogonal plans into one (Mixing)."""
    if not plans:
        raise ValueError("mix() needs at least one plan")
    linears = {id(p.linear): p.linear for p in plans if p.linear is not None}
    if len(linears) > 1:
        raise ValueError("mix(): plans carry different linear kernels; use replace() to pick one")
    dtypes = {p.compute_dtype for p in plans if p.compute_dtype is not None}
    if len(dtypes) > 1:
        raise ValueError(
            f"mix(): plans ask for different compute dtypes {sorted(map(str, dtypes))}"
        )
    exits = [p.exit_after for p in plans if p.exit_after is not None]
    return ExecutionPlan(
        skip_attention=frozenset().union(*(p.skip_attention for p in plans)),
        skip_mlp=frozenset().union(*(p.skip_mlp for p in plans)),
        exit_after=min(exits) if exits else None,
        linear=next(iter(linears.values()), None),
        compute_dtype=next(iter(dtypes), None),
        name=name if name is not None else "+".join(p.name for p in plans),
    )


def replace(plan: ExecutionPlan, name: str | None = None, **changes: Any) -> ExecutionPlan:
    """Swap strategies of ``plan`` (Replacing), e.g. ``replace(p, linear=None, name="...")``."""
    unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(ExecutionPlan)})
    if unknown:
        raise ValueError(f"replace(): unknown ExecutionPlan fields {unknown}")
    return dataclasses.replace(plan, name=name if name else f"{plan.name}'", **changes)


def scale(
    build: Callable[[float], ExecutionPlan], strengths: Iterable[float]
) -> tuple[ExecutionPlan, ...]:
    """One strategy at several strengths (Scaling), in the order given."""
    return tuple(build(s) for s in strengths)


@dataclass(frozen=True)
class Hierarchy:
    """Named draft levels, cheapest first; validated against one model config."""

    name: str
    levels: tuple[ExecutionPlan, ...]

    def validate(self, config: ModelConfig) -> None:
        """Every level must be a valid plan for ``config`` and level names must be unique."""
        if not self.levels:
            raise ValueError(f"Hierarchy {self.name!r} has no levels")
        names = [p.name for p in self.levels]
        if len(set(names)) != len(names):
            raise ValueError(f"Hierarchy {self.name!r} has duplicate level names {names}")
        for plan in self.levels:
            plan.validate(config)
