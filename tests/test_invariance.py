"""The machine check of shape invariance (`casspec_ref.accel.invariance`): it must say no when a
form or the attention rounds a row by its forward's shape, and yes when they do not.

The forms here are made row-count dependent on purpose (an explicit rounding, the same on every
machine), so each verdict is fixed: nothing depends on which BLAS this machine has.
"""

from __future__ import annotations

import os
from functools import partial

import pytest
import torch

from casspec_ref.accel import invariance
from casspec_ref.base import kernels
from casspec_ref.base.kernels import Form


def _count_dependent(x: torch.Tensor, above: int = 1) -> torch.Tensor:
    """Row-wise sums whose order depends on the number of rows: left to right for up to
    ``above`` rows, right to left for more (float32: the two orders round differently on most
    rows)."""
    cols = x.unbind(-1)
    order = cols if len(x) <= above else cols[::-1]
    out = torch.zeros(len(x), dtype=x.dtype)
    for col in order:
        out = out + col
    return out


def test_rows_agree_says_no_to_a_row_count_dependent_sum_and_yes_to_a_row_wise_one() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(invariance.FULL_ROWS, 40, generator=gen)
    assert not invariance.rows_agree(_count_dependent, x, (1,), gen)
    assert invariance.rows_agree(lambda rows: 2 * rows, x, (1,), gen)


def test_rows_agree_checks_every_row_count_up_to_the_block() -> None:
    """A sum that changes its order past 40 rows passes a `HEAD_ROWS` block and fails a
    `FULL_ROWS` block: the check covers the counts a prompt's piece has, and only its block's."""
    past_forty = partial(_count_dependent, above=40)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(invariance.FULL_ROWS, 40, generator=gen)
    assert invariance.rows_agree(past_forty, x[: invariance.HEAD_ROWS], (1,), gen)
    assert not invariance.rows_agree(past_forty, x, (1,), gen)


def test_invariant_form_returns_the_first_tile_that_passes(monkeypatch: pytest.MonkeyPatch) -> None:
    """``linear`` tiles made to round by their row count (over 256 inputs, so that the two
    orders round apart on the row a one-row window draws), ``wxt`` tiles row-wise: the check
    skips the first; with every tile made to round by row count it finds none."""

    def fake(tile: Form, rows: torch.Tensor, weight: torch.Tensor, bias: None) -> torch.Tensor:
        return _count_dependent(rows) if tile.base == "linear" else 2 * rows

    monkeypatch.setattr(invariance, "tiled_linear", fake)
    ranked = [Form("linear", 4), Form("wxt", 4)]
    assert invariance.invariant_form((8, 256), torch.float32, (1,), ranked) == Form("wxt", 4)
    assert invariance.invariant_form((8, 256), torch.float32, (1,), ranked[:1]) is None


def test_a_tile_whose_rows_round_by_their_place_in_it_fails_the_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The one thing a tile's fixed call shape cannot promise, checked: a kernel that sums the
    last row of every tile in another order (as a register block's edge might) is refused,
    the row-wise tile of the same shape accepted."""
    real = kernels.apply_form

    def edge_rounds(form: Form, x: torch.Tensor, w: torch.Tensor, b: None) -> torch.Tensor:
        out = real(form, x, w, b)
        if form.base == "linear":
            out[-1] = out[-1] * (1 + 2**-20)  # the tile's last row: one ulp or so off
        return out

    monkeypatch.setattr(kernels, "apply_form", edge_rounds)
    ranked = [Form("linear", 4), Form("wxt", 4)]
    assert invariance.invariant_form((8, 256), torch.float32, (1,), ranked) == Form("wxt", 4)


def test_ranked_tiles_put_the_naive_loops_cheapest_first_and_prefer_larger_near_ties() -> None:
    """Timed: the cheapest one call first; a tile within `NEAR_TIE` of it but larger goes before
    it (a verify forward needs fewer calls); untimed tiles last, four rows before eight and
    two. Every candidate is a tile (R >= 2)."""
    timings = {2: {"wxt": 10.0, "linear": 30.0}, 4: {"wxt": 10.4}, 8: {"split": 12.0}}
    ranked = invariance.ranked_tiles(torch.float32, timings)
    assert [str(f) for f in ranked[:5]] == ["wxt@4", "wxt@2", "split@8", "linear@2", "linear@4"]
    assert all(f.pad_to in kernels.TILE_ROWS for f in ranked)
    assert len(ranked) == len(kernels.TILE_ROWS) * len(kernels.base_forms(torch.float32))
    untimed = invariance.ranked_tiles(torch.float32)
    assert [f.pad_to for f in untimed[:1]] == [4] and untimed[0].base == "linear"


def test_attention_agrees_and_says_no_to_an_attention_that_rounds_by_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The model's shape-invariant attention passes (causal blocks and token trees, float32 and
    bfloat16) at the CPU's own level; an attention that perturbs its output when it runs more
    than four query rows (as a kernel chosen by shape would) fails, alone or behind the tree path.

    With MKL capped below the CPU's level (``MKL_ENABLE_INSTRUCTIONS``, as the dispatch-level
    runs set it), MKL's float32 product can round a row by the row count even on padded rows; the
    check then says no, and the forward runs each token's attention alone, whose equality with
    the naive loop test_shape_invariance.py checks."""
    capped_mkl = bool(os.environ.get("MKL_ENABLE_INSTRUCTIONS"))
    for dtype in (torch.float32, torch.bfloat16):
        agrees = invariance.attention_agrees(dtype, (1,))
        assert agrees or capped_mkl, f"{dtype} padded attention rounds by rows at the CPU's level"
    real = invariance.padded_attention

    def by_rows(q, k, v, bias):  # type: ignore[no-untyped-def]
        out = real(q, k, v, bias)
        return out * (1 + 2**-10) if q.shape[-2] * q.shape[:-2].numel() > 4 else out

    monkeypatch.setattr(invariance, "padded_attention", by_rows)
    assert not invariance.attention_agrees(torch.float32, (1,))


def test_the_report_says_what_is_missing() -> None:
    report = invariance.Report(torch.float32, (1, 2), {(8, 16): Form("wxt"), (4, 8): None}, True)
    assert not report.complete and report.gaps == "no tile passed for 4x8: row by row"
    report.forms[(4, 8)] = Form("packed")
    report.attention = False
    assert not report.complete and report.gaps == "attention rounds by shape: token by token"
    report.attention = True
    assert report.complete and report.gaps == ""
    assert report.as_dict()["forms"] == {"8x16": "wxt", "4x8": "packed"}
