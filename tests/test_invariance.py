"""The machine check of shape invariance (`casspec_ref.accel.invariance`): it must say no when a
form rounds a row by its forward's shape, and yes when it does not.

The forms here are made row-count dependent on purpose (an explicit rounding, the same on every
machine), so each verdict is fixed: nothing depends on which BLAS this machine has.
"""

from __future__ import annotations

from functools import partial

import pytest
import torch

from casspec_ref.accel import invariance
from casspec_ref.base import exact_attention, kernels
from casspec_ref.base.kernels import Form
from casspec_ref.base.random_weights import random_init_
from casspec_ref.config import tiny_llama
from casspec_ref.model import Transformer


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
    two. Every candidate is a tile (R >= 2), except the one-row constructions, tried before every
    tile where `rows_first` says so (in float32, always but for the LM head)."""
    timings = {2: {"wxt": 10.0, "linear": 30.0}, 4: {"wxt": 10.4}, 8: {"split": 12.0}}
    ranked = invariance.ranked_tiles(torch.float32, timings, head=True)
    assert [str(f) for f in ranked[:5]] == ["wxt@4", "wxt@2", "split@8", "linear@2", "linear@4"]
    assert all(f.pad_to in kernels.TILE_ROWS for f in ranked)
    assert len(ranked) == len(kernels.TILE_ROWS) * len(kernels.base_forms(torch.float32))
    untimed = invariance.ranked_tiles(torch.float32, head=True)
    assert [f.pad_to for f in untimed[:1]] == [4] and untimed[0].base == "linear"
    ones = kernels.one_row_tiles(torch.float32)
    assert invariance.ranked_tiles(torch.float32, timings) == [*ones, *ranked]
    assert ones[0] == kernels.ROWS and all(f.pad_to == 1 for f in ones[1:])
    bf16 = invariance.ranked_tiles(torch.bfloat16, timings)
    assert kernels.ROWS not in bf16 and all(f.pad_to in kernels.TILE_ROWS for f in bf16)


@pytest.mark.parametrize(
    ("dtype", "one_row_split_us", "first"),
    [
        (torch.float32, 50.0, True),  # float32: always, however the one-row product was timed
        (torch.bfloat16, 9.0, True),  # cheaper than the cheapest tile's call (10.0)
        (torch.bfloat16, 10.0, False),  # a tie is not cheaper
        (torch.bfloat16, 11.0, False),
    ],
)
def test_the_one_row_products_go_first_where_the_naive_loops_product_is_cheapest(
    dtype: torch.dtype, one_row_split_us: float, first: bool
) -> None:
    """`rows_first`: in float32 always; in another dtype only where the kernel table timed a
    one-row product below every tile's call (a CPU where a product costs in proportion to its
    rows; every case here is within `ROWS_VERIFY_BOUND`, the next test crosses it). For the LM
    head by the same timings in every dtype, float32 included."""
    timings = {1: {"split": one_row_split_us}, 2: {"linear": 10.0}, 4: {"linear": 20.0}}
    ranked = invariance.ranked_tiles(dtype, timings)
    ones = kernels.one_row_tiles(dtype)  # `ROWS` timed, the one-row tiles not: `ROWS` first
    if first:
        assert ranked[: len(ones)] == ones
    else:
        assert ranked[0].pad_to in kernels.TILE_ROWS
    assert ranked.count(kernels.ROWS) == int(first)
    assert str(ranked[len(ones) if first else 0]) == "linear@2"  # then the tiles, cheapest first
    head = invariance.ranked_tiles(dtype, timings, head=True)
    assert (kernels.ROWS in head) is (one_row_split_us < 10.0)
    assert invariance.rows_first(dtype, float("inf"), 2, float("inf")) is (dtype == torch.float32)
    assert not invariance.rows_first(dtype, float("inf"), 2, float("inf"), head=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_cheapest_one_row_product_goes_first(dtype: torch.dtype) -> None:
    """Among the one-row constructions, the naive loop's cheapest product first: here one
    ``F.linear`` row per call (`linear@1`) before `ROWS`'s batched call, whose lone row costs
    what a one-row ``split`` does; untimed ones last, in `one_row_tiles` order. In bfloat16 and
    for the LM head they come first only because the bound holds (2 x 8 <= 2 x 10)."""
    timings = {1: {"split": 20.0, "linear": 8.0, "wxt": 12.0}, 2: {"linear": 10.0}}
    for head in (False, True):
        ranked = invariance.ranked_tiles(dtype, timings, head=head)
        assert [str(f) for f in ranked[:3]] == ["linear@1", "wxt@1", "rows"]
    slow = {1: {"split": 20.0, "linear": 11.0}, 2: {"linear": 10.0}}  # no one-row product gains
    assert invariance.ranked_tiles(dtype, slow, head=True)[0] == Form("linear", 2)


@pytest.mark.parametrize("base", ["linear", "wxt", "packed"])
def test_a_one_row_tile_makes_every_row_its_own_call(base: str) -> None:
    """``base@1``: every row computed by its own one-row call, so a row's bits are its one-row
    product's whatever rows sit beside it (the naive loop's product, by construction)."""
    if base == "packed" and not kernels.packed_available(torch.float32):
        pytest.skip("this torch build has no oneDNN packed product")
    gen = torch.Generator().manual_seed(3)
    weight, x = torch.randn(24, 40, generator=gen), torch.randn(7, 40, generator=gen)
    tile = Form(base, 1)
    assert kernels.tile_rows(tile) == 1
    alone = [kernels.apply_form(Form(base), x[i : i + 1], weight, None) for i in range(7)]
    assert torch.equal(kernels.tiled_linear(tile, x, weight, None), torch.cat(alone))
    assert torch.equal(kernels.tiled_linear(tile, x[3:5], weight, None), torch.cat(alone[3:5]))


def test_the_one_row_products_stay_out_where_a_tile_costs_about_one_row() -> None:
    """A 4-row tile costing 1.1 one-row products (bfloat16 instructions): the naive loop would
    gain 10%, a verify forward's products would cost 3.6 times the tile's, past
    `ROWS_VERIFY_BOUND`; the tiles stay first. At the bound it is taken, just past it not."""
    near_free = {1: {"split": 10.0}, 4: {"linear": 11.0}}
    assert kernels.ROWS not in invariance.ranked_tiles(torch.bfloat16, near_free)
    assert invariance.ranked_tiles(torch.float32, near_free)[0] == kernels.ROWS
    bound = invariance.ROWS_VERIFY_BOUND
    assert invariance.rows_first(torch.bfloat16, 10.0, 4, 40.0 / bound)
    assert not invariance.rows_first(torch.bfloat16, 10.0, 4, 40.0 / bound - 0.01)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(12, 40), (13, 40)])
def test_one_row_products_are_the_product(shape: tuple[int, int], dtype: torch.dtype) -> None:
    """`kernels.one_row_products` computes ``x W^T + b`` (against float64) for one row (its two
    halves of outputs, or all outputs where they are odd), for blocks of rows, and for a weight
    that is not contiguous; `tiled_linear` hands it the ``ROWS`` tile whole. Whether a row keeps
    its bits alone and among others is the library's to keep and the check's to confirm per
    shape (on these tiny shapes it may not: the check then picks a tile)."""
    gen = torch.Generator().manual_seed(3)
    w = torch.randn(*shape, generator=gen).to(dtype)
    b = torch.randn(shape[0], generator=gen).to(dtype)
    x = torch.randn(10, shape[1], generator=gen).to(dtype)
    strided = torch.randn(shape[1], shape[0], generator=gen).to(dtype).T  # (out, in), a view
    tol = 1e-4 if dtype == torch.float32 else 0.05
    for weight, bias in ((w, b), (strided, None)):
        want = x.double() @ weight.double().T + (0 if bias is None else bias.double())
        for n in (1, 2, 10):
            got = kernels.one_row_products(x[:n], weight, bias)
            assert got.dtype == dtype and got.shape == (n, shape[0])
            assert torch.allclose(got.double(), want[:n], atol=tol * shape[1] ** 0.5, rtol=tol)
    via_tile = kernels.tiled_linear(kernels.ROWS, x[None], w, b)
    assert torch.equal(via_tile, kernels.one_row_products(x, w, b)[None])


def test_attention_across_thread_counts_says_no_to_a_kernel_that_rounds_by_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fused kernel whose bits follow the thread count (as one that splits the keys between
    threads would) is refused, alone and as the model calls it when the model leaves the count
    to the caller; the model's call on its own one thread is accepted, and so is a kernel that
    ignores the count."""
    real = invariance.F.scaled_dot_product_attention

    def by_threads(q, k, v):  # type: ignore[no-untyped-def]
        return real(q, k, v) * (1 + 2**-10 * (torch.get_num_threads() - 1))

    def serial(q, k, v):  # type: ignore[no-untyped-def]
        with invariance.threads_at(1):
            return real(q, k, v)

    monkeypatch.setattr(invariance.F, "scaled_dot_product_attention", by_threads)
    assert not invariance.attention_threads_agree(torch.float32, (1, 2), raw=True)
    assert invariance.attention_threads_agree(torch.float32, (1, 2))
    assert exact_attention.ATTENTION_THREADS == 1
    monkeypatch.setattr(exact_attention, "ATTENTION_THREADS", None)
    assert not invariance.attention_threads_agree(torch.float32, (1, 2))
    monkeypatch.setattr(invariance.F, "scaled_dot_product_attention", serial)
    assert invariance.attention_threads_agree(torch.float32, (1, 2))
    assert invariance.attention_threads_agree(torch.float32, (1, 2), raw=True)


def test_the_model_attention_runs_on_its_own_thread_count_and_restores_the_callers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every call of a target forward's attention sees `ATTENTION_THREADS` threads on a CPU, and
    the caller's count is back after it."""
    seen: list[int] = []
    real = invariance.F.scaled_dot_product_attention

    def counting(q, k, v, **kw):  # type: ignore[no-untyped-def]
        seen.append(torch.get_num_threads())
        return real(q, k, v, **kw)

    model = random_init_(Transformer(tiny_llama(vocab_size=32, max_seq_len=32)), seed=1)
    monkeypatch.setattr(invariance.F, "scaled_dot_product_attention", counting)
    with invariance.threads_at(2):
        model(torch.tensor([[1, 2, 3, 4]]))
        model(torch.tensor([[1]]))  # a lone token's call too (`each_token`'s one-token path)
        assert torch.get_num_threads() == 2
    assert len(seen) == 5 * model.config.n_layers and set(seen) == {1}


@pytest.mark.parametrize("contiguous", [True, False])
def test_a_lone_token_gets_the_query_layout_a_token_among_others_gets(contiguous: bool) -> None:
    """`each_token`'s one-token path skips the copy and the fold of the many-token path: the
    call it makes must read a query of the same shape, strides and values, and its result must
    come back as the many-token path folds it."""
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(1, 3, 2, 8, generator=gen)  # (B, Hkv, G*T, Dh), G = 2, T = 1
    q = q if contiguous else q.transpose(-1, -2).contiguous().transpose(-1, -2)
    expected = q.view(1, 3, 2, 1, 8).transpose(2, 3).contiguous()[:, :, 0]  # (B, Hkv, G, Dh)
    seen: list[torch.Tensor] = []

    def attend(i: int, query: torch.Tensor) -> torch.Tensor:
        seen.append(query)
        return query * 2.0 + i

    out = exact_attention.each_token(q, 1, attend)
    (query,) = seen
    assert query.shape == expected.shape and query.stride() == expected.stride()
    assert torch.equal(query, expected)
    assert out.shape == q.shape and torch.equal(out, expected * 2.0)


def test_the_report_says_what_is_missing() -> None:
    report = invariance.Report(torch.float32, (1, 2), {(8, 16): Form("wxt"), (4, 8): None}, True)
    assert not report.complete and report.gaps == "no tile passed for 4x8: row by row"
    report.forms[(4, 8)] = Form("packed")
    report.attention = False
    assert not report.complete and report.gaps == "attention rounds by thread count"
    report.attention = True
    assert report.complete and report.gaps == ""
    assert report.as_dict()["forms"] == {"8x16": "wxt", "4x8": "packed"}
