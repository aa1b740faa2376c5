"""Unit tests of casspec_ref.tree and casspec_ref.verify: the edge cases of docs/method.md §5.

Every law check here is exact: the verifier runs on `Fraction` laws under the enumerating source
of casspec_ref.proof.enumerate, and the expected law is computed by hand in the test.
"""

from __future__ import annotations

from fractions import Fraction as F

import numpy as np
import pytest
import torch

from casspec_ref.proof import exact_law
from casspec_ref.sampling import RandomSource, TorchRandomSource
from casspec_ref.tree import ChildRule, DraftTree, chain_tree
from casspec_ref.verify import verify_tree


def law(*weights: int) -> np.ndarray:
    total = sum(weights)
    return np.array([F(w, total) for w in weights], dtype=object)


def emitted_law(tree: DraftTree, laws: list[np.ndarray], **kwargs) -> dict:
    def run(rng: RandomSource) -> list[int]:
        return verify_tree(tree, laws, rng, **kwargs).emitted

    return exact_law(run, exact=True)


# --- tree.py ---------------------------------------------------------------------------------


def test_tree_mask_positions_and_paths():
    tree = DraftTree(7)
    a = tree.add_child(0, 1, ChildRule.DETERMINISTIC)
    b = tree.add_child(0, 2, ChildRule.DETERMINISTIC)
    c = tree.add_child(a, 3, ChildRule.INDEPENDENT, law(1, 1, 1, 1))
    mask = tree.attention_mask(prefix_len=2)
    assert mask.shape == (4, 6)
    assert mask[:, :2].all()
    expected = torch.tensor(
        [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool
    )
    assert torch.equal(mask[:, 2:], expected)
    assert tree.positions(2).tolist() == [2, 3, 3, 4]
    assert tree.path_to(c) == [a, c]
    assert tree.path_to(b) == [b]
    assert tree.path_to(0) == []
    assert tree.tokens == [7, 1, 2, 3]
    assert tree.max_depth == 2


@pytest.mark.parametrize(
    ("build", "fragment"),
    [
        (lambda t: t.add_child(5, 1, ChildRule.DETERMINISTIC), "parent"),
        (lambda t: t.add_child(0, -1, ChildRule.DETERMINISTIC), "token"),
        (lambda t: t.add_child(0, 1, "deterministic"), "ChildRule"),
        (lambda t: t.add_child(0, 1, ChildRule.INDEPENDENT), "need the draft law"),
        (lambda t: t.add_child(0, 1, ChildRule.DETERMINISTIC, law(1, 1)), "carry no draft law"),
        (lambda t: t.add_child(0, 4, ChildRule.INDEPENDENT, law(1, 1)), "outside"),
        (
            lambda t: (
                t.add_child(0, 1, ChildRule.DETERMINISTIC),
                t.add_child(0, 0, ChildRule.INDEPENDENT, law(1, 1)),
            ),
            "one rule per parent",
        ),
        (
            lambda t: (
                t.add_child(0, 1, ChildRule.WITHOUT_REPLACEMENT, law(1, 1)),
                t.add_child(0, 0, ChildRule.WITHOUT_REPLACEMENT, law(1, 2)),
            ),
            "share",
        ),
        (
            lambda t: (
                t.add_child(0, 1, ChildRule.WITHOUT_REPLACEMENT, law(1, 1)),
                t.add_child(0, 1, ChildRule.WITHOUT_REPLACEMENT, law(1, 1)),
            ),
            "repeats",
        ),
    ],
)
def test_tree_rejects_bad_children(build, fragment):
    with pytest.raises(ValueError, match=fragment):
        build(DraftTree(0))


# --- verify.py: the node rules by hand --------------------------------------------------------


def test_chain_rule_matches_hand_computation():
    # p = (1/2, 1/4, 1/4), q = (1/4, 1/2, 1/4), draft x = 1: accept w.p. (1/4)/(1/2) = 1/2;
    # residual norm(max(p - q, 0)) = (1, 0, 0). Bonus law at the child: (0, 0, 1).
    tree = chain_tree(0, [1], [law(1, 2, 1)])
    got = emitted_law(tree, [law(2, 1, 1), law(0, 0, 1)])
    assert got == {(1, 2): F(1, 2), (0,): F(1, 2)}


def test_draft_token_with_q_zero_is_rejected():
    tree = chain_tree(0, [2], [law(1, 1, 0)])
    got = emitted_law(tree, [law(1, 1, 2), law(1, 0, 0)])
    # Rejected for sure; residual norm(max(p - q, 0)) = (0, 0, 1).
    assert got == {(2,): F(1)}
    decisions = verify_tree(tree, [law(1, 1, 2), law(1, 0, 0)], TorchRandomSource(0)).decisions
    assert decisions == [(1, False)]


def test_p_equals_q_always_accepts():
    q = law(3, 1, 0, 4)
    tree = chain_tree(0, [3], [q])
    got = emitted_law(tree, [q, law(0, 1, 1, 0)])
    assert got == {(3, 1): F(1, 2), (3, 2): F(1, 2)}


def test_disjoint_supports_always_reject():
    tree = chain_tree(0, [0], [law(1, 0, 0)])
    got = emitted_law(tree, [law(0, 1, 3), law(1, 1, 1)])
    assert got == {(1,): F(1, 4), (2,): F(3, 4)}


def test_independent_children_use_successive_residuals():
    # p = (1/2, 1/2, 0); child a = 0 from q1 = (1, 0, 0): accept w.p. 1/2, else residual
    # (0, 1, 0); child b = 1 from q2 = (0, 1/2, 1/2): accept w.p. min(1, 1/(1/2)) = 1.
    tree = DraftTree(0)
    tree.add_child(0, 0, ChildRule.INDEPENDENT, law(1, 0, 0))
    tree.add_child(0, 1, ChildRule.INDEPENDENT, law(0, 1, 1))
    got = emitted_law(tree, [law(1, 1, 0), law(0, 0, 1), law(1, 0, 0)])
    assert got == {(0, 2): F(1, 2), (1, 0): F(1, 2)}


def test_without_replacement_uses_the_conditional_law():
    # q = (1/2, 1/4, 1/4), children 0 then 1. p = (1/4, 1/4, 1/2).
    # Child 0: accept w.p. (1/4)/(1/2) = 1/2; residual r2 = norm(max(p - q, 0)) = (0, 0, 1).
    # Child 1 is tested against the conditional q2 = (0, 1/2, 1/2): r2(1) = 0, rejected;
    # residual norm(max(r2 - q2, 0)) = (0, 0, 1).
    q = law(2, 1, 1)
    tree = DraftTree(0)
    tree.add_child(0, 0, ChildRule.WITHOUT_REPLACEMENT, q)
    tree.add_child(0, 1, ChildRule.WITHOUT_REPLACEMENT, q)
    got = emitted_law(tree, [law(1, 1, 2), law(1, 0, 0), law(0, 1, 0)])
    assert got == {(0, 0): F(1, 2), (2,): F(1, 2)}


def test_deterministic_duplicate_is_rejected_after_first_rejection():
    tree = DraftTree(0)
    first = tree.add_child(0, 1, ChildRule.DETERMINISTIC)
    second = tree.add_child(0, 1, ChildRule.DETERMINISTIC)
    laws = [law(1, 1, 2), law(1, 0, 0), law(0, 1, 0)]
    got = emitted_law(tree, laws)
    # Accept token 1 w.p. 1/4 through the first child, never through the second.
    assert got == {(1, 0): F(1, 4), (0,): F(1, 4), (2,): F(1, 2)}
    for seed in range(20):
        result = verify_tree(tree, laws, TorchRandomSource(seed))
        assert second not in result.accepted
        if result.decisions[0] == (first, False):
            assert result.decisions[1] == (second, False)


def test_greedy_follows_the_argmax_child_without_randomness():
    one_hot = [np.eye(4)[2], np.eye(4)[0], np.eye(4)[3], np.eye(4)[1]]
    tree = DraftTree(0)
    a = tree.add_child(0, 1, ChildRule.DETERMINISTIC)
    b = tree.add_child(0, 2, ChildRule.DETERMINISTIC)
    c = tree.add_child(b, 3, ChildRule.INDEPENDENT, np.full(4, 0.25))
    gen = torch.Generator().manual_seed(0)
    state = gen.get_state().clone()
    result = verify_tree(tree, one_hot, TorchRandomSource(generator=gen))
    assert result.accepted == [b, c]
    assert result.next_token == 1
    assert a not in result.accepted
    assert torch.equal(gen.get_state(), state)


def test_stop_token_ends_the_step():
    tree = DraftTree(0)
    a = tree.add_child(0, 2, ChildRule.DETERMINISTIC)
    tree.add_child(a, 1, ChildRule.DETERMINISTIC)
    laws = [law(0, 0, 1), law(0, 1, 0), law(1, 0, 0)]
    result = verify_tree(tree, laws, TorchRandomSource(0), stop_ids=[2])
    assert result.accepted == [a]
    assert result.stopped and result.next_token is None
    assert result.emitted == [2]
    assert [d[0] for d in result.decisions] == [a]  # the stop node's child is never tested


def test_max_accept_limits_and_draws_from_p_at_the_limit():
    tree = chain_tree(0, [1, 2], None)
    laws = [law(0, 1, 0), law(0, 0, 1), law(1, 1, 0)]
    got = emitted_law(tree, laws, max_accept=1)
    assert got == {(1, 2): F(1)}
    got = emitted_law(tree, laws, max_accept=0)
    assert got == {(1,): F(1)}
    got = emitted_law(tree, laws)
    assert got == {(1, 2, 0): F(1, 2), (1, 2, 1): F(1, 2)}


def test_callers_laws_are_not_modified():
    q = law(1, 2, 1)
    p = [law(2, 1, 1), law(1, 1, 1)]
    q_float = np.array([0.25, 0.5, 0.25])
    p_float = [np.array([0.5, 0.25, 0.25]), np.array([0.2, 0.3, 0.5])]
    copies = [a.copy() for a in [q, *p, q_float, *p_float]]
    for seed in range(30):
        verify_tree(chain_tree(0, [1], [q]), p, TorchRandomSource(seed))
        verify_tree(chain_tree(0, [1], [q_float]), p_float, TorchRandomSource(seed))
    for before, after in zip(copies, [q, *p, q_float, *p_float], strict=True):
        assert np.array_equal(before, after)


@pytest.mark.parametrize(
    ("laws", "kwargs", "fragment"),
    [
        ([np.array([0.5, 0.5])], {}, "one target law per tree node"),
        ([np.array([0.5, 0.6]), np.array([0.5, 0.5])], {}, "sum to 1"),
        ([np.array([1.5, -0.5]), np.array([0.5, 0.5])], {}, "non-negative"),
        ([np.array([0.5, 0.5]), np.array([1.0, 0.0, 0.0])], {}, "entries"),
        ([law(1, 2), law(1, 0)], {"max_accept": -1}, "max_accept"),
        ([np.ones((2, 2)) / 4, np.array([0.5, 0.5])], {}, "1-D"),
    ],
)
def test_verify_rejects_bad_input(laws, kwargs, fragment):
    tree = chain_tree(0, [1], [np.array([0.5, 0.5])])
    with pytest.raises(ValueError, match=fragment):
        # node 1's law is only read once node 1 is accepted: q = (1/2, 1/2) vs p(1) forces that.
        for seed in range(10):
            verify_tree(tree, laws, TorchRandomSource(seed), **kwargs)


def test_accepts_a_tensor_of_laws():
    tree = chain_tree(0, [1], [np.array([0.5, 0.5])])
    laws = torch.tensor([[0.0, 1.0], [1.0, 0.0]])
    result = verify_tree(tree, laws, TorchRandomSource(0))
    assert result.emitted == [1, 0]


def test_real_vocabulary_width_runs_with_vector_ops():
    """A 49152-wide law (SmolLM2's vocabulary) through a small mixed tree; no timing asserted."""
    gen = np.random.default_rng(0)
    vocab = 49152

    def random_law() -> np.ndarray:
        w = gen.random(vocab) ** 8
        return w / w.sum()

    q = random_law()
    tree = DraftTree(5)
    a = tree.add_child(0, int(np.argmax(q)), ChildRule.WITHOUT_REPLACEMENT, q)
    tree.add_child(0, int(np.argsort(q)[-2]), ChildRule.WITHOUT_REPLACEMENT, q)
    tree.add_child(a, 7, ChildRule.DETERMINISTIC)
    laws = [random_law() for _ in range(len(tree))]
    result = verify_tree(tree, laws, TorchRandomSource(1))
    assert result.next_token is not None and 0 <= result.next_token < vocab


def test_enumeration_covers_the_verifier_decisions():
    """Drafting and verification both under the oracle: total mass 1, first token law p."""
    q1, q2 = law(1, 1, 1), law(0, 1, 1)
    laws = [law(1, 2, 3), law(1, 1, 1), law(2, 0, 1), law(0, 1, 0)]

    def run(rng: RandomSource) -> list[int]:
        tree = DraftTree(0)
        x = tree.add_child(0, rng.categorical(q1), ChildRule.INDEPENDENT, q1)
        tree.add_child(0, rng.categorical(q2), ChildRule.INDEPENDENT, q2)
        tree.add_child(x, 1, ChildRule.DETERMINISTIC)
        return verify_tree(tree, laws, rng).emitted

    got = exact_law(run, exact=True)
    assert sum(got.values()) == 1
    first: dict[int, F] = {}
    for tokens, prob in got.items():
        first[tokens[0]] = first.get(tokens[0], F(0)) + prob
    assert first == {0: F(1, 6), 1: F(2, 6), 2: F(3, 6)}
