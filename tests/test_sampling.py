"""Tests of casspec_ref.sampling: the processed target law and the random sources."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from casspec_ref.base.input_checks import validate_sampling
from casspec_ref.sampling import RandomSource, TorchRandomSource, target_law


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p", "fragment"),
    [
        (-0.1, 0, 1.0, "temperature"),
        (float("nan"), 0, 1.0, "temperature"),
        (float("inf"), 0, 1.0, "temperature"),
        (1.0, -1, 1.0, "top_k"),
        (1.0, 2.5, 1.0, "top_k"),
        (1.0, 0, 0.0, "top_p"),
        (1.0, 0, 1.5, "top_p"),
        (1.0, 0, float("nan"), "top_p"),
    ],
)
def test_validate_sampling_rejects_bad_settings(temperature, top_k, top_p, fragment):
    with pytest.raises(ValueError, match=fragment):
        validate_sampling(temperature, top_k, top_p)


def test_validate_sampling_accepts_edges():
    validate_sampling(0.0, 0, 1.0)
    validate_sampling(2.0, 5, 1e-9)


@pytest.mark.parametrize(
    ("logits", "fragment"),
    [
        (torch.tensor([1.0, float("nan")]), "NaN"),
        (torch.tensor([1.0, float("inf")]), r"\+inf"),
        (torch.tensor([float("-inf"), float("-inf")]), "entirely -inf"),
        (torch.tensor([1, 2]), "floating-point"),
        (torch.tensor(1.0), "shape"),
    ],
)
def test_target_law_rejects_bad_logits(logits, fragment):
    with pytest.raises(ValueError, match=fragment):
        target_law(logits, 1.0)


def test_greedy_is_one_hot_with_ties_to_lowest_id():
    logits = torch.tensor([[0.5, 2.0, 2.0, -1.0], [3.0, 3.0, 3.0, 3.0]])
    law = target_law(logits, 0.0, top_k=2, top_p=0.3)
    expected = torch.tensor([[0.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    assert law.dtype == torch.float64
    assert torch.equal(law, expected)


def test_temperature_matches_softmax_computed_by_hand():
    logits = [0.3, -1.2, 2.0, 0.0]
    law = target_law(torch.tensor(logits, dtype=torch.float32), 0.7)
    # float32 logits are widened exactly, so compare against the float32 values.
    scaled = [float(np.float32(x)) / 0.7 for x in logits]
    weights = [math.exp(s) for s in scaled]
    expected = [w / sum(weights) for w in weights]
    assert np.allclose(law.numpy(), expected, rtol=1e-13, atol=0)


def test_top_k_keeps_k_tokens_ties_to_lower_ids():
    law = target_law(torch.tensor([1.0, 2.0, 2.0, 2.0, 0.0]), 1.0, top_k=2)
    assert law[1] == law[2] == 0.5
    assert law[[0, 3, 4]].sum() == 0


def test_top_p_boundary_keeps_exact_prefix():
    # Law 0.5, 0.25, 0.125, 0.125 (exact in binary). top_p = 0.75 keeps exactly two tokens.
    logits = torch.log(torch.tensor([0.125, 0.5, 0.25, 0.125], dtype=torch.float64))
    law = target_law(logits, 1.0, top_p=0.75)
    assert law.tolist() == pytest.approx([0.0, 2 / 3, 1 / 3, 0.0], abs=1e-15)
    # Just above 0.75 needs a third token; the tie between ids 0 and 3 keeps the lower id.
    law = target_law(logits, 1.0, top_p=0.76)
    assert law[0] > 0 and law[3] == 0


@given(
    logits=st.lists(
        st.floats(-5, 5, allow_nan=False, allow_infinity=False), min_size=1, max_size=8
    ),
    temperature=st.sampled_from([0.0, 0.5, 1.0, 1.7]),
    top_k=st.integers(0, 9),
    top_p=st.floats(0.05, 1.0),
)
@example(logits=[0.0, 0.0], temperature=1.0, top_k=1, top_p=1.0)
@example(logits=[1.0, 1.0, 1.0], temperature=1.0, top_k=0, top_p=2 / 3)
@example(logits=[-2.702965428041825e-59, 0.0], temperature=0.5, top_k=0, top_p=0.5)
def test_processed_law_is_a_law_and_top_p_is_minimal(logits, temperature, top_k, top_p):
    law = target_law(torch.tensor(logits, dtype=torch.float64), temperature, top_k, top_p).numpy()
    assert law.shape == (len(logits),)
    assert (law >= 0).all()
    assert abs(law.sum() - 1.0) < 1e-12
    kept = np.flatnonzero(law)
    if temperature == 0:
        assert kept.tolist() == [int(np.argmax(logits))]
        return
    if top_k:
        assert len(kept) <= top_k
    # top-p never drops the most likely token (of the law before it; logits that differ by less
    # than a rounding step tie there, and the tie goes to the lower id).
    before = target_law(torch.tensor(logits, dtype=torch.float64), temperature, top_k).numpy()
    assert law[int(np.argmax(before))] > 0
    if top_p < 1.0 and top_k == 0:
        # Minimality against the pre-top-p law, computed independently with numpy.
        pre = np.exp(np.array(logits) / temperature - max(logits) / temperature)
        pre /= pre.sum()
        order = sorted(range(len(logits)), key=lambda i: (-pre[i], i))
        n_kept = len(kept)
        assert sorted(order[:n_kept]) == kept.tolist()
        assert pre[order[: n_kept - 1]].sum() < top_p + 1e-12


def test_torch_random_source_is_a_random_source_and_reproducible():
    a, b = TorchRandomSource(seed=3), TorchRandomSource(seed=3)
    assert isinstance(a, RandomSource)
    law = np.array([0.1, 0.0, 0.6, 0.3])
    draws_a = [a.categorical(law) for _ in range(50)] + [a.bernoulli(0.4) for _ in range(50)]
    draws_b = [b.categorical(law) for _ in range(50)] + [b.bernoulli(0.4) for _ in range(50)]
    assert draws_a == draws_b
    assert 1 not in draws_a[:50]


def test_certain_draws_consume_no_randomness():
    gen = torch.Generator().manual_seed(5)
    source = TorchRandomSource(generator=gen)
    state = gen.get_state().clone()
    assert source.bernoulli(1.0) is True
    assert source.bernoulli(Fraction(0)) is False
    assert source.categorical(np.array([0.0, 1.0, 0.0])) == 1
    assert torch.equal(gen.get_state(), state)


def test_torch_random_source_rejects_bad_input():
    source = TorchRandomSource(seed=0)
    with pytest.raises(ValueError, match="bernoulli"):
        source.bernoulli(1.5)
    with pytest.raises(ValueError, match="no mass"):
        source.categorical(np.zeros(3))
    with pytest.raises(ValueError, match="1-D"):
        source.categorical(np.ones((2, 2)) / 4)
    with pytest.raises(ValueError, match="either seed or generator"):
        TorchRandomSource(seed=1, generator=torch.Generator())


def test_torch_random_source_frequencies():
    """Counts of 20000 categorical draws against the law, with a chi-square test.

    Seeded, so deterministic; for an unseeded run the false-failure rate of the threshold
    (chi-square with 3 degrees of freedom > 30.66) is 1e-6.
    """
    source = TorchRandomSource(seed=11)
    law = np.array([0.1, 0.2, 0.3, 0.4])
    counts = np.bincount([source.categorical(law) for _ in range(20000)], minlength=4)
    expected = law * 20000
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 30.66
