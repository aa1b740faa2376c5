"""Composing DSIA strategies (docs/method.md §2): Mixing, Scaling, Replacing, and a `Hierarchy`
(plans ordered cheapest first, all run by the same weights). See docs/dsia.md."""

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

from casspec_ref.base.dsia_checks import check_fields, check_hierarchy, check_mix
from casspec_ref.config import ModelConfig
from casspec_ref.plan import ExecutionPlan


def mix(*plans: ExecutionPlan, name: str | None = None) -> ExecutionPlan:
    """Combine orthogonal plans into one (Mixing): the union of the skipped sub-layers, the
    earliest exit, the one kernel and dtype they carry (two are refused: that is a Replacing)."""
    linears = {id(p.linear): p.linear for p in plans if p.linear is not None}
    dtypes = {p.compute_dtype for p in plans if p.compute_dtype is not None}
    check_mix(len(plans), len(linears), dtypes)
    return ExecutionPlan(
        skip_attention=frozenset().union(*(p.skip_attention for p in plans)),
        skip_mlp=frozenset().union(*(p.skip_mlp for p in plans)),
        exit_after=min((p.exit_after for p in plans if p.exit_after is not None), default=None),
        linear=next(iter(linears.values()), None),
        compute_dtype=next(iter(dtypes), None),
        name=name if name is not None else "+".join(p.name for p in plans),
    )


def replace(plan: ExecutionPlan, name: str | None = None, **changes: Any) -> ExecutionPlan:
    """Swap strategies of ``plan`` (Replacing), e.g. ``replace(p, linear=None, name="...")``."""
    check_fields(changes, (f.name for f in dataclasses.fields(ExecutionPlan)))
    return dataclasses.replace(plan, name=name if name else f"{plan.name}'", **changes)


def scale(
    build: Callable[[float], ExecutionPlan], strengths: Iterable[float]
) -> tuple[ExecutionPlan, ...]:
    """One strategy at several strengths (Scaling), in the order given."""
    return tuple(build(s) for s in strengths)


@dataclasses.dataclass(frozen=True)
class Hierarchy:
    """Named draft levels, cheapest first; validated against one model config."""

    name: str
    levels: tuple[ExecutionPlan, ...]

    def validate(self, config: ModelConfig) -> None:
        """Every level must be a valid plan for ``config`` and level names must be unique."""
        check_hierarchy(self.name, self.levels, config)
