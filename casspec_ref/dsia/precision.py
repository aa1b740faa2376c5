"""Precision switching: run the draft forward in a lower floating-point dtype.

Scope: ours (docs/method.md §2, "worth measuring"), not one of the paper's strategies. The plan
sets `ExecutionPlan.compute_dtype`; the model casts its weights once and keeps that copy (a
documented extra copy: half the fp32 size for bf16). On this CPU bf16 keeps ~0.98 greedy
agreement with the fp32 target at about 0.6 of its step time (docs/smollm2.md).
"""

from __future__ import annotations

import torch

from casspec_ref.plan import ExecutionPlan

#: Dtypes a precision draft may use.
DRAFT_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


def precision_plan(dtype: torch.dtype = torch.bfloat16, name: str | None = None) -> ExecutionPlan:
    """A plan that runs every block and the head in ``dtype``."""
    if dtype not in DRAFT_DTYPES:
        raise ValueError(f"precision dtype {dtype} is not supported: allowed are {DRAFT_DTYPES}")
    label = name if name is not None else str(dtype).removeprefix("torch.")
    return ExecutionPlan(compute_dtype=dtype, name=label)
