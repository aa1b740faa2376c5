"""Precision switching: run the draft forward in a lower floating-point dtype. Ours (docs/method.md
§2, "worth measuring"), not the paper's; the model keeps one cast weight copy. See docs/dsia.md."""

import torch

from casspec_ref.base.dsia_checks import check_precision_dtype
from casspec_ref.plan import ExecutionPlan


def precision_plan(dtype: torch.dtype = torch.bfloat16, name: str | None = None) -> ExecutionPlan:
    """A plan that runs every block and the head in ``dtype``."""
    check_precision_dtype(dtype)
    label = name if name is not None else str(dtype).removeprefix("torch.")
    return ExecutionPlan(compute_dtype=dtype, name=label)
