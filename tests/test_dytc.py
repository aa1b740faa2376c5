"""DyTC units: estimates, latency model, T(S,k), EWIF formulas, growth and stop rule."""

from __future__ import annotations

import math

import numpy as np
import pytest

from casspec_ref.dytc import (
    PLD,
    AcceptanceEstimator,
    DyTCConfig,
    DyTCPolicy,
    LatencyModel,
    ewif_chain,
    expected_tree_tokens,
    max_cascade_depth,
    t_score,
    tree_ewif,
)


def test_estimate_moves_towards_observations() -> None:
    est = AcceptanceEstimator(0.6, weight=0.3, window=5, warmup=3)
    before = est.alpha
    est.observe(1.0)
    assert est.alpha > before
    low = AcceptanceEstimator(0.6, weight=0.3, window=5, warmup=3)
    low.observe(0.0)
    assert low.alpha < 0.6
    # A long run of rejections after warm-up keeps pushing the estimate down, strictly.
    values = []
    for _ in range(10):
        low.observe(0.0)
        values.append(low.alpha)
    assert all(b < a for a, b in zip(values, values[1:], strict=False))
    assert values[-1] < 0.1


def test_estimate_warmup_then_windowed_ema_by_hand() -> None:
    est = AcceptanceEstimator(0.5, weight=0.5, window=2, warmup=2)
    est.observe(1.0)
    assert est.alpha == pytest.approx((0.5 + 1.0) / 2)  # prior as one pseudo-observation
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


def test_latency_model_recovers_a_linear_law() -> None:
    model = LatencyModel(ridge=1e-12)
    b0, b1, b2 = 0.03, 2e-5, 0.004
    for seq_len in (10, 200, 700):
        for depth in (1, 3, 8):
            model.observe(seq_len, depth, b0 + b1 * seq_len + b2 * depth)
    fit = model.coefficients
    assert fit == pytest.approx((b0, b1, b2), rel=1e-6, abs=1e-9)
    assert model.predict(400, 5) == pytest.approx(b0 + b1 * 400 + b2 * 5, rel=1e-6)


def test_latency_model_with_constant_features_predicts_the_mean() -> None:
    model = LatencyModel()
    for seconds in (0.02, 0.04):
        model.observe(100, 1, seconds)
    assert model.predict(100, 1) == pytest.approx(0.03, rel=1e-3)
    with pytest.raises(ValueError, match="finite"):
        model.observe(1, 1, float("nan"))
    with pytest.raises(ValueError, match="at least one observation"):
        LatencyModel().predict(1, 1)


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


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="ema_weight"):
        DyTCConfig(ema_weight=0.0)
    with pytest.raises(ValueError, match="max_tree_size"):
        DyTCConfig(max_tree_size=0)


def _timed_policy(draft_seconds: float, alpha: float) -> DyTCPolicy:
    policy = DyTCPolicy(["l1"], DyTCConfig(prior_alpha=alpha, warmup=0))
    for size in (1, 4, 8):
        policy.observe_verify(100, size, 0.030 + 0.002 * (size - 1))
    for _ in range(2):  # the first timing of each draft is discarded (one-time setup)
        policy.observe_draft("l1", 100, 1, draft_seconds)
        policy.observe_draft(PLD, 100, 1, 1e-5)
    return policy


def test_first_draft_timing_is_discarded() -> None:
    policy = DyTCPolicy(["l1"])
    policy.observe_verify(100, 1, 0.03)
    policy.observe_draft("l1", 100, 1, 5.0)  # e.g. an int8 weight copy made on first use
    assert policy.draft_latency["l1"].count == 0
    policy.observe_draft("l1", 100, 1, 0.006)
    assert policy.cost("l1", 100) == pytest.approx(0.2, rel=1e-3)


def test_policy_falls_back_before_any_timing() -> None:
    policy = DyTCPolicy(["l1"])
    assert policy.plan_expansion([(0, 1.0, 0)], 1, 1.0, 0.0, 100, {0: ["l1", PLD]}) is None


def test_policy_drafts_with_a_cheap_good_draft_and_stops_with_a_bad_one() -> None:
    good = _timed_policy(draft_seconds=0.003, alpha=0.9)
    expansion = good.plan_expansion([(0, 1.0, 0)], 1, 1.0, 0.0, 100, {0: ["l1"]})
    assert expansion is not None and expansion.draft == "l1"
    assert expansion.predicted_ewif > 1.0
    # Growing best-first, always from the newest leaf of the chain, goes several tokens deep.
    depth, cum, tokens, spent = 0, 1.0, 1.0, 0.0
    while expansion is not None:
        for _ in range(expansion.k):
            depth += 1
            cum *= 0.9
            tokens += cum
        spent += 0.003 * expansion.k
        expansion = good.plan_expansion(
            [(depth, cum, depth)], depth + 1, tokens, spent, 100, {depth: ["l1"]}
        )
    assert depth >= 3
    bad = _timed_policy(draft_seconds=0.040, alpha=0.3)
    assert bad.plan_expansion([(0, 1.0, 0)], 1, 1.0, 0.0, 100, {0: ["l1"]}) is None


def test_policy_prefers_the_near_free_prompt_lookup() -> None:
    policy = _timed_policy(draft_seconds=0.020, alpha=0.6)
    expansion = policy.plan_expansion([(0, 1.0, 0)], 1, 1.0, 0.0, 100, {0: ["l1", PLD]})
    assert expansion is not None and expansion.draft == PLD


def test_policy_respects_the_size_budget_and_expands_the_best_leaf() -> None:
    policy = _timed_policy(draft_seconds=0.001, alpha=0.95)
    leaves = [(3, 0.2, 1), (5, 0.9, 2)]
    expansion = policy.plan_expansion(leaves, 6, 2.0, 0.0, 100, {3: ["l1"], 5: ["l1"]})
    assert expansion is not None and expansion.leaf == 5
    full = policy.config.max_tree_size
    assert policy.plan_expansion(leaves, full, 2.0, 0.0, 100, {3: ["l1"], 5: ["l1"]}) is None


def test_latency_forgetting_follows_a_load_change_and_predictions_have_a_floor() -> None:
    plain, forgetful = LatencyModel(), LatencyModel(forgetting=0.8)
    for _ in range(50):  # a loaded machine: 1 s per forward
        plain.observe(100, 1, 1.0)
        forgetful.observe(100, 1, 1.0)
    for _ in range(30):  # the load goes away: 0.03 s
        plain.observe(100, 1, 0.03)
        forgetful.observe(100, 1, 0.03)
    assert forgetful.predict(100, 1) < 0.05 < plain.predict(100, 1)
    noisy = LatencyModel()
    noisy.observe(10, 1, 0.05)
    noisy.observe(300, 1, 0.01)  # extrapolating this trend to long contexts goes below zero
    assert noisy.predict(3000, 1) == pytest.approx(0.01)


def test_untested_drafts_relax_towards_their_prior_so_they_can_recover() -> None:
    """A draft whose estimate fell is not proposed, so it gets no observations: `end_step`
    moves it back towards its prior by `reexplore` per step, and leaves tested drafts alone."""
    from casspec_ref.dytc import PLD, DyTCConfig, DyTCPolicy

    policy = DyTCPolicy(["model"], DyTCConfig(warmup=0, reexplore=0.1, prior_pld_alpha=0.5))
    policy.observe_acceptance(PLD, [False] * 30)
    policy.observe_acceptance("model", [True] * 30)
    low, high = policy.alpha[PLD].alpha, policy.alpha["model"].alpha
    assert low < 0.05 and high > 0.9
    policy.end_step(tested={"model"})
    assert policy.alpha[PLD].alpha == pytest.approx(low + 0.1 * (0.5 - low))
    assert policy.alpha["model"].alpha == high
    for _ in range(50):
        policy.end_step(tested=())
    assert policy.alpha[PLD].alpha == pytest.approx(0.5, abs=0.01)
    with pytest.raises(ValueError, match="reexplore"):
        DyTCConfig(reexplore=1.0)
