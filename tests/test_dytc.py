"""DyTC units: estimates, the cost curve, T(S,k), EWIF formulas, growth, width, the stop rule,
exploration, and the simulator across cost curves."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from dytc_simulator import (
    CURVES,
    SimDrafter,
    World,
    best_fixed,
    default_world,
    interpolated,
    run_dytc,
)

from casspec_ref.dytc import best_k, ewif_chain, geometric_tokens, t_score, tree_ewif
from casspec_ref.dytc_config import PLD, RECYCLE, DyTCConfig
from casspec_ref.dytc_estimates import AcceptanceEstimator, CostCurve, Outcome
from casspec_ref.dytc_refinements import (
    Exploration,
    OptimisticEstimator,
    RefinedCostCurve,
    RefinedDyTC,
    outcome,
    pooled,
    relax,
)
from casspec_ref.dytc_tree import TreeEstimate, expected_tree_tokens
from casspec_ref.schedules import max_cascade_depth

BEST = DyTCConfig()


def _outcome(draft: str, parent: str, match: int = 0, margin: float | None = None) -> Outcome:
    return outcome(BEST, draft, parent, match, margin)


def _exploration(policy: RefinedDyTC) -> Exploration:
    assert policy.exploration is not None
    return policy.exploration


def test_estimate_is_optimistic_in_warm_up_then_follows_observations() -> None:
    est = OptimisticEstimator(0.6, weight=0.3, window=5, warmup=3)
    assert est.alpha == pytest.approx((0.6 + 3) / 4)  # the 3 outcomes to come counted accepted
    est.observe(1.0)
    assert est.alpha == pytest.approx((0.6 + 3) / 4)  # that acceptance was already counted
    low = OptimisticEstimator(0.6, weight=0.3, window=5, warmup=3)
    low.observe(0.0)
    assert low.alpha == pytest.approx((0.6 + 2) / 4)  # a rejection costs 1 / (1 + warmup)
    # A long run of rejections keeps pushing the estimate down, strictly, past warm-up too.
    values = []
    for _ in range(10):
        low.observe(0.0)
        values.append(low.alpha)
    assert all(b < a for a, b in zip(values, values[1:], strict=False))
    assert values[-1] < 0.1


def test_estimate_warmup_then_windowed_ema_by_hand() -> None:
    est = OptimisticEstimator(0.5, weight=0.5, window=2, warmup=2)
    est.observe(1.0)
    assert est.alpha == pytest.approx((0.5 + 1.0 + 1.0) / 3)  # prior, outcome, one to come
    est.observe(1.0)
    assert est.alpha == pytest.approx((0.5 + 2.0) / 3)
    est.observe(0.0)  # first EMA step: window [1, 0], mean 0.5
    assert est.alpha == pytest.approx(0.5 * (2.5 / 3) + 0.5 * 0.5)
    est.observe(0.0)  # window [0, 0]
    assert est.alpha == pytest.approx(0.5 * (0.5 * (2.5 / 3) + 0.25))


def test_seed_article_rule_is_window_one() -> None:
    est = AcceptanceEstimator(0.7, weight=0.2, window=1, warmup=0)
    est.observe(0.0)
    assert est.alpha == pytest.approx(0.8 * 0.7)


def test_cost_curve_learns_a_non_monotone_table() -> None:
    curve = RefinedCostCurve(weight=0.5, table=True)
    for tokens, seconds in [(1, 0.040), (2, 0.064), (4, 0.058), (8, 0.057)]:
        curve.observe(tokens, seconds)
    assert curve.predict(2) == 0.064 and curve.predict(4) == 0.058
    assert curve.predict(3) == pytest.approx((0.064 + 0.058) / 2)  # interpolated
    assert curve.predict(6) == pytest.approx(0.0575)
    assert curve.predict(16) == pytest.approx(0.057)  # beyond: a falling slope is clamped flat
    curve.observe(2, 0.040)  # EMA with weight 0.5
    assert curve.predict(2) == pytest.approx(0.052)
    rising = RefinedCostCurve(table=True)
    rising.observe(1, 0.04)
    rising.observe(2, 0.05)
    assert rising.predict(5) == pytest.approx(0.08)  # extrapolated with the last slope
    with pytest.raises(ValueError, match="finite"):
        curve.observe(1, float("nan"))
    with pytest.raises(ValueError, match="at least one observation"):
        CostCurve().predict(1)


def test_cost_curve_staleness() -> None:
    curve = RefinedCostCurve(horizon=3)
    curve.observe(4, 0.1)
    assert not curve.stale(4) and curve.stale(2)
    for _ in range(3):
        curve.tick()
    assert curve.stale(4)


def test_t_score_hand_computed() -> None:
    # a = 0.5, k = 2: 0.5 + 0.25 drafted, then 0.25 * 0.4 from PLD; cost 0.25 * 2 + 0.05.
    assert t_score(0.5, 2, 0.25, 0.4, 0.05) == pytest.approx(0.85 / 0.55)
    # a = 1: k tokens surely, then a_PLD.
    assert t_score(1.0, 3, 0.5, 0.2, 0.1) == pytest.approx(3.2 / 1.6)
    # a = 0: nothing.
    assert t_score(0.0, 4, 0.5, 0.9, 0.1) == 0.0
    with pytest.raises(ValueError, match="k=0"):
        t_score(0.5, 0, 0.1, 0.1, 0.1)


@pytest.mark.parametrize(("alpha", "k", "c"), [(0.3, 1, 0.1), (0.7, 4, 0.2), (0.9, 8, 0.05)])
def test_ewif_chain_closed_form_and_tree_form(alpha: float, k: int, c: float) -> None:
    closed = (1 - alpha ** (k + 1)) / ((1 - alpha) * (c * k + 1))
    assert ewif_chain(alpha, k, c) == pytest.approx(closed)
    parents = [-1, *range(k)]  # a chain: node i's parent is i - 1
    tokens = expected_tree_tokens(parents, [1.0] + [alpha] * k)
    assert tree_ewif(tokens, c * k, 1.0, 1.0) == pytest.approx(closed)


def _simulate_tree(parents: list[int], accept: list[float], steps: int, seed: int) -> np.ndarray:
    """Tokens committed per step when at most one child of each accepted node is accepted."""
    rng = np.random.default_rng(seed)
    children: dict[int, list[int]] = {}
    for i in range(1, len(parents)):
        children.setdefault(parents[i], []).append(i)
    out = np.empty(steps)
    for s in range(steps):
        node, tokens = 0, 1  # the bonus token is always committed
        while children.get(node):
            kids = children[node]
            probs = [accept[i] for i in kids]
            u = rng.random()
            cumulative, chosen = 0.0, None
            for kid, prob in zip(kids, probs, strict=True):
                cumulative += prob
                if u < cumulative:
                    chosen = kid
                    break
            if chosen is None:
                break
            node, tokens = chosen, tokens + 1
        out[s] = tokens
    return out


@pytest.mark.parametrize(
    ("parents", "accept"),
    [
        ([-1, 0, 1, 2, 3], [1.0, 0.8, 0.7, 0.6, 0.5]),  # a chain with decaying acceptance
        ([-1, 0, 0, 1, 1, 2, 3], [1.0, 0.6, 0.3, 0.5, 0.4, 0.9, 0.7]),  # a branching tree
    ],
)
def test_tree_tokens_match_monte_carlo(parents: list[int], accept: list[float]) -> None:
    """i.i.d. acceptance simulated 20000 times; tolerance 5 standard errors.

    False-failure rate: about 6e-7 per case (two-sided normal tail at 5 sigma); the seed is fixed,
    so the outcome is reproducible.
    """
    draws = _simulate_tree(parents, accept, 20000, seed=1234)
    expected = expected_tree_tokens(parents, accept)
    stderr = draws.std(ddof=1) / math.sqrt(draws.size)
    assert abs(draws.mean() - expected) < 5 * stderr


def test_expected_tree_tokens_rejects_bad_parents() -> None:
    with pytest.raises(ValueError, match="parents must precede"):
        expected_tree_tokens([-1, 2, 0], [1.0, 0.5, 0.5])
    with pytest.raises(ValueError, match="differ in length"):
        expected_tree_tokens([-1, 0], [1.0])


def test_cascade_depth_rules() -> None:
    on = DyTCConfig(cascade_depth_rule=True, long_context_drop=True)
    assert max_cascade_depth(30, 10, n_levels=3, config=on) == 1  # log2(2.5) -> 1
    assert max_cascade_depth(48, 10, n_levels=3, config=on) == 2
    assert max_cascade_depth(200, 10, n_levels=3, config=on) == 3
    assert max_cascade_depth(200, 600, n_levels=3, config=on) == 2
    assert max_cascade_depth(30, 600, n_levels=3, config=on) == 0
    assert max_cascade_depth(30, 600, n_levels=3, config=DyTCConfig()) == 3


@pytest.mark.parametrize("name", ["", PLD, RECYCLE])
def test_a_draft_name_that_would_clash_with_a_free_drafts_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match=r"^draft name .* is invalid: "):
        RefinedDyTC(["ok", name])


def test_free_drafts_start_at_their_priors_and_model_drafts_optimistic() -> None:
    """A free draft's estimates (pooled, continuing, per match) start at its prior and follow
    the EMA from the first outcome; a model draft's (pooled, per margin bin) start optimistic."""
    cfg = DyTCConfig(prior_pld_alpha=0.4, prior_recycle_alpha=0.2, prior_alpha=0.5, warmup=10)
    policy = RefinedDyTC(["l1"], cfg)
    free = [Outcome(PLD), Outcome(PLD, "next"), Outcome(PLD, "match", 1), Outcome(PLD, "match", 3)]
    free += [Outcome(RECYCLE), Outcome(RECYCLE, "next")]
    for key in free:
        want = 0.4 if key.draft == PLD else 0.2
        estimate = policy.estimate(key)
        assert estimate.alpha == want and estimate.warmup == 0, key
        assert not isinstance(estimate, OptimisticEstimator), key
    for key in (Outcome("l1"), Outcome("l1", "margin", 0), Outcome("l1", "margin", 4)):
        estimate = policy.estimate(key)
        assert estimate.alpha == (0.5 + 10) / 11 and estimate.warmup == 10, key
    policy.observe_step([(Outcome(RECYCLE), False)], 1, 0.04, {})
    assert policy.alpha[RECYCLE].alpha == pytest.approx(0.7 * 0.2)  # the EMA at once


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="ema_weight"):
        DyTCConfig(ema_weight=0.0)
    with pytest.raises(ValueError, match="max_tree_size"):
        DyTCConfig(max_tree_size=0)


def _timed_policy(draft_seconds: float, alpha: float, **config: float) -> RefinedDyTC:
    """A policy that has timed the target (40 ms + 2 ms per extra token) and draft "l1"."""
    policy = RefinedDyTC(["l1"], DyTCConfig(prior_alpha=alpha, warmup=0, **config))  # type: ignore[arg-type]
    for _ in range(2):  # the first timing of a model draft is discarded (one-time setup)
        policy.observe_step([], 1, 0.040, {"l1": (1, draft_seconds), PLD: (1, 1e-5)})
    for size in (2, 4, 8, 16, 32):
        policy.observe_step([], size, 0.040 + 0.002 * (size - 1), {})
    return policy


def _drafter(world: World) -> SimDrafter:
    return SimDrafter(world, random.Random(0), 32, 16)


def test_first_draft_timing_is_discarded() -> None:
    policy = RefinedDyTC(["l1"])
    policy.observe_step([], 1, 0.03, {"l1": (1, 5.0)})  # e.g. an int8 weight copy made on first use
    assert len(policy.draft_cost["l1"]) == 0 and policy.untimed(["l1", PLD]) == ["l1"]
    policy.observe_step([], 1, 0.03, {"l1": (1, 0.006)})
    assert policy.cost("l1") == pytest.approx(0.2, rel=1e-3)


def test_one_early_rejection_does_not_switch_a_costly_draft_off() -> None:
    # A draft at half a plain step's cost pays on this curve only above an estimate of ~0.55
    # (on the project's CPU the int8 draft needs ~0.8).
    # Its two timing probes gave one rejection: a plain mean with the prior 0.6 says 0.53,
    # and DyTC would never draft it again; the warm-up estimate still counts the 18 outcomes
    # to come as accepted, so the draft is used and its own outcomes decide.
    policy = RefinedDyTC(["l1"])
    for accepted in (True, False):
        policy.observe_step([(Outcome("l1"), accepted)], 2, 0.042, {"l1": (1, 0.020)})
    for size in (1, 2, 4, 8, 16):
        policy.observe_step([], size, 0.040 + 0.002 * (size - 1), {})
    assert policy.alpha["l1"].alpha == pytest.approx((0.6 + 1 + 18) / 21)
    drafter = _drafter(World(CURVES["linear"], {"l1": 0.93}, {"l1": 0.020}))
    policy.grow(drafter, ["l1"])
    assert drafter.size() > 2 and set(drafter.draft[1:]) == {"l1"}


def test_best_k_with_and_without_the_verify_cost() -> None:
    # Without verify cost, T(S,k) favours k = 1 (the paper's formula); a measured cost curve
    # that is flat after k = 1 makes longer drafts pay.
    assert best_k(0.8, 0.1, 0.0, 0.01, [0.0] * 6) == 1
    assert best_k(0.8, 0.05, 0.0, 0.01, [1.0] * 6) > 2
    with pytest.raises(ValueError, match="at least one"):
        best_k(0.8, 0.1, 0.0, 0.01, [])


def test_policy_falls_back_before_any_timing() -> None:
    policy = RefinedDyTC(["l1"])
    drafter = _drafter(default_world(CURVES["linear"]))
    assert policy.grow(drafter, ["l1", PLD]) == {0: 1.0} and drafter.size() == 1


def test_policy_drafts_with_a_cheap_good_draft_and_stops_with_a_bad_one() -> None:
    world = World(CURVES["linear"], {"l1": 0.9}, {"l1": 0.003})
    good = _timed_policy(draft_seconds=0.003, alpha=0.9, siblings=1)
    drafter = _drafter(world)
    estimates = good.grow(drafter, ["l1"])
    assert drafter.size() >= 4 and set(drafter.draft[1:]) == {"l1"}
    assert all(estimates[n] < estimates[drafter.parent[n]] for n in range(1, drafter.size()))
    bad = _timed_policy(draft_seconds=0.040, alpha=0.3)
    drafter = _drafter(world)
    assert bad.grow(drafter, ["l1"]) == {0: 1.0} and drafter.size() == 1


def test_policy_prefers_the_near_free_prompt_lookup() -> None:
    policy = _timed_policy(draft_seconds=0.020, alpha=0.6)
    world = World(CURVES["linear"], {"l1": 0.6, PLD: 0.5}, {"l1": 0.02, PLD: 1e-5}, offer={PLD: 1})
    drafter = _drafter(world)
    choice = policy.plan(drafter, TreeEstimate(), ["l1", PLD])
    assert choice is not None and choice.draft == PLD


def test_a_lookups_first_token_is_learned_by_its_match_length() -> None:
    """The outcome keys, by hand; a lookup's outcome after a 1-token match teaches that bin's
    estimate and the pooled ``pld`` (both then count as tested, neither relaxes), nothing else."""
    assert _outcome(PLD, "l1", 2) == Outcome(PLD, "match", 2) and _outcome(
        PLD, "root", 7
    ) == Outcome(PLD, "match", 3)
    assert _outcome(PLD, "root") == Outcome(PLD) and _outcome(PLD, PLD, 2) == Outcome(PLD, "next")
    assert _outcome("l1", "root", 2) == Outcome("l1")
    assert _outcome(RECYCLE, "l1", 1) == Outcome(RECYCLE)
    policy = RefinedDyTC(["l1"], DyTCConfig(warmup=0, ema_weight=1.0, window=4))
    policy.observe_step([(Outcome(PLD, "match", 1), False)] * 4, 1, 0.04, {})
    counts = {key: e.count for key, e in policy.estimates().items() if e.count}
    assert counts == {Outcome(PLD, "match", 1): 4, Outcome(PLD): 4}
    assert policy.estimate(Outcome(PLD, "match", 1)).alpha == policy.alpha[PLD].alpha == 0.0
    policy.observe_step([(Outcome(PLD, "match", 3), True)], 1, 0.04, {})
    assert (
        policy.estimate(Outcome(PLD, "match", 3)).alpha == 1.0 and policy.alpha[PLD].alpha == 0.25
    )
    assert policy.estimate(Outcome(PLD, "match", 1)).alpha == 0.0 + 0.02 * (
        0.5 - 0.0
    )  # untested: relaxed


class _Matched(SimDrafter):
    """A `SimDrafter` whose lookups below the root report a given match length (below other
    nodes, none: DyTC must ask about the leaf it extends)."""

    def __init__(self, world: World, length: int) -> None:
        super().__init__(world, random.Random(0), 32, 16)
        self.length = length

    def match(self, node: int) -> int:
        return self.length if node == 0 else 0


def test_the_match_length_decides_whether_a_lookup_pays() -> None:
    """Lookups after 1-token matches have been wrong, after 3-token matches right: DyTC drafts
    a lookup where the match is 3 tokens long and not where it is 1, on the same tree."""
    policy = _timed_policy(draft_seconds=0.040, alpha=0.1)  # the model draft is not worth it
    policy.observe_step(
        [(Outcome(PLD, "match", 3), True)] * 50 + [(Outcome(PLD, "match", 1), False)] * 50,
        1,
        0.04,
        {},
    )
    assert (
        policy.alpha[PLD].alpha < 0.1 < 0.9 < policy.estimate(Outcome(PLD, "match", 3)).alpha
    )  # pooled: recent
    world = World(CURVES["linear"], {"l1": 0.1, PLD: 0.5}, {"l1": 0.04, PLD: 1e-5}, offer={PLD: 1})
    short, long = _Matched(world, 1), _Matched(world, 3)
    assert policy.plan(short, TreeEstimate(), ["l1", PLD]) is None
    choice = policy.plan(long, TreeEstimate(), ["l1", PLD])
    assert choice is not None and choice.draft == PLD and choice.k > 1
    reach = policy.grow(long, ["l1", PLD])  # the grown tree values its first node the same way
    assert long.draft[1] == PLD and reach[1] == policy.estimate(Outcome(PLD, "match", 3)).alpha


def test_a_model_drafts_token_is_learned_by_its_margin() -> None:
    """Margins fall in bins at 0.02, 0.05, 0.1 and 0.2 (an edge opens the bin above); a free
    draft has no margin bin; an outcome in bin 3 teaches that bin's estimate and the pooled one."""
    names = [_outcome("l1", "root", 0, m) for m in (-0.3, 0.0, 0.02, 0.07, 0.1, 0.5, 1.0)]
    assert names == [
        Outcome("l1", "margin", 0),
        Outcome("l1", "margin", 0),
        Outcome("l1", "margin", 1),
        Outcome("l1", "margin", 2),
        Outcome("l1", "margin", 3),
        Outcome("l1", "margin", 4),
        Outcome("l1", "margin", 4),
    ]
    assert _outcome(PLD, "root", 2, 0.5) == Outcome(PLD, "match", 2) and _outcome(
        "l1", "l1"
    ) == Outcome("l1")
    assert pooled(Outcome("l1", "margin", 3)) == Outcome("l1")
    assert pooled(Outcome(PLD, "match", 1)) == Outcome(PLD)
    assert pooled(Outcome(PLD, "next")) == Outcome(PLD, "next")
    policy = RefinedDyTC(["l1"], DyTCConfig(warmup=0, ema_weight=1.0, window=4))
    policy.observe_step([(Outcome("l1", "margin", 3), False)] * 4, 1, 0.04, {})
    assert {k: e.count for k, e in policy.estimates().items() if e.count} == {
        Outcome("l1", "margin", 3): 4,
        Outcome("l1"): 4,
    }
    assert policy.estimate(Outcome("l1", "margin", 3)).alpha == policy.alpha["l1"].alpha == 0.0


class _Margined(SimDrafter):
    """A `SimDrafter` whose model-drafted chain nodes all report one margin."""

    def __init__(self, world: World, margin: float) -> None:
        super().__init__(world, random.Random(0), 32, 16)
        self.value = margin

    def margin(self, node: int) -> float | None:
        return self.value if self.draft[node] not in (PLD, RECYCLE, "root") else None


def test_a_model_chain_is_drafted_a_token_at_a_time_and_stops_at_an_unsure_token() -> None:
    """Tokens of margin < 0.02 have been wrong, of margin >= 0.2 right: below a drafted token
    the draft is unsure of, nothing more is drafted (one forward, not the k planned); below
    sure ones the chain goes on, each node valued by its margin's estimate."""
    policy = _timed_policy(draft_seconds=0.004, alpha=0.9, siblings=1)
    policy.observe_step(
        [(Outcome("l1", "margin", 0), False)] * 30 + [(Outcome("l1", "margin", 4), True)] * 30,
        1,
        0.04,
        {},
    )
    assert (
        policy.estimate(Outcome("l1", "margin", 0)).alpha < 0.05
        and policy.estimate(Outcome("l1", "margin", 4)).alpha > 0.95
    )
    world = World(CURVES["linear"], {"l1": 0.9}, {"l1": 0.004})
    assert policy.plan(_drafter(world), TreeEstimate(), ["l1"]).k > 1  # type: ignore[union-attr]
    unsure, sure = _Margined(world, 0.01), _Margined(world, 0.5)
    reach = policy.grow(unsure, ["l1"])
    assert unsure.size() == 2 and unsure.calls == {"l1": 1}
    assert reach[1] == policy.estimate(Outcome("l1", "margin", 0)).alpha
    reach = policy.grow(sure, ["l1"])
    assert sure.size() > 4 and reach[1] == policy.estimate(Outcome("l1", "margin", 4)).alpha


def test_predicted_ewif_is_the_tree_formula_on_the_grown_tree() -> None:
    """The score of an expansion is `tree_ewif` of `expected_tree_tokens` of the tree it would
    grow: the policy's chain increment is that formula, not a copy that could drift from it."""
    policy = _timed_policy(draft_seconds=0.004, alpha=0.7, siblings=1)
    world = World(CURVES["linear"], {"l1": 0.7}, {"l1": 0.004})
    drafter = _drafter(world)
    tree = TreeEstimate()
    tree.add(1, 0, 0.8)
    tree.add(2, 0, 0.1)
    drafter._add(0, "l1", 0)
    drafter._add(0, "l1", 1)
    choice = policy.plan(drafter, tree, ["l1"])
    assert choice is not None and choice.k >= 2 and choice.width == 1
    a = policy.alpha["l1"].alpha
    parents = [*tree.parents, choice.leaf, *range(3, 3 + choice.k - 1)]
    accept = [*tree.accept, *([a] * choice.k)]
    want = tree_ewif(
        expected_tree_tokens(parents, accept),
        drafter.seconds() + policy.draft_seconds("l1") * choice.k,
        policy.verify_seconds(3 + choice.k),
        policy.step_seconds(),
    )
    assert choice.predicted_ewif == pytest.approx(want, rel=1e-12)
    assert choice.leaf == 1  # the likelier leaf: it carries 8x the reach of its sibling


def test_stop_rule_considers_every_leaf() -> None:
    """A free prompt-lookup continuation below a less promising leaf is still taken."""
    policy = _timed_policy(draft_seconds=0.040, alpha=0.5)
    world = World(CURVES["flat (GPU-like)"], {"l1": 0.5, PLD: 0.9}, {"l1": 0.04, PLD: 1e-5})
    drafter = _drafter(world)
    a = drafter._add(0, "l1", 0)
    b = drafter._add(0, "l1", 1)
    drafter._offers[(a, PLD)] = 0  # the most promising leaf offers nothing free
    drafter._offers[(b, PLD)] = 5
    tree = TreeEstimate()
    tree.add(a, 0, 0.6)
    tree.add(b, 0, 0.2)
    choice = policy.plan(drafter, tree, ["l1", PLD])
    assert choice is not None and (choice.leaf, choice.draft) == (b, PLD)


def test_size_budget() -> None:
    policy = _timed_policy(draft_seconds=0.001, alpha=0.95)
    drafter = SimDrafter(
        World(CURVES["linear"], {"l1": 0.95}, {"l1": 0.001}), random.Random(0), 6, 16
    )
    policy.grow(drafter, ["l1"])
    assert 1 < drafter.size() <= 6


def test_width_is_a_decision_flat_verify_cost_branches_steep_does_not() -> None:
    """With verification nearly free, DyTC keeps the draft's alternatives as siblings and mixes
    draft levels in one tree; when every node costs a full step, it builds chains (or nothing).
    Three policies trained on the flat curve: one can end where a chain of recycled tokens is
    its best tree (its estimates decide), so the count is over all three."""
    flat, steep = CURVES["flat (GPU-like)"], CURVES["steep"]
    branching = mixed = 0
    for train_seed in (3, 4, 5):
        _, policy, _ = run_dytc(default_world(flat), 300, seed=train_seed)
        for seed in range(20):
            drafter = SimDrafter(default_world(flat), random.Random(seed), 32, 16)
            policy.grow(drafter, ["cheap", "good", PLD, RECYCLE])
            branching += any(len(c) > 1 for c in drafter.children)
            mixed += len(set(drafter.draft[1:])) > 1
    assert branching >= 30 and mixed >= 15, (branching, mixed)
    _, policy, sizes = run_dytc(default_world(steep), 300, seed=3)
    for seed in range(20):
        drafter = SimDrafter(default_world(steep), random.Random(seed), 32, 16)
        policy.grow(drafter, ["cheap", "good", PLD, RECYCLE])
        assert not any(len(c) > 1 for c in drafter.children)


def test_untested_drafts_relax_up_towards_their_prior_so_they_can_recover() -> None:
    """A draft whose estimate fell is not proposed, so it gets no observations: each step moves
    it back up towards its prior by `reexplore`; tested drafts, and an untested draft estimated
    above its prior (a good draft a step did not need), are left alone."""
    policy = RefinedDyTC(["model"], DyTCConfig(warmup=0, reexplore=0.1, prior_pld_alpha=0.5))
    policy.observe_step([(Outcome(PLD), False)] * 30 + [(Outcome("model"), True)] * 30, 1, 0.04, {})
    low, high = policy.alpha[PLD].alpha, policy.alpha["model"].alpha
    assert low < 0.05 and high > 0.9
    policy.observe_step([(Outcome("model"), True)], 1, 0.04, {})
    assert policy.alpha[PLD].alpha == pytest.approx(low + 0.1 * (0.5 - low))
    high = policy.alpha["model"].alpha
    for _ in range(50):
        policy.observe_step([], 1, 0.04, {})
    assert policy.alpha[PLD].alpha == pytest.approx(0.5, abs=0.01)
    assert policy.alpha["model"].alpha == high  # above its prior 0.6: not pulled down
    with pytest.raises(ValueError, match="reexplore"):
        DyTCConfig(reexplore=1.0)


def test_an_estimate_stuck_below_its_long_run_mean_relaxes_up_to_it() -> None:
    """After warm-up, an untested estimate between the prior and the draft's long-run mean
    (prior as one pseudo-outcome) moves `reexplore` of the way up to that mean per step; one
    above both stays. Worked by hand: 10 accepted then 10 rejected, window 10, no EMA memory."""
    est = AcceptanceEstimator(0.6, weight=1.0, window=10, warmup=0)
    for accepted in [1.0] * 10 + [0.0] * 4:
        est.observe(accepted)
    assert est.alpha == pytest.approx(0.6)  # the window: 6 accepted of 10
    mean = (0.6 + 10) / 15
    relax(est, 0.25)
    assert est.alpha == pytest.approx(0.6 + 0.25 * (mean - 0.6))
    high = AcceptanceEstimator(0.6, weight=1.0, window=2, warmup=0)
    for accepted in (0.0, 0.0, 1.0, 1.0):
        high.observe(accepted)
    relax(high, 0.25)
    assert high.alpha == 1.0  # above its long-run mean (0.65) and its prior: left alone


def test_a_costly_good_draft_returns_after_a_bad_stretch() -> None:
    """A lock-out: a draft that pays only above an estimate of ~0.8 (c = 0.7) had a bad stretch
    that left its estimate above the prior (0.6) but below where it pays. Relaxed only up to its
    prior, it would stay there (only a timing re-probe every `explore_horizon` steps gives it
    one outcome: it drafts in 6 of these 600 steps); relaxing toward its long-run mean brings it
    back. How soon varies with the path (the short chains drafted here flush the outcome window
    slowly): in 67-161 of each seed's last 200 steps (seeds 7-12)."""
    drafting = 0
    for seed in (7, 8, 9):
        world = World(CURVES["linear"], {"good": 0.93}, {"good": 0.7 * 0.040}, noise=0.0)
        policy = RefinedDyTC(["good"])
        for size in (1, 2, 4, 8, 16):
            policy.observe_step([], size, world.verify(size), {})
        for _ in range(2):  # timed (the first timing is discarded)
            policy.observe_step([], 1, world.verify(1), {"good": (1, 0.7 * 0.040)})
        outcomes = [True] * 200 + [True, True, False] * 14  # the last 42 (a window): 28 accepted
        policy.observe_step([(Outcome("good"), ok) for ok in outcomes], 1, world.verify(1), {})
        stuck = policy.alpha["good"].alpha
        assert 0.6 < stuck < 0.75
        _, policy, sizes = run_dytc(world, 300, seed=seed, drafts=("good",), policy=policy)
        drafting += sum(size > 1 for size in sizes[100:])
    assert drafting > 200  # of 600


def test_exploration_recovers_from_a_load_spike() -> None:
    """Sizes measured during a load spike look too expensive to use; the exploration budget
    tries them again, learns the real cost, and DyTC drafts again (no lock-out)."""
    world = default_world(CURVES["linear"])
    policy = RefinedDyTC(["cheap", "good"], DyTCConfig(explore_horizon=16))
    for size in range(1, 33):
        policy.observe_step([], size, 10 * world.verify(size) if size > 1 else world.verify(1), {})
    rate, policy, sizes = run_dytc(world, 1500, seed=2, policy=policy)
    assert max(sizes[-500:]) > 1 and sum(sizes[-500:]) / 500 > 2


def test_a_draft_timed_during_a_stall_is_timed_again() -> None:
    """A model draft whose one kept timing came from a stall (10 plain steps; e.g. a one-time
    setup the first, discarded, timing did not absorb) looks useless and is not drafted; once
    that timing is `explore_horizon` steps old it is stale, the draft is probed again, the new
    timing replaces the stale one, and DyTC drafts with it (no lock-out by one bad timing)."""
    world = World(CURVES["flat (GPU-like)"], {"good": 0.85}, {"good": 0.004})
    policy = RefinedDyTC(["good"], DyTCConfig(explore_horizon=32))
    policy.observe_step([], 1, world.verify(1), {})
    for seconds in (1.0, 10 * world.verify(1)):  # the first is discarded, the second kept
        policy.observe_step([], 1, world.verify(1), {"good": (1, seconds)})
    assert policy.cost("good") > 5
    _, policy, sizes = run_dytc(world, 400, seed=3, drafts=("good",), policy=policy)
    assert policy.cost("good") < 0.5
    assert sum(size > 1 for size in sizes[-200:]) > 150


def test_exploring_a_stale_size_is_paid_by_the_budget() -> None:
    """A stale size whose extra cost the budget can pay is predicted at the floor; when a tree
    of that size is verified, the budget pays exactly that predicted extra cost, and a size
    measured recently is predicted as measured and costs the budget nothing."""
    policy = _timed_policy(draft_seconds=0.004, alpha=0.9, siblings=1, explore_horizon=4)
    for _ in range(4):  # sizes 2..32 go stale (the draft's timing is kept fresh); the budget
        policy.observe_step([], 1, 0.040, {"l1": (1, 0.004)})  # earns explore_fraction of each
    extra = policy.verify_cost.predict(5) - min(policy.verify_cost.seconds.values())
    assert 0 < extra <= _exploration(policy).budget and policy.verify_cost.stale(5)
    assert policy.verify_seconds(5) == min(policy.verify_cost.seconds.values())
    assert (
        _exploration(policy).cost(policy.verify_cost, 5) == extra
        and _exploration(policy).cost(policy.verify_cost, 1) == 0.0
    )
    world = World(CURVES["linear"], {"l1": 0.9}, {"l1": 0.004})
    drafter = _drafter(world)
    policy.grow(drafter, ["l1"])
    size = drafter.size()
    assert size > 1 and policy.verify_cost.stale(size)
    owed = _exploration(policy).cost(policy.verify_cost, size)
    assert owed > 0
    budget = _exploration(policy).budget
    policy.observe_step([], size, 0.050, {"l1": (size - 1, 0.004 * (size - 1))})
    earned = policy.config.explore_fraction * (0.050 + 0.004 * (size - 1))
    assert _exploration(policy).budget == pytest.approx(budget + earned - owed, rel=1e-12)
    # Measured now: predicted as measured, nothing owed.
    assert (
        not policy.verify_cost.stale(size)
        and _exploration(policy).cost(policy.verify_cost, size) == 0.0
    )
    assert policy.verify_seconds(size) == policy.verify_cost.predict(size)


def test_a_free_draft_chain_is_estimated_with_its_continuing_alpha() -> None:
    policy = RefinedDyTC(["l1"], DyTCConfig(warmup=0))
    for accepted in (0.0, 0.0, 1.0, 0.0):
        policy.alpha[PLD].observe(accepted)
    for accepted in (1.0, 1.0, 1.0, 0.0):
        policy.estimate(Outcome(PLD, "next")).observe(accepted)
    a, a_next = policy.alpha[PLD].alpha, policy.estimate(Outcome(PLD, "next")).alpha
    assert a < 0.5 < a_next
    assert policy.chain_tokens(PLD, 3) == pytest.approx(a + a * a_next + a * a_next**2)
    assert policy.chain_tokens(PLD, 1) == pytest.approx(a)
    model = policy.alpha["l1"].alpha  # a model draft: i.i.d., one estimate
    assert policy.chain_tokens("l1", 3) == pytest.approx(geometric_tokens(model, 3))


def test_a_grown_lookup_chain_carries_both_rates() -> None:
    """The tree DyTC grows from a lookup: its first node at `pld`, the nodes below at the
    lookup's continuation rate."""
    policy = _timed_policy(draft_seconds=0.020, alpha=0.6)
    policy.alpha[PLD].alpha, policy.estimate(Outcome(PLD, "next")).alpha = 0.3, 0.8
    world = World(
        CURVES["flat (GPU-like)"],
        {"l1": 0.6, PLD: 0.3},
        {"l1": 0.02, PLD: 1e-5},
        offer={PLD: 1},
        offer_len=3,
    )
    drafter = _drafter(world)
    reach = policy.grow(drafter, [PLD])
    assert drafter.size() > 4  # a second lookup below the first chain continues it too
    assert [reach[n] / reach[drafter.parent[n]] for n in range(1, drafter.size())] == pytest.approx(
        [0.3] + [0.8] * (drafter.size() - 2)
    )


def test_simulator_dytc_matches_prompt_lookup_in_the_measured_cpu_world() -> None:
    """A world measured on a 2-core EPYC with the split kernel: a verify forward over up to 4
    tokens costs ~1.15x one token's, over 6 nearly 2x; lookup's first token is accepted 0.35 of
    the time and a continuation 0.72; the self-drafts cost c 0.5-0.6. DyTC must come within 3%
    of the best fixed schedule (lookup, k = 3). Seeds 1 and 2 reach 1.032 and 1.028 of it; with
    one estimate for both lookup rates (`continuation_rate` off) 0.997 and 0.966, and with the
    paper's policy alone (`DyTCConfig.paper()`) 0.936 and 0.932."""
    curve = {
        1: 0.020,
        2: 0.0206,
        3: 0.0225,
        4: 0.023,
        6: 0.038,
        8: 0.040,
        12: 0.058,
        16: 0.057,
        32: 0.10,
    }
    alpha = {"good": 0.76, "cheap": 0.56, PLD: 0.35, RECYCLE: 0.26}
    _assert_dytc_within_3_percent(curve, alpha, 0.72, {"good": 0.0124, "cheap": 0.010})


def _assert_dytc_within_3_percent(
    curve: dict[int, float], alpha: dict[str, float], lookup_next: float, seconds: dict[str, float]
) -> None:
    """In a world measured on the project's CPU (verify curve, first-token alphas, lookup's
    continuing alpha, the model drafts' seconds per call), DyTC's tokens per second over 3000
    steps are at least 0.97 of the best fixed schedule in hindsight, for two seeds."""
    world = World(
        verify=interpolated(curve),
        alpha=alpha,
        alpha_next={PLD: lookup_next},
        draft_seconds={**seconds, PLD: 1e-5, RECYCLE: 1e-5},
        siblings={"good": (0.3, 0.1), "cheap": (0.25, 0.1), RECYCLE: (0.2, 0.1)},
        offer={PLD: 0.6, RECYCLE: 0.9},
    )
    for seed in (1, 2):
        dytc, _, _ = run_dytc(world, 3000, seed)
        fixed = best_fixed(world, 3000, seed, ["cheap", "good", PLD, RECYCLE])
        best = max(fixed, key=fixed.get)
        assert dytc >= 0.97 * fixed[best], (seed, dytc, best, fixed[best])


@pytest.mark.parametrize("curve", list(CURVES))
def test_simulator_dytc_near_the_best_fixed_schedule_in_hindsight(curve: str) -> None:
    """Over 3000 simulated steps, DyTC's realised tokens per second are within MARGIN of the
    best fixed schedule in hindsight (plain, prompt lookup, recycled tokens or a chain of one
    model draft, each at its best fixed k), on every cost curve, for two seeds."""
    margin = 0.10
    world = default_world(CURVES[curve])
    for seed in (1, 2):
        dytc, _, _ = run_dytc(world, 3000, seed)
        fixed = best_fixed(world, 3000, seed, ["cheap", "good", PLD, RECYCLE])
        best = max(fixed.values())
        assert dytc >= (1 - margin) * best, (curve, seed, dytc, max(fixed, key=fixed.get), best)
        assert dytc >= (1 - margin) * fixed["plain"]


@pytest.mark.parametrize(
    ("good", "lookup"),
    [(0.94, 0.26), (0.83, 0.28)],
    ids=["bundled prompts", "held-out prompts"],
)
def test_simulator_dytc_keeps_up_on_the_packed_kernel_curve(good: float, lookup: float) -> None:
    """A world measured on a 2-core EPYC with the packed products: a verify forward over 8
    tokens costs ~1.3x one token's, over 16 ~1.5x, past 16 (no table entry) over 3x; the int8
    draft costs c ~0.55 and is accepted 0.94 (bundled) or 0.83 (held-out) of the time, lookup's
    first token 0.26-0.28 and a continuation 0.66. Here a chain of the int8 draft (bundled) or
    lookup at k = 5 (held-out) is the best fixed schedule; DyTC reached 0.995-1.069 of it over
    two seeds, and must stay within 3%."""
    curve = {
        1: 0.0201,
        2: 0.0208,
        3: 0.0235,
        4: 0.0217,
        6: 0.0236,
        8: 0.0259,
        12: 0.0277,
        16: 0.0298,
        17: 0.068,
        32: 0.10,
    }
    alpha = {"good": good, "cheap": 0.59, PLD: lookup, RECYCLE: 0.30}
    _assert_dytc_within_3_percent(curve, alpha, 0.66, {"good": 0.011, "cheap": 0.0085})
