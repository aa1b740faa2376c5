"""base/nucleus.py: top-p by a sorted head decides exactly as the full stable sort does."""

from __future__ import annotations

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from casspec_ref.base import nucleus


def spy_on_the_full_sort(monkeypatch: pytest.MonkeyPatch) -> list[torch.Size]:
    """Record the shape of every call of `keep_by_full_sort` (which still answers)."""
    calls: list[torch.Size] = []
    real = nucleus.keep_by_full_sort

    def spy(p: torch.Tensor, top_p: float) -> torch.Tensor:
        calls.append(p.shape)
        return real(p, top_p)

    monkeypatch.setattr(nucleus, "keep_by_full_sort", spy)
    return calls


def full_sort_reference(probs: torch.Tensor, top_p: float) -> torch.Tensor:
    """The rule written out in Python, one token at a time, in the full stable order."""
    keep = torch.zeros(probs.shape, dtype=torch.bool)
    for r, row in enumerate(probs.reshape(-1, probs.shape[-1])):
        order = sorted(range(row.shape[0]), key=lambda i: (-float(row[i]), i))
        cumulative = torch.cumsum(row[order], dim=0)
        for place, i in enumerate(order):
            keep.view(-1, probs.shape[-1])[r, i] = bool(cumulative[place] - row[i] < top_p)
    return keep


@pytest.mark.parametrize("scale", [0.3, 1.0, 3.0, 8.0])
@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.99])
def test_head_sort_equals_full_sort_on_a_real_vocabulary_size(scale, top_p):
    """V = 49,152 (SmolLM2): flat rows need the whole vocabulary, peaked ones a few tokens."""
    generator = torch.Generator().manual_seed(int(scale * 100) + int(top_p * 1000))
    logits = torch.randn(3, 49152, generator=generator, dtype=torch.float64) * scale
    probs = torch.softmax(logits, dim=-1)
    keep = nucleus.top_p_keep(probs, top_p)
    assert torch.equal(keep, nucleus.keep_by_full_sort(probs, top_p))
    assert keep.any(dim=-1).all()


def test_the_full_sort_helper_matches_the_rule_written_out():
    probs = torch.tensor([[0.25, 0.125, 0.5, 0.125], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
    for top_p in (0.3, 0.5, 0.75, 0.8, 1.0):
        assert torch.equal(
            nucleus.keep_by_full_sort(probs, top_p), full_sort_reference(probs, top_p)
        )
    # 0.5 first, then 0.25; the two 0.125s tie and the lower id (1) comes first.
    assert nucleus.keep_by_full_sort(probs, 0.8)[0].tolist() == [True, True, True, False]


@settings(max_examples=300, deadline=None)
@given(
    weights=st.lists(st.integers(0, 6), min_size=1, max_size=40).filter(any),
    top_p=st.sampled_from([0.1, 0.25, 0.5, 0.7, 0.9, 0.999]),
    head=st.sampled_from([1, 2, 3, 5]),
    rows=st.integers(1, 3),
)
@example(weights=[1, 1, 1, 1], top_p=0.5, head=1, rows=1)  # every token ties with the k-th
@example(weights=[4, 2, 1, 1], top_p=0.75, head=2, rows=1)  # the head sum meets top_p exactly
def test_head_sort_equals_full_sort_with_ties_and_growth(weights, top_p, head, rows):
    """Small integer weights tie often; a head of 1-5 tokens forces the growth steps and the
    fallback, where the real head (256) would go straight to the full sort."""
    law = torch.tensor(weights, dtype=torch.float64)
    probs = torch.stack([torch.roll(law, r) for r in range(rows)]) / law.sum()  # (rows, V)
    keep = nucleus.top_p_keep(probs, top_p, first_head=head)
    assert torch.equal(keep, nucleus.keep_by_full_sort(probs, top_p))
    assert torch.equal(keep, full_sort_reference(probs, top_p))


def test_a_head_short_of_top_p_by_less_than_the_margin_is_not_trusted(monkeypatch):
    """Head mass within MARGIN of top_p: the tail's mass before could round below top_p, so the
    head alone must not decide; the answer still equals the full sort's."""
    probs = torch.tensor([0.5, 0.25, 0.125, 0.125], dtype=torch.float64)
    calls = spy_on_the_full_sort(monkeypatch)
    # The head {0.5} sums to 0.5 == top_p, not past it.
    keep = nucleus.top_p_keep(probs, 0.5, first_head=1)
    assert keep.tolist() == [True, False, False, False]
    assert calls == [torch.Size([4])]  # fell back to the full sort


def test_shapes_batches_and_empty_input_are_kept():
    probs = torch.softmax(torch.randn(2, 3, 300, dtype=torch.float64), dim=-1)
    keep = nucleus.top_p_keep(probs, 0.8)
    assert keep.shape == probs.shape and keep.dtype == torch.bool
    assert torch.equal(keep, nucleus.keep_by_full_sort(probs, 0.8))
    empty = torch.zeros(0, 5, dtype=torch.float64)
    assert nucleus.top_p_keep(empty, 0.8).shape == (0, 5)


def test_the_head_decides_a_peaked_row_on_the_cpu(monkeypatch):
    """The fast path really runs: a peaked row is decided by its head, without the full sort.
    (Every equality test above would still pass if `top_p_keep` always fell back.)"""
    calls = spy_on_the_full_sort(monkeypatch)
    generator = torch.Generator().manual_seed(7)
    probs = torch.softmax(torch.randn(2, 49152, generator=generator, dtype=torch.float64) * 8, -1)
    keep = nucleus.top_p_keep(probs, 0.9)
    assert calls == []
    assert torch.equal(keep, full_sort_reference(probs, 0.9))


def test_a_batch_is_decided_by_one_head_and_only_its_hard_rows_go_alone(monkeypatch):
    """All rows' first heads are taken at once; a row the head cannot decide (a tie at the k-th
    probability beyond the head, or a head short of top_p) is done alone, and only that row
    reaches the full sort when its head outgrows a quarter of V. Every row equals the rule."""
    calls = spy_on_the_full_sort(monkeypatch)
    alone: list[int] = []
    real_keep_row = nucleus._keep_row

    def spy_keep_row(row: torch.Tensor, top_p: float, k: int) -> torch.Tensor:
        alone.append(int(row.shape[0]))
        return real_keep_row(row, top_p, k)

    monkeypatch.setattr(nucleus, "_keep_row", spy_keep_row)
    v = 64
    peaked = torch.full((v,), 1.0, dtype=torch.float64)
    peaked[5], peaked[9] = 400.0, 300.0  # the head of 2 holds 700 / 762 > 0.9
    tied = peaked.clone()
    tied[11] = 300.0  # ties the 2nd largest: 3 tokens >= tau, not 2
    flat = torch.linspace(1.5, 1.0, v, dtype=torch.float64)  # no ties; needs most of V
    probs = torch.stack([peaked, tied, flat, peaked.roll(7)])
    probs = probs / probs.sum(dim=-1, keepdim=True)  # (4, V)
    keep = nucleus.top_p_keep(probs, 0.9, first_head=2)
    assert torch.equal(keep, full_sort_reference(probs, 0.9))
    sizes = keep.sum(dim=-1).tolist()
    assert sizes[:2] == [2, 3] and sizes[2] > v // 4 and sizes[3] == 2
    assert alone == [v, v]  # the tied row and the flat row, nothing else
    assert calls == [torch.Size([v])]  # the flat row alone reached the full sort


def test_ties_inside_a_batched_head_go_to_the_lower_id_and_big_heads_sort_it_all(monkeypatch):
    """Three equal probabilities fill a head of 3 (`topk` returns them in no set order); the cut
    falls between them, so the lower ids must be the ones kept, as the stable sort keeps them.
    A first head over a quarter of V is not taken: every row goes to the full sort."""
    row = torch.full((64,), 0.001, dtype=torch.float64)
    row[[40, 3, 50]] = 3.0
    row[17] = 1.0
    probs = torch.stack([row, row.roll(5)]) / row.sum()  # (2, 64)
    for top_p in (0.2, 0.4, 0.6):
        keep = nucleus.top_p_keep(probs, top_p, first_head=3)
        assert torch.equal(keep, full_sort_reference(probs, top_p)), top_p
    assert nucleus.top_p_keep(probs, 0.4, first_head=3)[0].nonzero().flatten().tolist() == [3, 40]
    row[row < 1] = torch.linspace(0.001, 0.002, 60, dtype=torch.float64)  # no ties at tau
    probs = torch.stack([row, row.roll(5)]) / row.sum()
    calls = spy_on_the_full_sort(monkeypatch)
    keep = nucleus.top_p_keep(probs, 0.4, first_head=17)
    assert torch.equal(keep, full_sort_reference(probs, 0.4))
    assert calls == [torch.Size([64]), torch.Size([64])]
