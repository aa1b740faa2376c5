"""`rowwise`: an elementwise function computed with no scalar tail and no thread split, so a
row's bits do not depend on how many rows sit beside it (docs/floating_point.md, "The scalar
tail"). Exact comparisons only (`torch.equal`)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from casspec_ref.base.elementwise import SERIAL_ELEMENTS, VECTOR_CHUNK, rowwise

WIDTHS = (13, 24, 48, 64, 576, 1536)
DTYPES = (torch.float32, torch.bfloat16)


def _rows_differing(fn, width: int, dtype: torch.dtype) -> int:  # type: ignore[no-untyped-def]
    """Rows of 1..40-row calls whose bits differ from the same row's one-row call."""
    gen = torch.Generator().manual_seed(width)
    bad = 0
    for rows in range(1, 41):
        x = torch.randn(rows, width, generator=gen).to(dtype)
        together = fn(x)
        bad += sum(not torch.equal(together[r], fn(x[r : r + 1].clone())[0]) for r in range(rows))
    return bad


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("width", WIDTHS)
def test_a_rows_silu_is_the_same_bits_alone_or_among_others(width: int, dtype: torch.dtype) -> None:
    assert _rows_differing(lambda x: rowwise(F.silu, x), width, dtype) == 0


def test_the_plain_kernel_rounds_by_row_count_where_the_cpu_has_wide_vectors() -> None:
    """The cause, shown: on the AVX2 and AVX-512 levels torch's own ``silu`` rounds a row of 13
    or 24 floats differently alone than among others (its scalar tail); on the default level
    its tail runs the same code, and nothing is asserted there."""
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip(f"{torch.backends.cpu.get_cpu_capability()}: the tail rounds alike here")
    assert _rows_differing(F.silu, 13, torch.float32) + _rows_differing(F.silu, 24, torch.float32)


@pytest.mark.parametrize(
    "shape", [(1, 13), (3, 1536), (64, 1536), (40, 1), (2, 5, 48), (30, 40000)]
)
def test_every_call_is_whole_vector_steps_on_one_thread_and_the_values_are_fns(
    shape: tuple[int, ...],
) -> None:
    """Each buffer handed to the function holds rows of a multiple of `VECTOR_CHUNK` elements
    and at most `SERIAL_ELEMENTS` in all (one row where a row is wider); the result is the
    function's, shape and values."""
    widths: list[tuple[int, int]] = []

    def spy(x: torch.Tensor) -> torch.Tensor:
        widths.append((x.shape[-1], x.numel()))
        assert x.is_contiguous()
        return torch.sigmoid(x)

    x = torch.randn(shape)
    out = rowwise(spy, x)
    assert out.shape == x.shape and torch.allclose(out, torch.sigmoid(x), atol=1e-6)
    assert all(w % VECTOR_CHUNK == 0 for w, _ in widths)
    assert all(n <= max(SERIAL_ELEMENTS, w) for w, n in widths)
    assert sum(n // w for w, n in widths) == x.numel() // x.shape[-1]  # every row once
