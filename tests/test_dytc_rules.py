"""DyTC's decision rules at their boundaries, computed by hand.

tests/test_dytc.py shows that DyTC's decisions move the right way and that the policy keeps up
in the simulator. The tests here pin each rule exactly, at the point where its decision flips:
the cap T(S, k) puts on a chain, the growth rule's stop, the room a leaf has, how many siblings
an expansion keeps, and when a stale tree size is explored. Each was written against a mutant of
`casspec_ref/dytc.py` that the other tests let through (docs/testing.md, the DyTC mutation run).
"""

from __future__ import annotations

import random

import pytest
from dytc_simulator import SimDrafter, World

from casspec_ref.dytc import best_k, tree_ewif
from casspec_ref.dytc_config import PLD, RECYCLE, DyTCConfig
from casspec_ref.dytc_estimates import Outcome
from casspec_ref.dytc_refinements import RefinedDyTC
from casspec_ref.dytc_tree import Expansion, TreeEstimate

STEP = 0.040  # seconds of a plain step in every policy below


def _policy(verify: dict[int, float], draft_seconds: float = 0.004, **config: float) -> RefinedDyTC:
    """A policy (model draft "l1", no warm-up) that has timed the target's forward over each
    tree size in `verify` and one call of "l1" at `draft_seconds`."""
    policy = RefinedDyTC(["l1"], DyTCConfig(warmup=0, **config))  # type: ignore[arg-type]
    for _ in range(2):  # the first timing of a model draft is discarded (one-time setup)
        policy.observe_step([], 1, verify[1], {"l1": (1, draft_seconds)})
    for size, seconds in verify.items():
        policy.observe_step([], size, seconds, {})
    return policy


def _linear(sizes: int = 9, per_node: float = 0.002) -> dict[int, float]:
    """40 ms for the root alone, `per_node` more for each further node."""
    return {n: STEP + per_node * (n - 1) for n in range(1, sizes + 1)}


def _drafter(world: World, max_nodes: int = 32) -> SimDrafter:
    return SimDrafter(world, random.Random(0), max_nodes, 16)


def _world(siblings: tuple[float, ...] = (), offer: dict[str, float] | None = None) -> World:
    """Draft "l1" (its alternatives' confidences: alpha 0.7, then `siblings`) and lookups."""
    return World(
        lambda t: STEP,
        {"l1": 0.7, PLD: 0.5, RECYCLE: 0.3},
        {"l1": 0.004, PLD: 0.0, RECYCLE: 0.0},
        siblings={"l1": siblings, RECYCLE: siblings},
        offer=offer or {},
    )


# ------------------------------------------------------------------ T(S, k) caps a chain
def test_best_k_by_hand() -> None:
    # alpha 0.8, c 0.1, no lookup after: T(1) = 0.8 / 1.1 = 0.727, T(2) = 1.44 / 1.7 = 0.847.
    assert best_k(0.8, 0.1, 0.0, 0.0, [1.0, 1.5]) == 2
    # The lookup's cost is in every denominator: a costly one favours the longer draft.
    # c_PLD = 10: T = 0.5 / 11.1, 0.75 / 11.7, 0.875 / 12.3 -> k = 3; c_PLD = 0: 0.45, 0.44, 0.38.
    assert best_k(0.5, 0.1, 0.0, 10.0, [1.0, 1.5, 2.0]) == 3
    assert best_k(0.5, 0.1, 0.0, 0.0, [1.0, 1.5, 2.0]) == 1


def test_a_chain_is_bounded_by_t_score_on_the_grown_trees_verify_cost() -> None:
    """T(S,k) caps a model chain's k, each k priced at the verify cost of the tree k nodes
    bigger: here 3 nodes verify cheaper than 2 (a non-monotone curve), so k = 2 is T's best and
    the plan's; priced one size short (1 and 2 nodes), T's best would be k = 1."""
    policy = _policy({1: STEP, 2: STEP, 3: 0.032}, prior_alpha=0.5, prior_pld_alpha=1.0, max_k=2)
    assert policy.cost("l1") == pytest.approx(0.1) and policy.cost(PLD) == 0.0
    assert (
        best_k(0.5, 0.1, 1.0, 0.0, [1.0, 0.8]) == 2 and best_k(0.5, 0.1, 1.0, 0.0, [1.0, 1.0]) == 1
    )
    choice = policy.plan(_drafter(_world()), TreeEstimate(), ["l1"])
    assert choice is not None and (choice.draft, choice.k) == ("l1", 2)
    assert choice.predicted_ewif == pytest.approx(1.75 * STEP / (0.008 + 0.032))


def test_t_score_caps_a_model_chain_where_the_ewif_would_go_longer() -> None:
    """Flat verify costs, alpha 0.5, c 0.1, a lookup after it always right: T(1) = 1 / 1.1 beats
    T(2) = 1 / 1.2, so k = 1, though the tree's EWIF alone would pick k = 2 (1.75 / 1.2 against
    1.5 / 1.1)."""
    policy = _policy({n: STEP for n in range(1, 10)}, prior_alpha=0.5, prior_pld_alpha=1.0)
    choice = policy.plan(_drafter(_world()), TreeEstimate(), ["l1"])
    assert choice is not None and (choice.draft, choice.k) == ("l1", 1)
    assert choice.predicted_ewif == pytest.approx(1.5 * STEP / (0.004 + STEP), rel=1e-12)


def test_a_chain_never_outgrows_the_room_of_its_leaf() -> None:
    """A cheap sure draft on a flat curve wants a long chain (T(3) > T(2) > T(1)); a tree capped
    at 3 nodes leaves the root room for 2."""
    policy = _policy({n: STEP for n in range(1, 10)}, 0.002, prior_alpha=0.9, max_tree_size=3)
    choice = policy.plan(_drafter(_world(), max_nodes=64), TreeEstimate(), ["l1"])
    assert choice is not None and choice.k == 2


# ------------------------------------------------------------------ the growth rule
def test_growth_stops_at_a_tie_and_needs_min_gain() -> None:
    """An expansion is made only if it raises the tree's EWIF by more than `min_gain` x: a free
    lookup that is never right adds nothing on a flat curve (a tie: no growth). A chain of "l1"
    (alpha 0.5, c 0.1, lookups never right, flat costs; T(1) = 0.5 / 1.1 < T(2) = 0.75 / 1.2)
    raises the EWIF from 1 to 1.75 / 1.2: it is made under a `min_gain` just below that, and
    not just above."""
    flat = {n: STEP for n in range(1, 10)}
    useless = _policy(flat, prior_pld_alpha=0.0)
    assert useless.plan(_drafter(_world(offer={PLD: 1.0})), TreeEstimate(), [PLD]) is None
    ewif = 1.75 * STEP / (0.008 + STEP)
    for gain, grows in ((ewif - 1e-9, True), (ewif + 1e-9, False)):
        policy = _policy(flat, prior_alpha=0.5, prior_pld_alpha=0.0, max_k=2, min_gain=gain)
        choice = policy.plan(_drafter(_world()), TreeEstimate(), ["l1"])
        assert (choice is not None) == grows, gain
        if choice is not None:
            assert choice.k == 2 and choice.predicted_ewif == pytest.approx(ewif, rel=1e-12)


@pytest.mark.parametrize("max_tree_size", [2, 4])
def test_the_last_node_a_tree_has_room_for_is_drafted(max_tree_size: int) -> None:
    """A sure lookup offering 10 tokens fills the tree to the configured size exactly, however
    much room the drafter itself would give (64 nodes)."""
    policy = _policy(_linear(), prior_pld_alpha=1.0, max_tree_size=max_tree_size)
    drafter = _drafter(_world(offer={PLD: 1.0}), max_nodes=64)
    policy.grow(drafter, [PLD])
    assert drafter.size() == max_tree_size and set(drafter.draft[1:]) == {PLD}


def test_a_lookup_offering_a_single_token_is_drafted() -> None:
    policy = _policy(_linear(), prior_pld_alpha=1.0)
    world = World(lambda t: STEP, {PLD: 1.0}, {PLD: 0.0}, offer={PLD: 1.0}, offer_len=1)
    choice = policy.plan(_drafter(world), TreeEstimate(), [PLD])
    assert choice is not None and (choice.draft, choice.k) == (PLD, 1)


def test_a_lookup_expansion_pays_one_lookup_whatever_its_length() -> None:
    """A free draft proposes its whole chain in one lookup: a timed lookup (20 ms here, to make
    it visible) is charged once, not once per token, and k is the EWIF's best over the tokens
    offered, with no T(S, k) cap (which, charging c = 0.5 a token, would stop at k = 4)."""
    policy = _policy(_linear(), prior_pld_alpha=0.9)
    policy.observe_step([], 1, STEP, {PLD: (1, 0.020)})  # a free draft's first timing counts
    assert policy.draft_seconds(PLD) == 0.020
    choice = policy.plan(_drafter(_world(offer={PLD: 1.0})), TreeEstimate(), [PLD])
    assert choice is not None and choice.draft == PLD
    a, rest = policy.alpha[PLD].alpha, policy.estimate(Outcome(PLD, "next")).alpha

    def ewif(k: int) -> float:
        tokens = 1.0 + a * (1.0 + sum(rest**i for i in range(1, k)))
        return tree_ewif(tokens, 0.020, policy.verify_seconds(1 + k), STEP)

    best = max(range(1, 9), key=ewif)
    assert best == 8 and choice.k == best
    assert choice.predicted_ewif == pytest.approx(ewif(best), rel=1e-12)


def test_a_lookup_below_a_lookup_continues_its_chain() -> None:
    """Below a node lookup drafted, a lookup's first token continues lookup's chain: it is
    valued with its continuation rate (0.9 here), not with the estimate of a fresh lookup (0.1)."""
    policy = _policy(_linear(), ema_weight=1.0, window=10)
    outcomes = [(Outcome(PLD, "next"), i > 0) for i in range(10)]
    outcomes += [(Outcome(PLD), i == 0) for i in range(10)]
    policy.observe_step(outcomes, 1, STEP, {})
    assert (policy.estimate(Outcome(PLD, "next")).alpha, policy.alpha[PLD].alpha) == (0.9, 0.1)
    tree = TreeEstimate()
    tree.add(1, 0, 0.5, PLD)
    drafter = _drafter(_world(offer={PLD: 1.0}))
    drafter._add(0, PLD, 0)
    choice = policy.plan(drafter, tree, [PLD])
    assert choice is not None and choice.leaf == 1
    tokens = 1.5 + 0.5 * 0.9 * (1.0 + sum(0.9**i for i in range(1, choice.k)))
    want = tree_ewif(tokens, 0.0, policy.verify_seconds(2 + choice.k), STEP)
    assert choice.predicted_ewif == pytest.approx(want, rel=1e-12)


# ------------------------------------------------------------------ siblings
def _width_threshold(tokens: float, spent: float, verify: tuple[float, float], a_s: float) -> float:
    """The sibling confidence above which a sibling raises the tree's EWIF: it adds reach
    `confidence x a_s` and one verify row, from `verify[0]` to `verify[1]` seconds."""
    return tokens * ((spent + verify[1]) / (spent + verify[0]) - 1.0) / a_s


def _width(policy: RefinedDyTC, world: World, k: int) -> int:
    """`_width` of a chain of k "l1" tokens below the root, valued as `plan` values it."""
    tokens = 1.0 + 0.7 * (1.0 + sum(0.7**i for i in range(1, k)))
    spent = policy.draft_seconds("l1") * k
    ewif = tree_ewif(tokens, spent, policy.verify_seconds(1 + k), STEP)
    return policy._width(Expansion(0, "l1", k, 1, ewif), TreeEstimate(), _drafter(world))


def test_a_sibling_is_kept_exactly_when_it_raises_the_trees_ewif() -> None:
    """A chain of 2 "l1" tokens (alpha 0.7, 4 ms a call) below the root, 2 ms a verify row: the
    second child is kept above the confidence where its reach pays for its row, the third above
    its own threshold given the second (both by hand, `_width_threshold`)."""
    policy = _policy(_linear(), prior_alpha=0.7)
    tokens, spent = 1.0 + 0.7 + 0.49, 0.008
    second = _width_threshold(tokens, spent, (0.044, 0.046), 0.7)
    assert 0.1 < second < 0.2
    for s2, width in ((second * (1 - 1e-6), 1), (second * (1 + 1e-6), 2)):
        assert _width(policy, _world((s2, 0.0)), 2) == width, s2
    s2 = 0.5
    third = _width_threshold(tokens + 0.7 * s2, spent, (0.046, 0.048), 0.7)
    for s3, width in ((third * (1 - 1e-6), 2), (third * (1 + 1e-6), 3)):
        assert _width(policy, _world((s2, s3)), 2) == width, s3


def test_a_sibling_with_no_chance_is_not_kept_even_where_a_row_is_free() -> None:
    policy = _policy({n: STEP for n in range(1, 10)}, prior_alpha=0.7)
    assert _width(policy, _world((0.0, 0.0)), 1) == 1
    assert _width(policy, _world((0.01, 0.0)), 1) == 2


def test_siblings_need_min_gain_too() -> None:
    policy = _policy(_linear(), prior_alpha=0.7, min_gain=1.05)
    tokens, spent = 1.7, 0.004
    # kept iff (tokens + 0.7 s) / (spent + 0.044) > 1.05 tokens / (spent + 0.042)
    second = (1.05 * tokens * (spent + 0.044) / (spent + 0.042) - tokens) / 0.7
    for s2, width in ((second * (1 - 1e-6), 1), (second * (1 + 1e-6), 2)):
        assert _width(policy, _world((s2, 0.0)), 1) == width, s2


def test_siblings_fill_a_tree_only_up_to_its_size() -> None:
    """A tree of at most 4 nodes with a chain of 2 below the root has room for one sibling."""
    policy = _policy(_linear(), prior_alpha=0.7, max_tree_size=4)
    assert _width(policy, _world((0.9, 0.9)), 2) == 2
    full = _policy(_linear(), prior_alpha=0.7, max_tree_size=3)
    assert _width(full, _world((0.9, 0.9)), 2) == 1


def test_recycled_siblings_below_a_recycled_node_use_the_continuing_estimate() -> None:
    """Below a node recycled tokens drafted, their next token continues their own chain: its
    siblings are valued with their continuation rate (0.9 here), not ``recycle`` (0.1)."""
    policy = _policy(_linear(), prior_alpha=0.7, ema_weight=1.0, window=10)
    outcomes = [(Outcome(RECYCLE, "next"), i > 0) for i in range(10)]
    outcomes += [(Outcome(RECYCLE), i == 0) for i in range(10)]
    policy.observe_step(outcomes, 1, STEP, {})
    assert (policy.estimate(Outcome(RECYCLE, "next")).alpha, policy.alpha[RECYCLE].alpha) == (
        0.9,
        0.1,
    )
    tree = TreeEstimate()
    tree.add(1, 0, 0.5, RECYCLE)
    chain = 0.5 * 0.9  # reach of the leaf x the continuing estimate (a chain of one)
    second = _width_threshold(1.5 + chain, 0.0, (0.044, 0.046), 0.9) / 0.5  # reach 0.5
    for s2, width in ((second * (1 - 1e-6), 1), (second * (1 + 1e-6), 2)):
        drafter = _drafter(_world((s2, 0.0)))
        drafter._add(0, RECYCLE, 0)
        ewif = tree_ewif(1.5 + chain, 0.0, policy.verify_seconds(3), STEP)
        assert policy._width(Expansion(1, RECYCLE, 1, 1, ewif), tree, drafter) == width, s2


# ------------------------------------------------------------------ exploring stale sizes
def test_only_a_stale_size_is_explored_and_one_the_budget_pays_exactly_is() -> None:
    """A size measured in the last `explore_horizon` steps is predicted as measured however
    large the budget; a stale one is explored when its extra cost is at most the budget,
    equality included."""
    policy = _policy(_linear(), explore_horizon=4)
    exploration = policy.exploration
    assert exploration is not None
    policy.observe_step([], 5, 0.048, {})  # size 5 measured now
    exploration.budget = 1.0
    extra = policy.verify_cost.predict(5) - min(policy.verify_cost.seconds.values())
    assert (
        not policy.verify_cost.stale(5)
        and extra > 0
        and exploration.cost(policy.verify_cost, 5) == 0.0
    )
    for _ in range(4):
        policy.observe_step([], 1, STEP, {"l1": (1, 0.004)})
    assert policy.verify_cost.stale(5)
    exploration.budget = extra
    assert exploration.cost(policy.verify_cost, 5) == extra and policy.verify_seconds(5) == STEP
    exploration.budget = extra * (1 - 1e-9)
    assert exploration.cost(policy.verify_cost, 5) == 0.0 and policy.verify_seconds(
        5
    ) == pytest.approx(0.048)
