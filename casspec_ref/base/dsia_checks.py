"""Argument checks of the DSIA strategies, prompt lookup and the draft runner (`casspec_ref.dsia`).

Pure value checks, each raising a `ValueError` that names the argument, its value and what is
allowed; the strategies call them so that their own lines stay on the idea.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Protocol, TypeVar

import torch

#: Bit widths the fake-quant kernels support: 8 (the seed article's draft) and 4.
SUPPORTED_BITS = (4, 8)

#: Dtypes a precision draft may use.
DRAFT_DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)


class _Plan(Protocol):
    def validate(self, config: Any) -> None: ...


P = TypeVar("P", bound=_Plan)


def validated(plan: P, config: Any) -> P:
    """``plan``, once ``plan.validate(config)`` has accepted it (it raises `ValueError` if not)."""
    plan.validate(config)
    return plan


def check_bits(bits: int, what: str) -> None:
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"{what}={bits} is not supported: allowed bit widths are {SUPPORTED_BITS}")


def check_quantize(bits: int, group_size: int | None, width: int) -> int:
    """The group width (the whole row when ``group_size`` is None), checked against ``width``."""
    check_bits(bits, "bits")
    group = width if group_size is None else group_size
    if group < 1 or width % group != 0:
        raise ValueError(
            f"group_size={group_size} must be a positive divisor of the last dimension ({width})"
        )
    return group


def check_quant_kernel(kernel: Any, allowed_names: Sequence[str]) -> None:
    """A `QuantKernel`'s fields: supported bit widths, a group size >= 1, known linear names."""
    check_bits(kernel.bits, "QuantKernel.bits")
    if kernel.weight_bits is not None:
        check_bits(kernel.weight_bits, "QuantKernel.weight_bits")
    if kernel.group_size is not None and kernel.group_size < 1:
        raise ValueError(f"QuantKernel.group_size must be >= 1 or None, got {kernel.group_size}")
    check_names(kernel.names, allowed_names, "QuantKernel.names")


def check_names(names: Iterable[str], allowed: Sequence[str], what: str) -> None:
    """`ValueError` naming ``what`` if ``names`` holds a name not in ``allowed``."""
    unknown = sorted(set(names) - set(allowed))
    if unknown:
        raise ValueError(f"{what} has unknown names {unknown}: allowed are {allowed}")


def check_exit_after(exit_after: Any, n_layers: int) -> None:
    """The type check; the range is `ExecutionPlan.validate`'s."""
    if isinstance(exit_after, bool) or not isinstance(exit_after, int):
        raise ValueError(f"exit_after must be an int in 1..{n_layers}, got {exit_after!r}")


def check_exit_fraction(fraction: float) -> None:
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"early-exit fraction={fraction} must be within (0, 1]")


def check_sublayers(sublayers: Iterable[tuple[int, str]]) -> list[tuple[int, str]]:
    """The units as a list; each kind must be "attn" or "mlp"."""
    units = list(sublayers)
    for unit in units:
        _, kind = unit
        if kind not in ("attn", "mlp"):
            raise ValueError(f"sub-layer kind {kind!r} in {unit!r}: allowed are 'attn' and 'mlp'")
    return units


def skip_count(ratio: float, n_layers: int, available: int) -> int:
    """The sub-layers a sparsity ``ratio`` skips, ``round(ratio * 2 * n_layers)``, checked: the
    ratio within [0, 1], the count at most the ``available`` (skippable) sub-layers."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"sparsity ratio={ratio} must be within [0, 1]")
    k = round(ratio * 2 * n_layers)
    if k > available:
        raise ValueError(
            f"sparsity ratio={ratio} asks for {k} skipped sub-layers but only {available} "
            f"are skippable here"
        )
    return k


def check_precision_dtype(dtype: torch.dtype) -> None:
    if dtype not in DRAFT_DTYPES:
        raise ValueError(f"precision dtype {dtype} is not supported: allowed are {DRAFT_DTYPES}")


def check_mix(n_plans: int, n_kernels: int, dtypes: set[Any]) -> None:
    """Mixing needs a plan and refuses two kernels or two dtypes (a choice for `replace`)."""
    if not n_plans:
        raise ValueError("mix() needs at least one plan")
    if n_kernels > 1:
        raise ValueError("mix(): plans carry different linear kernels; use replace() to pick one")
    if len(dtypes) > 1:
        raise ValueError(
            f"mix(): plans ask for different compute dtypes {sorted(map(str, dtypes))}"
        )


def check_fields(changes: Iterable[str], fields: Iterable[str]) -> None:
    unknown = sorted(set(changes) - set(fields))
    if unknown:
        raise ValueError(f"replace(): unknown ExecutionPlan fields {unknown}")


def check_hierarchy(name: str, levels: Sequence[Any], config: Any) -> None:
    """A hierarchy needs at least one level, unique level names, and valid plans for ``config``."""
    level_names = [p.name for p in levels]
    if not level_names:
        raise ValueError(f"Hierarchy {name!r} has no levels")
    if len(set(level_names)) != len(level_names):
        raise ValueError(f"Hierarchy {name!r} has duplicate level names {list(level_names)}")
    for plan in levels:
        plan.validate(config)


def check_lookup_config(min_ngram: int, max_ngram: int, max_proposal: int, prefer: str) -> None:
    if not 1 <= min_ngram <= max_ngram:
        raise ValueError(
            f"PromptLookupConfig needs 1 <= min_ngram <= max_ngram, got "
            f"min_ngram={min_ngram}, max_ngram={max_ngram}"
        )
    if max_proposal < 1:
        raise ValueError(f"PromptLookupConfig.max_proposal must be >= 1, got {max_proposal}")
    if prefer not in ("recent", "first"):
        raise ValueError(f"PromptLookupConfig.prefer must be 'recent' or 'first', got {prefer!r}")


def check_token(token: Any) -> None:
    if isinstance(token, bool) or not isinstance(token, int) or token < 0:
        raise ValueError(f"PromptLookup tokens must be non-negative ints, got {token!r}")


def proposal_limit(max_tokens: int | None, default: int) -> int:
    """``max_tokens``, or ``default`` when it is None; never negative."""
    limit = default if max_tokens is None else max_tokens
    if limit < 0:
        raise ValueError(f"max_tokens must be >= 0 or None, got {max_tokens}")
    return limit


def check_recycler_width(width: int) -> None:
    if width < 1:
        raise ValueError(f"TokenRecycler width must be >= 1, got {width}")


def check_draft_call(path: Sequence[int], cache_length: int, base: int) -> None:
    """A draft path holds at least the root, and the verified rows are still in the cache."""
    if not path:
        raise ValueError("DraftRunner.logits needs a non-empty path (at least the root token)")
    if cache_length < base:
        raise ValueError(
            f"DraftRunner: the cache was truncated below the verified length {base} "
            f"(length {cache_length}); create a new runner for a new step"
        )
