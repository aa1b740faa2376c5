"""Edge cases of verify.py that mutation testing (`make mutation`) found untested.

Each test pins one behaviour a surviving mutant of casspec_ref/verify.py changed; the expected
values are computed by hand (exact `Fraction` laws under the enumerating source).
"""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest
import torch
from test_verify import emitted_law, law

from casspec_ref.proof import exact_law
from casspec_ref.sampling import TorchRandomSource
from casspec_ref.tree import ChildRule, DraftTree
from casspec_ref.verify import verify_tree

WOR = ChildRule.WITHOUT_REPLACEMENT


def test_without_replacement_siblings_that_exhaust_q_raise_a_clear_error():
    """q = (1, 0): after the first sibling (token 0) is removed, q has no mass left for the
    second one (token 1), which cannot have been drawn from it."""
    q = law(1, 0)
    tree = DraftTree(0)
    tree.add_child(0, 0, WOR, q)
    tree.add_child(0, 1, WOR, q)
    # p(0) = 0 rejects the first sibling for sure; the second one is then tested.
    with pytest.raises(ValueError, match="WITHOUT_REPLACEMENT child follows siblings that exhaust"):
        emitted_law(tree, [law(0, 1), law(1, 1), law(1, 1)])


def test_a_zero_mass_sibling_removed_from_q_changes_nothing():
    """The first sibling has q = 0 (rejected without a coin); removing it leaves q unchanged,
    so the second sibling is tested with q itself: accept with min(1, p(1) / q(1))."""
    q = law(1, 1, 0)
    tree = DraftTree(0)
    tree.add_child(0, 2, WOR, q)
    tree.add_child(0, 1, WOR, q)
    p = law(1, 1, 2)  # residual after rejecting token 2 with q: p itself (p - q has mass)
    got = emitted_law(tree, [p, law(1, 0, 0), law(0, 1, 0)])
    # Rejecting token 2 (q(2) = 0): residual r = norm(max(p - q, 0)) = norm(0, 0, 1/2) = (0,0,1).
    # Token 1: accept with min(1, r(1) / q(1)) = 0, so the residual stays (0, 0, 1): emit (2,).
    assert got == {(2,): F(1)}


def test_one_hot_draft_for_fraction_laws_stays_exact():
    """A deterministic child on Fraction laws is tested with an exact one-hot law: the emitted
    law is exact (equality of Fractions), with p(x) as the acceptance probability."""
    tree = DraftTree(0)
    tree.add_child(0, 1, ChildRule.DETERMINISTIC)
    got = emitted_law(tree, [law(1, 2, 3), law(1, 1, 0)])
    assert got == {(1, 0): F(1, 6), (1, 1): F(1, 6), (0,): F(1, 6), (2,): F(3, 6)}
    assert all(isinstance(v, F) for v in got.values())


def test_exhausted_siblings_error_message_is_exact():
    q = law(1, 0)
    tree = DraftTree(0)
    tree.add_child(0, 0, WOR, q)
    tree.add_child(0, 1, WOR, q)
    message = r"^a WITHOUT_REPLACEMENT child follows siblings that exhaust the draft law's support$"
    with pytest.raises(ValueError, match=message):
        emitted_law(tree, [law(0, 1), law(1, 1), law(1, 1)])


def test_a_root_only_tree_draws_from_p():
    """No drafted node: only the root's law exists (and is read)."""
    assert emitted_law(DraftTree(1), [law(1, 3)]) == {(0,): F(1, 4), (1,): F(3, 4)}


def test_a_one_token_vocabulary_is_a_law():
    tree = DraftTree(0)
    tree.add_child(0, 0, ChildRule.DETERMINISTIC)
    assert emitted_law(tree, [law(1), law(1)]) == {(0, 0): F(1)}


def test_rejection_with_no_excess_keeps_the_residual():
    """p = q and a child whose token q gives probability 0: it is rejected without a coin, and
    max(p - q, 0) has no mass; the residual stays p (no division by zero)."""
    p = law(1, 1, 0)
    tree = DraftTree(0)
    tree.add_child(0, 2, ChildRule.INDEPENDENT, p)
    assert emitted_law(tree, [p, law(0, 0, 1)]) == {(0,): F(1, 2), (1,): F(1, 2)}
    float_p = np.array([0.5, 0.5, 0.0])
    float_tree = DraftTree(0)
    float_tree.add_child(0, 2, ChildRule.INDEPENDENT, float_p)
    got = exact_law(lambda rng: verify_tree(float_tree, [float_p, float_p], rng).emitted)
    assert got == {(0,): 0.5, (1,): 0.5}


@pytest.mark.parametrize("rule", [ChildRule.INDEPENDENT, WOR])
def test_bad_draft_laws_are_named(rule):
    tree = DraftTree(0)
    tree.add_child(0, 1, rule, np.array([0.5, 0.4]))
    with pytest.raises(ValueError, match=r"^draft law of node 1 must sum to 1"):
        verify_tree(tree, [np.array([0.5, 0.5])] * 2, TorchRandomSource(0))
    wide = DraftTree(0)
    wide.add_child(0, 1, rule, np.array([0.5, 0.25, 0.25]))
    with pytest.raises(ValueError, match=r"^draft law of node 1 has 3 entries, the target law 2$"):
        verify_tree(wide, [np.array([0.5, 0.5])] * 2, TorchRandomSource(0))


def test_bad_target_laws_are_named():
    tree = DraftTree(0)
    with pytest.raises(ValueError, match=r"^target law of node 0 must sum to 1"):
        verify_tree(tree, [np.array([0.5, 0.4])], TorchRandomSource(0))
    with pytest.raises(ValueError, match=r"^target law of node 0 is missing$"):
        verify_tree(tree, [None], TorchRandomSource(0))  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"^target law of node 0 must be non-negative and sum "):
        verify_tree(tree, [law(1, 1) * 2], TorchRandomSource(0))
    negative = np.array([F(3, 2), F(-1, 2)], dtype=object)
    with pytest.raises(ValueError, match="must be non-negative and sum exactly to 1"):
        verify_tree(tree, [negative], TorchRandomSource(0))


def test_object_laws_of_ints_and_floats_are_made_exact():
    """Object arrays whose entries are not all `Fraction` (ints, binary floats) are converted
    to `Fraction`, so the arithmetic stays exact: 0.5 / 0.75 is exactly 2/3 here, which float
    division would round."""
    tree = DraftTree(0)
    tree.add_child(0, 1, ChildRule.INDEPENDENT, np.array([0.25, 0.75], dtype=object))
    p = np.array([0.5, 0.5], dtype=object)
    got = emitted_law(tree, [p, np.array([0, 1], dtype=object)])
    # Accept token 1 with 0.5 / 0.75 = 2/3; on rejection the residual is norm(1/4, 0) = (1, 0).
    assert got == {(1, 1): F(2, 3), (0,): F(1, 3)}


def test_one_dimensional_tensors_and_float32_laws_are_read_in_float64():
    """Per-node laws given as 1-D tensors (float32 here) are converted to float64 numpy laws:
    the enumerated law equals the one of the same values given as float64 arrays."""
    p32 = torch.tensor([0.2, 0.3, 0.5], dtype=torch.float32)
    q32 = torch.tensor([0.1, 0.6, 0.3], dtype=torch.float32)
    p64, q64 = p32.double().numpy(), q32.double().numpy()

    def law_of(p, q, second):  # type: ignore[no-untyped-def]
        tree = DraftTree(0)
        tree.add_child(0, 1, ChildRule.INDEPENDENT, q)
        return exact_law(lambda rng: verify_tree(tree, [p, second], rng).emitted)

    want = law_of(p64, q64, p64)
    assert law_of(p32, q32, p32) == want
    # float32 numpy arrays too (the arithmetic in float32 would round differently).
    assert law_of(p32.numpy(), q32.numpy(), p32.numpy()) == want


def test_bad_laws_of_later_nodes_and_tensors_are_named():
    tree = DraftTree(0)
    tree.add_child(0, 1, ChildRule.DETERMINISTIC)
    # p(1) = 1 accepts node 1 for sure; its law is then read and refused.
    with pytest.raises(ValueError, match=r"^target law of node 1 must sum to 1"):
        verify_tree(tree, [np.array([0.0, 1.0]), np.array([0.5, 0.4])], TorchRandomSource(0))
    with pytest.raises(ValueError, match=r"^target_probs tensor must be \(N, V\), got \(2,\)$"):
        verify_tree(DraftTree(0), torch.tensor([0.5, 0.5]), TorchRandomSource(0))


def test_a_law_of_the_wrong_size_is_named_with_both_sizes() -> None:
    """The two size messages, word for word: a target law against node 0's, and a draft law
    against the target law at its node (the mutation run found them unpinned)."""
    rng = TorchRandomSource(seed=0)
    p4, p3 = np.full(4, 0.25), np.full(3, 1 / 3)
    certain = np.array([0.0, 1.0, 0.0, 0.0])  # node 0's law: its child, token 1, is accepted
    chain = DraftTree(root_token=0)
    chain.add_child(0, 1, ChildRule.DETERMINISTIC)
    with pytest.raises(ValueError, match=r"^target law of node 1 has 3 entries, not 4$"):
        verify_tree(chain, [certain, p3], rng)
    tree = DraftTree(root_token=0)
    tree.add_child(0, 1, ChildRule.INDEPENDENT, np.array([0.5, 0.5, 0.0]))
    with pytest.raises(ValueError, match=r"^draft law of node 1 has 3 entries, the target law 4$"):
        verify_tree(tree, [p4, p4], rng)


def test_a_second_child_rule_at_one_parent_names_the_parent() -> None:
    tree = DraftTree(root_token=0)
    a = tree.add_child(0, 1, ChildRule.DETERMINISTIC)
    tree.add_child(a, 2, ChildRule.DETERMINISTIC)
    with pytest.raises(ValueError, match=r"^node 1 already has deterministic children"):
        tree.add_child(a, 3, ChildRule.INDEPENDENT, np.array([0.0, 0.0, 0.0, 1.0]))
