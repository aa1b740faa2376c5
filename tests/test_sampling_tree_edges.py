"""Edge cases of sampling.py and tree.py that mutation testing (`make mutation`) found untested.

Each test pins one documented behaviour that a surviving mutant changed: the exact error
messages, tie rules on large vocabularies, top_p = 1 as "off", the random source's seeding,
uniform precision and zero-probability entries, and the tree's index checks and mask dtypes.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from casspec_ref.base.input_checks import validate_sampling
from casspec_ref.sampling import TorchRandomSource, target_law
from casspec_ref.tree import ChildRule, DraftTree, chain_tree

# --- sampling.py -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("1", 0, 1.0), r"^temperature must be a real number >= 0, got '1'$"),
        ((True, 0, 1.0), r"^temperature must be a real number >= 0, got True$"),
        ((1.0, 0, "0.5"), r"^top_p must be a real number in \(0, 1\], got '0.5'$"),
        ((1.0, 0, True), r"^top_p must be a real number in \(0, 1\], got True$"),
    ],
)
def test_non_numbers_are_refused_by_name(args, message):
    with pytest.raises(ValueError, match=message):
        validate_sampling(*args)


def test_target_law_error_messages_are_exact():
    with pytest.raises(ValueError, match=r"^logits must be a torch.Tensor, got list$"):
        target_law([0.0, 1.0], 1.0)  # type: ignore[arg-type]
    with pytest.raises(
        ValueError, match=r"^logits contain NaN or \+inf; only finite values and -inf are allowed$"
    ):
        target_law(torch.tensor([0.0, float("nan")]), 1.0)
    with pytest.raises(
        ValueError, match=r"^a row of logits is entirely -inf: no token can be sampled$"
    ):
        # One row of two: the check is per row, not over the whole tensor.
        target_law(torch.tensor([[0.0, 1.0], [float("-inf"), float("-inf")]]), 1.0)


def test_ties_on_a_large_vocabulary_keep_the_lowest_ids():
    """5000 equal logits: top-k and top-p keep a prefix of the ids (a stable sort; an unstable
    one scrambles ties at this size)."""
    logits = torch.zeros(5000, dtype=torch.float64)
    kept_k = torch.nonzero(target_law(logits, 1.0, top_k=100)).flatten().tolist()
    assert kept_k == list(range(100))
    kept_p = torch.nonzero(target_law(logits, 1.0, top_p=0.02)).flatten().tolist()
    assert kept_p == list(range(len(kept_p))) and 100 <= len(kept_p) <= 101


def test_top_p_one_is_off_even_when_the_cumulative_mass_rounds_to_one():
    """With p = (1 - 4e-18, 2e-18, 2e-18) the float cumulative mass reaches 1.0 after the first
    token; top_p = 1 must still keep every token (it is "off", not a threshold)."""
    probs = target_law(torch.tensor([0.0, -40.0, -40.0], dtype=torch.float64), 1.0)
    assert (probs > 0).all()


def test_seeded_sources_are_reproducible_and_seeded_by_the_seed():
    def draws(source: TorchRandomSource) -> list[int]:
        return [source.categorical(np.ones(7) / 7) for _ in range(12)]

    assert draws(TorchRandomSource(5)) == draws(TorchRandomSource(5))
    assert draws(TorchRandomSource(5)) != draws(TorchRandomSource(6))
    TorchRandomSource()  # unseeded: no error


def _first_uniform(seed: int) -> float:
    generator = torch.Generator().manual_seed(seed)
    return float(torch.rand((), generator=generator, dtype=torch.float64))


def test_bernoulli_uses_one_float64_uniform_and_a_strict_comparison():
    """True exactly when the float64 uniform u is < p: p = u gives False, the next float
    above u gives True."""
    for seed in range(5):
        u = _first_uniform(seed)
        assert TorchRandomSource(seed).bernoulli(u) is False
        assert TorchRandomSource(seed).bernoulli(float(np.nextafter(u, 1.0))) is True


def test_categorical_scales_the_uniform_by_the_total_mass():
    """Unnormalized weights (1, 3): the draw is the inverse CDF at u * 4."""
    for seed in range(20):
        u = _first_uniform(seed)
        want = 0 if u * 4 < 1 else 1
        assert TorchRandomSource(seed).categorical(np.array([1.0, 3.0])) == want


def test_categorical_never_returns_a_zero_probability_token():
    """At u = 0 the inverse CDF must skip the leading zero-probability entry."""

    class ZeroUniform(TorchRandomSource):
        def _uniform(self) -> float:
            return 0.0

    assert ZeroUniform(0).categorical(np.array([0.0, 0.5, 0.5])) == 1


def test_categorical_edge_laws():
    source = TorchRandomSource(0)
    assert source.categorical(np.array([1.0])) == 0
    message = r"^categorical law has negative or non-finite entries$"
    with pytest.raises(ValueError, match=message):
        source.categorical(np.array([-0.5, 1.5]))
    with pytest.raises(ValueError, match=message):
        source.categorical(np.array([np.inf, 1.0]))
    with pytest.raises(ValueError, match=r"^categorical law has no mass$"):
        source.categorical(np.zeros(2))
    with pytest.raises(ValueError, match=r"^bernoulli probability must be in \[0, 1\], got -0.5$"):
        source.bernoulli(-0.5)
    with pytest.raises(ValueError, match=r"^give either seed or generator, not both$"):
        TorchRandomSource(seed=1, generator=torch.Generator())


# --- tree.py -----------------------------------------------------------------------------------


def test_path_to_walks_up_to_the_root_and_checks_its_argument():
    tree = chain_tree(0, [1, 2, 3], None)
    assert tree.path_to(3) == [1, 2, 3]
    assert tree.path_to(0) == []
    for bad in (4, -1):
        with pytest.raises(ValueError, match=rf"^node must be in \[0, 4\), got {bad}$"):
            tree.path_to(bad)


def test_masks_are_boolean_and_a_zero_prefix_is_allowed():
    tree = DraftTree(0)
    a = tree.add_child(0, 1, ChildRule.DETERMINISTIC)
    tree.add_child(0, 2, ChildRule.DETERMINISTIC)
    tree.add_child(a, 3, ChildRule.DETERMINISTIC)
    assert tree.ancestors_mask().dtype == torch.bool
    mask = tree.attention_mask(0)
    assert mask.dtype == torch.bool and mask.shape == (4, 4)
    assert torch.equal(mask, tree.ancestors_mask())
    assert tree.attention_mask(2).dtype == torch.bool
    assert tree.positions(0).tolist() == [0, 1, 1, 2]
    for method in (tree.attention_mask, tree.positions):
        with pytest.raises(ValueError, match=r"^prefix_len must be >= 0, got -1$"):
            method(-1)


def test_draft_laws_must_be_one_dimensional_and_may_have_one_entry():
    tree = DraftTree(0)
    tree.add_child(0, 0, ChildRule.INDEPENDENT, np.array([1.0]))  # a one-token vocabulary
    message = r"^a draft law must be a non-empty 1-D array, got shape \(1, 1\)$"
    with pytest.raises(ValueError, match=message):
        tree.add_child(0, 0, ChildRule.INDEPENDENT, np.ones((1, 1)))
    # Other dtypes are stored as float64.
    node = tree.add_child(0, 1, ChildRule.INDEPENDENT, np.array([0.5, 0.5], dtype=np.float32))
    assert tree.draft_probs(node).dtype == np.float64


def test_tree_arguments_are_checked_with_exact_messages():
    token = r"^a token must be a non-negative integer id, got "
    for bad in (1.5, True, -1):
        with pytest.raises(ValueError, match=token):
            DraftTree(bad)  # type: ignore[arg-type]
    tree = DraftTree(0)
    assert tree.parent(0) == -1 and tree.depth(0) == 0
    with pytest.raises(
        ValueError, match=r"^parent must be an existing node index in \[0, 1\), got 1$"
    ):
        tree.add_child(1, 0, ChildRule.DETERMINISTIC)
    with pytest.raises(
        ValueError, match=r"^DETERMINISTIC children carry no draft law; pass draft_probs=None$"
    ):
        tree.add_child(0, 0, ChildRule.DETERMINISTIC, np.array([1.0, 0.0]))
    with pytest.raises(ValueError, match=r"^token 2 is outside the draft law's vocabulary$"):
        tree.add_child(0, 2, ChildRule.INDEPENDENT, np.array([0.5, 0.5]))
    tree.add_child(0, 0, ChildRule.WITHOUT_REPLACEMENT, np.array([0.5, 0.5]))
    shared = (
        r"^WITHOUT_REPLACEMENT siblings must share the one unconditional law q they were drawn "
        r"from$"
    )
    with pytest.raises(ValueError, match=shared):
        tree.add_child(0, 1, ChildRule.WITHOUT_REPLACEMENT, np.array([0.25, 0.75]))


def test_greedy_law_of_float32_logits_is_that_of_their_float64_values():
    """The greedy law takes the argmax in the logits' own dtype (no float64 copy of N x V):
    the same one-hot rows, in float64, as from the float64 values, ties and -inf included; the
    checks read one row maximum and keep their order (NaN before an all -inf row)."""
    gen = torch.Generator().manual_seed(0)
    rows = torch.randn(6, 300, generator=gen).to(torch.float32)
    rows[1, 7] = rows[1, 200] = rows[1].max() + 1.0  # a tie: the lowest id wins
    rows[2, :150] = float("-inf")
    law32, law64 = target_law(rows, 0.0), target_law(rows.double(), 0.0)
    assert law32.dtype == torch.float64 and torch.equal(law32, law64)
    assert law32[1].nonzero().flatten().tolist() == [7]
    both = torch.tensor([[0.0, float("nan")], [float("-inf"), float("-inf")]])
    with pytest.raises(ValueError, match=r"^logits contain NaN"):
        target_law(both, 0.0)
    with pytest.raises(ValueError, match=r"^logits contain NaN or \+inf"):
        target_law(torch.tensor([[float("-inf"), float("inf")]]), 0.0)
