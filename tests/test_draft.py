"""StepDrafter's primitives, one by one and exactly: which tokens each proposes, the child rule
and the law q it declares, the bookkeeping (sources, primary flags, confidences), the budget
(room, max_nodes, max_depth), the cost it charges (seconds and forwards) and what it memoizes.

The model is tiny and float64; the clock is a counter (each call advances by a different whole
number of "seconds", so every charged interval is exact and tells which calls were timed); the
sampled drafts use a scripted random source that records every law it is asked to draw from.
Nothing here measures time.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import pytest
import torch

from casspec_ref.base.random_weights import random_init_
from casspec_ref.baselines import draft_chain, review
from casspec_ref.config import tiny_llama
from casspec_ref.draft import DraftSampling, NodeInfo, StepDrafter
from casspec_ref.dsia.prompt_lookup import PromptLookup, PromptLookupConfig
from casspec_ref.dsia.recycle import TokenRecycler
from casspec_ref.dsia.virtual_draft import DraftRunner
from casspec_ref.dytc_config import PLD, RECYCLE
from casspec_ref.kv_cache import KVCache
from casspec_ref.model import Transformer
from casspec_ref.plan import ExecutionPlan
from casspec_ref.sampling import TorchRandomSource, target_law
from casspec_ref.tree import ChildRule

LEVELS = {
    "exit": ExecutionPlan(exit_after=2, name="exit"),
    "skip": ExecutionPlan(skip_mlp=frozenset({2}), name="skip"),
}
CONTEXT = [3, 5, 7, 9, 3, 5, 7, 11, 3, 5]  # its last token (5) is the root
ROOT = CONTEXT[-1]
VOCAB = 32
GREEDY = DraftSampling()


@cache
def _model() -> Transformer:
    return random_init_(
        Transformer(tiny_llama(vocab_size=VOCAB, max_seq_len=128)).to(torch.float64), seed=4
    )


class Clock:
    """A deterministic clock: call n (from 0) returns 100 + 1 + 2 + ... + n, so consecutive
    intervals are 1, 2, 3, ... and every charged interval says which calls it spans."""

    def __init__(self) -> None:
        self.ticks: list[float] = []

    def __call__(self) -> float:
        now = 100.0 + len(self.ticks) * (len(self.ticks) + 1) / 2
        self.ticks.append(now)
        return now


class Scripted:
    """A random source whose categorical draw is the first token of `order` with mass in the
    law it is given; it checks and records every law. Bernoulli draws are not expected."""

    def __init__(self, order: list[int]) -> None:
        self.order = order
        self.laws: list[np.ndarray] = []

    def bernoulli(self, prob: float) -> bool:
        raise AssertionError("drafting never draws a Bernoulli coin")

    def categorical(self, probs: np.ndarray) -> int:
        law = np.array(probs, dtype=np.float64)
        assert law.ndim == 1 and (law >= 0).all() and abs(law.sum() - 1) < 1e-12, law
        self.laws.append(law)
        for token in self.order:
            if law[token] > 0:
                return token
        raise AssertionError("no scripted token has mass in the law")


def _cache() -> KVCache:
    cache = KVCache(_model().config, 128, torch.float64)
    with torch.no_grad():
        _model().forward(torch.tensor([CONTEXT[:-1]]), None, cache=cache)
    return cache


def _drafter(
    sampling: DraftSampling = GREEDY,
    *,
    rng: object = None,
    max_nodes: int = 64,
    max_depth: int = 16,
    runner: bool = True,
    recycler: TokenRecycler | None = None,
) -> StepDrafter:
    return StepDrafter(
        ROOT,
        CONTEXT,
        DraftRunner(_model(), _cache()) if runner else None,
        PromptLookup(CONTEXT),
        LEVELS,
        sampling,
        rng if rng is not None else Scripted([]),  # type: ignore[arg-type]
        max_nodes=max_nodes,
        max_depth=max_depth,
        clock=Clock(),
        recycler=recycler,
    )


def _reference_logits(level: str, path: list[int]) -> torch.Tensor:
    """The logits (V,) of `level` after `path` (root first), from a fresh runner and cache."""
    return DraftRunner(_model(), _cache()).logits(LEVELS[level], path)[-1]


def _greedy_chain(level: str, start: list[int], n: int) -> list[int]:
    """`n` argmax tokens of `level` continuing `start` (root first)."""
    path = list(start)
    for _ in range(n):
        path.append(int(_reference_logits(level, path).argmax()))
    return path[len(start) :]


def _clock(drafter: StepDrafter) -> Clock:
    assert isinstance(drafter.clock, Clock)
    return drafter.clock


def _forwards(drafter: StepDrafter) -> int:
    assert drafter.runner is not None
    return drafter.runner.forwards


def _calls(drafter: StepDrafter) -> dict[str, int]:
    """The calls charged per draft (`StepDrafter.charged` holds (calls, seconds))."""
    return {name: calls for name, (calls, _) in drafter.charged.items()}


# -- reading the tree -----------------------------------------------------------------------
def test_a_new_drafter_holds_the_root_and_nothing_spent() -> None:
    recycler = TokenRecycler()
    drafter = _drafter(recycler=recycler)
    assert drafter.size() == 1 and drafter.tree.tokens == [ROOT]
    assert drafter.info == [NodeInfo("root", True)]
    assert drafter.context is CONTEXT and drafter.recycler is recycler
    assert drafter.levels is LEVELS and drafter.sampling is GREEDY
    assert (drafter.max_nodes, drafter.max_depth) == (64, 16)
    assert drafter.charged == {} and drafter.seconds() == 0
    assert drafter.is_leaf(0) and drafter.path_tokens(0) == [ROOT]
    assert _clock(drafter).ticks == []  # constructing times nothing


def test_default_clock_is_the_performance_counter() -> None:
    import time

    drafter = StepDrafter(
        ROOT, CONTEXT, None, PromptLookup(CONTEXT), {}, GREEDY, TorchRandomSource(0), 4, 4
    )
    assert drafter.clock is time.perf_counter and drafter.recycler is None


def test_room_is_the_tighter_of_the_node_and_depth_budgets() -> None:
    drafter = _drafter(max_nodes=6, max_depth=3)
    assert drafter.room(0) == 3  # depth-bound: 3 < 6 - 1
    a, b = drafter.add_chain(0, [1, 2], "x")
    assert [drafter.room(n) for n in (0, a, b)] == [3, 2, 1]
    c = drafter.add_chain(0, [4], "x")[0]  # a sibling: 4 nodes, 2 left
    assert [drafter.room(n) for n in (0, a, b, c)] == [2, 2, 1, 2]
    assert [drafter.is_leaf(n) for n in (0, a, b, c)] == [False, False, True, True]
    assert drafter.path_tokens(b) == [ROOT, 1, 2] and drafter.path_tokens(c) == [ROOT, 4]
    assert drafter.size() == 4
    # Past either budget the room is 0, never negative.
    deep = drafter.tree.add_child(b, 6, ChildRule.DETERMINISTIC)  # depth 3
    deeper = drafter.tree.add_child(deep, 7, ChildRule.DETERMINISTIC)  # depth 4 > max_depth
    assert drafter.room(deep) == 0 and drafter.room(deeper) == 0
    drafter.tree.add_child(0, 8, ChildRule.DETERMINISTIC)  # 7 nodes > max_nodes
    assert drafter.room(0) == 0 and drafter.room(c) == 0


def test_charges_add_up_per_draft_name() -> None:
    drafter = _drafter()
    clock = _clock(drafter)
    drafter.charge("a", clock())  # 100 -> 101
    drafter.charge("b", clock(), calls=3)  # 103 -> 106
    drafter.charge("a", clock(), calls=0)  # 110 -> 115
    assert drafter.charged == {"a": (1, 1.0 + 5.0), "b": (3, 3.0)}
    assert drafter.seconds() == 9.0


def test_add_records_the_node_and_its_info() -> None:
    drafter = _drafter()
    info = NodeInfo("skip", False)
    q = np.full(VOCAB, 1 / VOCAB)
    node = drafter.add_node(0, 7, info, ChildRule.INDEPENDENT, q)
    assert node == 1 and drafter.tree.token(1) == 7 and drafter.tree.parent(1) == 0
    assert drafter.tree.child_rule(0) is ChildRule.INDEPENDENT
    np.testing.assert_array_equal(drafter.tree.draft_probs(1), q)
    assert drafter.info[1] is info and len(drafter.info) == 2


# -- model drafts ---------------------------------------------------------------------------
def test_draft_logits_are_the_last_row_and_charge_only_real_forwards() -> None:
    drafter = _drafter()
    clock = _clock(drafter)
    a, b = drafter.add_chain(0, [1, 2], "x")
    logits = drafter.draft_logits("skip", b)
    torch.testing.assert_close(logits, _reference_logits("skip", [ROOT, 1, 2]), rtol=1e-12, atol=0)
    assert logits.shape == (VOCAB,)
    assert drafter.charged == {"skip": (1, 1.0)}
    # A prefix of what was fed: answered from the runner's stored rows, no forward, no call.
    again = drafter.draft_logits("skip", a)
    torch.testing.assert_close(again, _reference_logits("skip", [ROOT, 1]), rtol=1e-12, atol=0)
    assert _forwards(drafter) == 1
    assert drafter.charged == {"skip": (1, 1.0 + 3.0)}
    # Another level: a forward of its own, charged to it.
    drafter.draft_logits("exit", b)
    assert _calls(drafter) == {"skip": 1, "exit": 1} and drafter.charged["exit"][1] == 5.0
    assert len(clock.ticks) == 6


def test_draft_logits_without_a_runner_is_a_clear_error() -> None:
    drafter = _drafter(runner=False)
    with pytest.raises(
        ValueError, match=r"^this step has no draft runner \(no model draft levels\)$"
    ):
        drafter.draft_logits("skip", 0)


def test_draft_law_greedy_is_the_temperature_one_softmax_and_is_memoized() -> None:
    drafter = _drafter()
    logits = drafter.draft_logits("skip", 0)
    q, confidence = drafter.draft_law("skip", 0, logits)
    assert q is None
    np.testing.assert_array_equal(confidence, torch.softmax(logits, -1).numpy())
    assert confidence.dtype == np.float64 and confidence.shape == (VOCAB,)
    # Once per (level, node): other logits for the same key give the stored result.
    _, same = drafter.draft_law("skip", 0, torch.zeros(VOCAB, dtype=torch.float64))
    assert same is confidence
    # Another level or another node is another key.
    zeros = torch.zeros(VOCAB, dtype=torch.float64)
    np.testing.assert_array_equal(drafter.draft_law("exit", 0, zeros)[1], np.full(VOCAB, 1 / 32))
    np.testing.assert_array_equal(drafter.draft_law("skip", 1, zeros)[1], np.full(VOCAB, 1 / 32))


def test_draft_law_sampling_is_the_processed_target_law() -> None:
    sampling = DraftSampling(temperature=0.6, top_k=9, top_p=0.8)
    drafter = _drafter(sampling)
    logits = drafter.draft_logits("skip", 0)
    q, confidence = drafter.draft_law("skip", 0, logits)
    assert q is not None and confidence is q
    np.testing.assert_array_equal(q, target_law(logits, 0.6, 9, 0.8).numpy())
    assert 1 < np.count_nonzero(q) < 9  # top-p cut below top-k: both transforms applied
    assert drafter.draft_law("skip", 0, torch.zeros(VOCAB, dtype=torch.float64))[0] is q


def test_greedy_children_are_the_top_tokens_deterministic() -> None:
    drafter = _drafter(max_nodes=4)  # room for 3 children
    clock = _clock(drafter)
    logits = _reference_logits("skip", [ROOT])
    probs = torch.softmax(logits, -1)
    added = drafter.propose_children("skip", 0, 5)  # clamped to the 3 nodes left
    top = torch.topk(logits, 3).indices.tolist()
    assert [node for node, _ in added] == [1, 2, 3]
    assert drafter.tree.tokens[1:] == top
    assert [c for _, c in added] == pytest.approx(probs[top].tolist(), rel=1e-12, abs=0)
    assert all(type(c) is float for _, c in added)
    assert drafter.tree.child_rule(0) is ChildRule.DETERMINISTIC
    assert all(drafter.tree.draft_probs(n) is None for n in (1, 2, 3))
    assert drafter.info[1:] == [NodeInfo("skip", True), NodeInfo("skip", False)] + [
        NodeInfo("skip", False)
    ]
    assert drafter.charged == {"skip": (1, 1.0)}
    assert len(clock.ticks) == 2
    # The tree is full: nothing more, and no forward is run to find that out.
    assert drafter.propose_children("skip", 1, 1) == []
    assert _forwards(drafter) == 1 and len(clock.ticks) == 2


def test_children_of_two_levels_at_one_node_carry_each_level_s_confidence() -> None:
    drafter = _drafter()
    skip = drafter.propose_children("skip", 0, 1)
    exit_ = drafter.propose_children("exit", 0, 1)
    assert skip[0][1] != exit_[0][1]  # so that a shared key would show
    for (_, confidence), level in zip(skip + exit_, ("skip", "exit"), strict=True):
        probs = torch.softmax(_reference_logits(level, [ROOT]), -1)
        assert confidence == pytest.approx(float(probs.max()), rel=1e-12, abs=0)
    # Each level's law is stored under its own key.
    zeros = torch.zeros(VOCAB, dtype=torch.float64)
    assert float(drafter.draft_law("skip", 0, zeros)[1].max()) == skip[0][1]
    assert float(drafter.draft_law("exit", 0, zeros)[1].max()) == exit_[0][1]


def test_the_chain_child_s_margin_is_its_probability_over_the_best_other() -> None:
    """Greedy: the top token's probability minus the runner-up's; sampled: the drawn token's
    minus the best other token's (negative when the draw was not the top token). Siblings and
    nodes no model drafted have none."""
    drafter = _drafter()
    drafter.propose_children("skip", 0, 2)
    probs = torch.softmax(_reference_logits("skip", [ROOT]), -1)
    top = torch.topk(probs, 2).values.tolist()
    assert drafter.margin(1) == pytest.approx(top[0] - top[1], rel=1e-12, abs=0) and top[1] > 0
    assert drafter.margin(2) is None and drafter.margin(0) is None
    q = target_law(_reference_logits("skip", [ROOT]), 0.7, 4).numpy()
    least = min((int(t) for t in np.flatnonzero(q)), key=lambda t: q[t])
    sampled = _drafter(DraftSampling(temperature=0.7, top_k=4), rng=Scripted([least]))
    sampled.propose_children("skip", 0, 1)
    assert sampled.tree.tokens[1] == least
    margin = sampled.margin(1)
    assert margin is not None and margin < 0
    assert margin == pytest.approx(q[least] - q.max(), rel=1e-12, abs=0)


def test_one_greedy_child() -> None:
    drafter = _drafter()
    added = drafter.propose_children("exit", 0, 1)
    token = int(_reference_logits("exit", [ROOT]).argmax())
    assert [n for n, _ in added] == [1] and drafter.tree.tokens == [ROOT, token]
    assert drafter.info[1] == NodeInfo("exit", True)


def test_no_children_without_count_or_room() -> None:
    drafter = _drafter(max_depth=1)
    assert drafter.propose_children("skip", 0, 0) == []
    assert drafter.propose_children("skip", 0, -2) == []
    assert drafter.size() == 1 and _forwards(drafter) == 0 and _calls(drafter) == {}
    node = drafter.propose_children("skip", 0, 1)[0][0]
    # The node budget allows siblings, but the depth budget says nothing below `node`.
    assert drafter.room(node) == 0 and drafter.max_nodes - drafter.size() > 0
    assert drafter.propose_children("skip", node, 2) == []
    assert drafter.size() == 2 and _forwards(drafter) == 1 and _calls(drafter) == {"skip": 1}
    # Siblings need no depth: the root still takes more children.
    assert [n for n, _ in drafter.propose_children("skip", 0, 1)] == [2]


def test_sampled_siblings_are_drawn_without_replacement_from_one_q() -> None:
    sampling = DraftSampling(temperature=0.7, top_k=4)
    logits = _reference_logits("skip", [ROOT])
    q = target_law(logits, 0.7, 4).numpy()
    support = [int(t) for t in np.flatnonzero(q)]
    order = sorted(support, key=lambda t: q[t])  # least likely first: not what greedy picks
    rng = Scripted(order)
    drafter = _drafter(sampling, rng=rng)
    added = drafter.propose_children("skip", 0, 3)
    assert drafter.tree.tokens[1:] == order[:3]
    assert [c for _, c in added] == [float(q[t]) for t in order[:3]]
    assert drafter.tree.child_rule(0) is ChildRule.WITHOUT_REPLACEMENT
    for node in (1, 2, 3):
        np.testing.assert_array_equal(drafter.tree.draft_probs(node), q)  # the unconditional q
    assert drafter.info[1:] == [NodeInfo("skip", True)] + 2 * [NodeInfo("skip", False)]
    # Each draw is from q conditioned on the earlier draws.
    rest = q.copy()
    assert len(rng.laws) == 3
    for law, token in zip(rng.laws, order[:3], strict=True):
        np.testing.assert_array_equal(law, rest / rest.sum())
        rest[token] = 0.0


def test_sampled_children_stop_at_the_support() -> None:
    sampling = DraftSampling(temperature=0.7, top_k=4)
    q = target_law(_reference_logits("skip", [ROOT]), 0.7, 4).numpy()
    order = [int(t) for t in np.flatnonzero(q)][::-1]
    rng = Scripted(order)
    drafter = _drafter(sampling, rng=rng)
    drafter.propose_children("skip", 0, 6)
    assert drafter.tree.tokens[1:] == order and len(rng.laws) == 4


def test_one_sampled_child_is_independent_with_its_q() -> None:
    sampling = DraftSampling(temperature=1.3, top_p=0.9)
    q = target_law(_reference_logits("exit", [ROOT]), 1.3, 0, 0.9).numpy()
    order = [int(t) for t in np.argsort(q, kind="stable")]  # least likely first
    drafter = _drafter(sampling, rng=Scripted(order))
    added = drafter.propose_children("exit", 0, 1)
    token = next(t for t in order if q[t] > 0)
    assert drafter.tree.tokens == [ROOT, token] and added == [(1, float(q[token]))]
    assert drafter.tree.child_rule(0) is ChildRule.INDEPENDENT
    np.testing.assert_array_equal(drafter.tree.draft_probs(1), q)


def test_draft_chain_continues_the_first_child() -> None:
    drafter = _drafter()
    deepest = draft_chain(drafter, "skip", 0, 3, siblings=2)
    logits = _reference_logits("skip", [ROOT])
    first, second = torch.topk(logits, 2).indices.tolist()
    chain = _greedy_chain("skip", [ROOT, first], 2)
    assert drafter.tree.tokens == [ROOT, first, second, *chain]
    assert [drafter.tree.parent(n) for n in (1, 2, 3, 4)] == [0, 0, 1, 3]
    assert deepest == 4
    # The depth budget ends a chain early; its deepest node is returned.
    short = _drafter(max_depth=2)
    assert draft_chain(short, "skip", 0, 5) == 2 and short.size() == 3
    assert draft_chain(_drafter(), "skip", 0, 0) == 0


# -- the vertical cascade's review ----------------------------------------------------------
@pytest.mark.parametrize("sampling", [GREEDY, DraftSampling(temperature=0.8, top_k=3)])
def test_review_keeps_the_agreeing_prefix_and_adds_its_own_token(sampling: DraftSampling) -> None:
    drafter = _drafter(sampling)
    clock = _clock(drafter)
    node = drafter.add_chain(0, [2], "exit")[0]
    want = _greedy_chain("skip", [ROOT, 2], 3)  # the reviewer's own choices below node
    wrong = (want[2] + 1) % VOCAB
    deepest = review(drafter, "skip", node, [want[0], want[1], wrong, want[0]])
    assert deepest == 4
    assert drafter.tree.tokens == [ROOT, 2, *want]
    assert [drafter.tree.parent(n) for n in (2, 3, 4)] == [1, 2, 3]
    assert drafter.info[2:] == [NodeInfo(PLD, True), NodeInfo(PLD, True), NodeInfo("skip", True)]
    assert all(drafter.tree.child_rule(n) is ChildRule.DETERMINISTIC for n in (1, 2, 3))
    # One forward over the path and the whole proposal, charged once.
    assert drafter.runner is not None and drafter.runner.tokens_fed == 2 + 4
    assert drafter.charged == {"skip": (1, 1.0)}
    assert len(clock.ticks) == 2


def test_review_accepting_everything_and_its_first_disagreement() -> None:
    want = _greedy_chain("skip", [ROOT], 3)
    drafter = _drafter()
    assert review(drafter, "skip", 0, want) == 3
    assert drafter.tree.tokens[1:] == want and {i.source for i in drafter.info[1:]} == {PLD}
    drafter = _drafter()
    assert review(drafter, "skip", 0, [(want[0] + 1) % VOCAB, want[1]]) == 1
    assert drafter.tree.tokens == [ROOT, want[0]] and drafter.info[1] == NodeInfo("skip", True)


def test_review_feeds_at_most_the_room() -> None:
    want = _greedy_chain("skip", [ROOT], 3)
    drafter = _drafter(max_depth=2)
    assert review(drafter, "skip", 0, want) == 2  # the whole room agreed
    assert drafter.tree.tokens[1:] == want[:2]
    assert drafter.runner is not None and drafter.runner.tokens_fed == 1 + 2
    full = _drafter(max_nodes=1)
    assert review(full, "skip", 0, want) == 0 and full.size() == 1
    assert _forwards(full) == 0 and _calls(full) == {} and _clock(full).ticks == []


def test_review_of_nothing_and_without_a_model() -> None:
    drafter = _drafter()
    assert review(drafter, "skip", 0, []) == 0 and _calls(drafter) == {} and _forwards(drafter) == 0
    bare = _drafter(runner=False)
    assert review(bare, "skip", 0, []) == 0
    with pytest.raises(ValueError, match="^a vertical cascade needs a model draft level$"):
        review(bare, "skip", 0, [1])


class RowsRunner:
    """A stand-in for the draft runner: every position gets the same logits `row`."""

    def __init__(self, row: torch.Tensor) -> None:
        self.row = row
        self.forwards = 0

    def logits(self, plan: ExecutionPlan, path: list[int]) -> torch.Tensor:
        self.forwards += 1
        return self.row.expand(len(path), -1)


def test_sampled_review_takes_the_argmax_of_the_greedy_law_not_of_a_softmax() -> None:
    """Logits 0 and 1e-300 differ, but exp rounds both to the same probability: the reviewer's
    choice is the larger logit (the temperature-0 law), which a softmax cannot see."""
    row = torch.full((VOCAB,), -50.0, dtype=torch.float64)
    row[1], row[2] = 0.0, 1e-300
    soft = torch.softmax(row, -1)
    assert soft[1] == soft[2] and int(soft.argmax()) == 1  # the tie a softmax would break low
    for sampling in (GREEDY, DraftSampling(temperature=0.8)):
        drafter = _drafter(sampling)
        drafter.runner = RowsRunner(row)  # type: ignore[assignment]
        assert review(drafter, "skip", 0, [2, 2]) == 2
        assert drafter.tree.tokens == [ROOT, 2, 2] and drafter.info[1].source == PLD


def test_sampled_review_checks_the_reviewer_logits_like_the_target_law() -> None:
    """Under sampling the reviewer's choice comes from its processed law, so logits that law
    rejects (here a NaN) are a clear error, not a silent choice."""
    row = torch.zeros(VOCAB, dtype=torch.float64)
    row[3] = float("nan")
    drafter = _drafter(DraftSampling(temperature=0.8))
    drafter.runner = RowsRunner(row)  # type: ignore[assignment]
    with pytest.raises(ValueError, match="logits contain NaN"):
        review(drafter, "skip", 0, [1])


# -- the target's cost curve ----------------------------------------------------------------
def test_time_target_runs_scratch_forwards_of_the_root_within_the_room() -> None:
    drafter = _drafter(max_nodes=4)  # room(0) = 3: up to 4 scratch tokens
    runner = drafter.runner
    assert runner is not None
    cache, base, model = runner.cache, runner.base, runner.model
    seen: list[tuple[torch.Tensor, torch.Tensor, bool, int]] = []

    class Spy:
        def __call__(self, tokens, positions, cache=None, plan=None):  # type: ignore[no-untyped-def]
            assert plan is None and cache is runner.cache
            out = model.forward(tokens, positions, cache=cache)
            seen.append((tokens, positions, torch.is_grad_enabled(), cache.length))
            return out

    runner.model = Spy()  # type: ignore[assignment]
    clock = _clock(drafter)
    seconds = drafter.time_target([1, 4, 5, 2])
    assert list(seconds) == [1, 4, 2]  # 5 has no room
    # Every size twice, the faster counts: the clock's intervals grow (1, 3, 5, then 7, 9, 11).
    assert seconds == {1: 1.0, 4: 3.0, 2: 5.0} and len(clock.ticks) == 12
    for (tokens, positions, grad, length), size in zip(seen, [1, 4, 2] * 2, strict=True):
        assert torch.equal(tokens, torch.full((1, size), ROOT))
        assert torch.equal(positions, torch.arange(base, base + size)[None])
        assert not grad and length == base + size
    assert cache.length == base  # the scratch rows are gone
    assert _calls(drafter) == {} and drafter.size() == 1
    assert _drafter(runner=False).time_target([1, 2]) == {}


def test_time_target_feeds_on_the_cache_device() -> None:
    """The scratch tokens and positions are made on the device of the cache (here `meta`,
    which no default device is)."""
    drafter = _drafter(max_nodes=3)
    seen: list[tuple[torch.device, torch.device]] = []
    truncated: list[int] = []

    class Cache:
        k = torch.empty(0, device="meta")

        def truncate(self, length: int) -> None:
            truncated.append(length)

    class Model:
        def __call__(self, tokens, positions, cache=None):  # type: ignore[no-untyped-def]
            seen.append((tokens.device, positions.device))
            return torch.zeros(1, tokens.shape[1], 5)  # (1, T, V) logits, read back once

    class Runner:
        model, cache, base = Model(), Cache(), 17

    drafter.runner = Runner()  # type: ignore[assignment]
    assert drafter.time_target([2, 3, 4]) == {2: 1.0, 3: 3.0}
    meta = torch.device("meta")
    assert seen == [(meta, meta)] * 4 and truncated == [17] * 4


def test_time_target_keeps_the_faster_of_two_forwards_per_size() -> None:
    """A size's first forward may pay one-time setup (oneDNN's packed weights are made at their
    first use, ~100 ms on SmolLM2): that forward must not become the size's cost, or DyTC would
    avoid the size until exploration pays its way back to it."""
    drafter = _drafter(max_nodes=8)
    runner = drafter.runner
    assert runner is not None
    model, now, firsts = runner.model, [0.0], set()

    class SlowFirst:
        def __call__(self, tokens, positions, cache=None):  # type: ignore[no-untyped-def]
            size = tokens.shape[1]
            now[0] += 0.1 + 0.01 * size if size in firsts else 0.5
            firsts.add(size)
            return model.forward(tokens, positions, cache=cache)

    runner.model = SlowFirst()  # type: ignore[assignment]
    drafter.clock = lambda: now[0]
    seconds = drafter.time_target([1, 2, 4])
    assert seconds == pytest.approx({1: 0.11, 2: 0.12, 4: 0.14})


# -- free drafts ----------------------------------------------------------------------------
def test_lookup_continues_the_context_and_the_path() -> None:
    drafter = _drafter()
    node = drafter.add_chain(0, [7, 9], "x")[-1]
    full = PromptLookup(CONTEXT + [7, 9]).propose(4)
    assert len(full) == 4 and full != PromptLookup(CONTEXT).propose(4)
    assert drafter.lookup(node, 4) == full
    assert drafter.lookup(node, 2) == full[:2]
    assert drafter.charged == {PLD: (2, 1.0 + 3.0)}


def test_add_chain_appends_deterministic_nodes_within_the_room() -> None:
    drafter = _drafter(max_depth=3)
    assert drafter.add_chain(0, [], "x") == []
    added = drafter.add_chain(0, [4, 6, 8, 10], "src")
    assert added == [1, 2, 3] and drafter.tree.tokens == [ROOT, 4, 6, 8]
    assert [drafter.tree.parent(n) for n in added] == [0, 1, 2]
    assert drafter.info[1:] == 3 * [NodeInfo("src", True)]
    assert all(drafter.tree.child_rule(n) is ChildRule.DETERMINISTIC for n in (0, 1, 2))
    assert all(drafter.tree.draft_probs(n) is None for n in added)
    assert drafter.add_chain(3, [1], "src") == [] and _calls(drafter) == {}


def test_pld_offers_are_looked_up_once_within_the_room() -> None:
    proposal = PromptLookup(CONTEXT).propose(10)
    assert len(proposal) == 4
    drafter = _drafter()
    assert drafter.offers(0, PLD) == 4
    assert drafter.offers(0, PLD) == 4 and _calls(drafter) == {PLD: 1}  # memoized
    # The lookup's match (the suffix 3, 5 recurs; 11, 3, 5 does not) is what DyTC learns by.
    assert drafter.match(0) == PromptLookup(CONTEXT).match(10).ngram == 2
    assert _drafter().match(0) == 0  # not looked up
    short = _drafter(max_depth=2)
    assert short.offers(0, PLD) == 2 and _calls(short) == {PLD: 1}
    # Expanding uses the memoized proposal, cut to k.
    assert short.expand(0, PLD, 1, 1) == [(1, 0, None)]
    assert short.tree.tokens == [ROOT, proposal[0]] and _calls(short) == {PLD: 1}
    assert short.info[1] == NodeInfo(PLD, True)


def test_pld_expand_without_offers_looks_up_k() -> None:
    proposal = PromptLookup(CONTEXT).propose(10)
    drafter = _drafter()
    assert drafter.expand(0, PLD, 3, 2) == [(1, 0, None), (2, 1, None), (3, 2, None)]
    assert drafter.tree.tokens[1:] == proposal[:3] and _calls(drafter) == {PLD: 1}
    assert all(drafter.tree.child_rule(n) is ChildRule.DETERMINISTIC for n in (0, 1, 2))
    # A context without repeats offers nothing (DyTC then never expands PLD there).
    lonely = StepDrafter(
        ROOT,
        [1, 2, ROOT],
        None,
        PromptLookup([1, 2, ROOT]),
        {},
        GREEDY,
        Scripted([]),
        8,
        8,
        clock=Clock(),
    )
    assert lonely.offers(0, PLD) == 0 and lonely.offers(0, PLD) == 0
    assert _calls(lonely) == {PLD: 1} and lonely.size() == 1


def test_pld_expand_that_adds_nothing_returns_nothing() -> None:
    """`expand` adds "up to" k tokens: an empty lookup, k = 0 or no room add none, no crash."""
    lonely = StepDrafter(
        ROOT,
        [1, 2, ROOT],
        None,
        PromptLookup([1, 2, ROOT]),
        {},
        GREEDY,
        Scripted([]),
        8,
        8,
        clock=Clock(),
    )
    assert lonely.expand(0, PLD, 3, 1) == [] and lonely.size() == 1
    drafter = _drafter()
    assert drafter.expand(0, PLD, 0, 1) == [] and drafter.size() == 1
    full = StepDrafter(
        ROOT, CONTEXT, None, PromptLookup(CONTEXT), {}, GREEDY, Scripted([]), 1, 8, clock=Clock()
    )
    assert full.expand(0, PLD, 3, 1) == [] and full.size() == 1


def test_pld_expand_looks_up_k_tokens_whatever_the_default_proposal_length() -> None:
    pld = PromptLookup(CONTEXT, PromptLookupConfig(max_proposal=2))
    drafter = StepDrafter(ROOT, CONTEXT, None, pld, {}, GREEDY, Scripted([]), 9, 9, clock=Clock())
    assert [n for n, _, _ in drafter.expand(0, PLD, 4, 1)] == [1, 2, 3, 4]
    assert drafter.tree.tokens[1:] == [7, 11, 3, 5]


def _recycler() -> TokenRecycler:
    recycler = TokenRecycler()
    recycler.successors = {
        ROOT: ([20, 21, 22], [0.5, 0.25, 0.125]),
        20: ([23, 24], [0.375, 0.0625]),
        23: ([25], [0.75]),
        25: ([20], [0.875]),
    }
    return recycler


@pytest.mark.parametrize("draft", [PLD, RECYCLE])
def test_free_drafts_under_sampling_are_point_drafts(draft: str) -> None:
    """A lookup or a recycled walk draws no token from a law, under sampling as under greedy:
    its nodes are DETERMINISTIC children with no draft law (a point mass on the token, docs/
    method.md §5 rule 4), and no coin is drawn (the scripted source fails on any draw). A
    law declared for them (a uniform q, say) would be tested as if the token had been drawn."""
    sampling = DraftSampling(temperature=0.8, top_k=3, top_p=0.9)
    drafter = _drafter(sampling, recycler=_recycler())
    added = [node for node, _, _ in drafter.expand(0, draft, 3, 2)]
    assert len(added) >= 3 and {drafter.info[n].source for n in added} == {draft}
    parents = {drafter.tree.parent(n) for n in added}
    assert all(drafter.tree.child_rule(p) is ChildRule.DETERMINISTIC for p in parents)
    assert all(drafter.tree.draft_probs(n) is None for n in added)
    below = drafter.add_chain(added[-1], [7, 9], draft)
    assert below and all(drafter.tree.draft_probs(n) is None for n in below)
    assert drafter.tree.child_rule(added[-1]) is ChildRule.DETERMINISTIC


def test_recycled_offers_and_alternatives() -> None:
    drafter = _drafter(recycler=_recycler(), max_depth=5)
    assert drafter.offers(0, RECYCLE) == 5  # the walk 20 23 25 20 23 .. cut to the room
    node = drafter.add_chain(0, [25, 20, 23], "x")[-1]
    assert drafter.offers(node, RECYCLE) == 2
    assert drafter.offers(0, "skip") == 0  # not a free draft
    assert drafter.alternatives(0, RECYCLE, 2) == [0.5, 0.25]
    assert drafter.alternatives(0, RECYCLE, 9) == [0.5, 0.25, 0.125]
    assert drafter.alternatives(node, RECYCLE, 3) == [0.75]
    assert _calls(drafter) == {} and drafter.size() == 4
    bare = _drafter()
    assert bare.offers(0, RECYCLE) == 0 and bare.alternatives(0, RECYCLE, 2) == []
    assert bare.expand(0, RECYCLE, 3, 2) == [] and _calls(bare) == {} and bare.size() == 1


def test_recycled_expansion_walks_the_table_below_the_first_successor() -> None:
    drafter = _drafter(recycler=_recycler())
    added = drafter.expand(0, RECYCLE, 3, 2)
    assert added == [(1, 0, 0.5), (3, 1, 0.375), (4, 3, 0.75), (2, 0, 0.25)]
    assert drafter.tree.tokens == [ROOT, 20, 21, 23, 25]
    assert [i.primary for i in drafter.info[1:]] == [True, False, True, True]
    assert {i.source for i in drafter.info[1:]} == {RECYCLE}
    assert all(drafter.tree.child_rule(n) is ChildRule.DETERMINISTIC for n in (0, 1, 3))
    assert all(drafter.tree.draft_probs(n) is None for n in range(1, 5))
    assert drafter.charged == {RECYCLE: (1, 1.0)}


@pytest.mark.parametrize(
    ("max_nodes", "max_depth", "k", "width", "want"),
    [
        (3, 9, 3, 2, [(1, 0, 0.5), (2, 0, 0.25)]),  # siblings fill the node budget
        (2, 9, 3, 3, [(1, 0, 0.5)]),  # no room for the second sibling
        (9, 2, 4, 1, [(1, 0, 0.5), (2, 1, 0.375)]),  # the depth budget ends the walk
        (9, 9, 1, 3, [(1, 0, 0.5), (2, 0, 0.25), (3, 0, 0.125)]),  # k = 1: no walk
        (9, 9, 5, 1, [(1, 0, 0.5), (2, 1, 0.375), (3, 2, 0.75), (4, 3, 0.875), (5, 4, 0.375)]),
    ],
)
def test_recycled_expansion_respects_the_budgets(
    max_nodes: int, max_depth: int, k: int, width: int, want: list[tuple[int, int, float]]
) -> None:
    drafter = _drafter(recycler=_recycler(), max_nodes=max_nodes, max_depth=max_depth)
    assert drafter.expand(0, RECYCLE, k, width) == want


def test_recycled_expansion_of_an_unknown_token() -> None:
    drafter = _drafter(recycler=_recycler())
    node = drafter.add_chain(0, [24], "x")[0]
    assert drafter.expand(node, RECYCLE, 3, 2) == [] and drafter.size() == 2
    assert drafter.charged == {RECYCLE: (1, 1.0)}


def test_recycled_expansion_without_room() -> None:
    drafter = _drafter(recycler=_recycler(), max_depth=1)
    node = drafter.add_chain(0, [20], "x")[0]  # 20 has successors, but no depth is left
    assert drafter.expand(node, RECYCLE, 3, 2) == [] and drafter.size() == 2
    assert _calls(drafter) == {RECYCLE: 1}


# -- DyTC's model-draft primitives ----------------------------------------------------------
def test_alternatives_are_the_best_confidences_and_expand_reuses_the_forward() -> None:
    drafter = _drafter()
    logits = _reference_logits("skip", [ROOT])
    probs = torch.softmax(logits, -1)
    best = torch.sort(probs, descending=True).values
    assert drafter.alternatives(0, "skip", 3) == pytest.approx(best[:3].tolist(), rel=1e-12)
    assert _calls(drafter) == {"skip": 1}
    wide = drafter.alternatives(0, "skip", 100)  # at most the vocabulary
    assert wide == pytest.approx(best.tolist(), rel=1e-12) and len(wide) == VOCAB
    assert _calls(drafter) == {"skip": 1} and _forwards(drafter) == 1
    # The law was stored for (level, node): other logits for that key give it back.
    _, stored = drafter.draft_law("skip", 0, torch.zeros(VOCAB, dtype=torch.float64))
    np.testing.assert_array_equal(stored, probs.numpy())
    drafter.expand(0, "skip", 1, 2)
    assert _calls(drafter) == {"skip": 1} and drafter.size() == 3


def test_alternatives_under_sampling_are_the_processed_law() -> None:
    drafter = _drafter(DraftSampling(temperature=0.5, top_k=2))
    q = target_law(_reference_logits("exit", [ROOT]), 0.5, 2).numpy()
    best = sorted(q, reverse=True)
    assert drafter.alternatives(0, "exit", 3) == pytest.approx(best[:3], rel=1e-12, abs=0)
    assert drafter.alternatives(0, "exit", 3)[2] == 0.0


def test_model_expansion_is_a_chain_then_its_siblings() -> None:
    drafter = _drafter()
    clock = _clock(drafter)
    added = drafter.expand(0, "skip", 3, 2)
    logits = _reference_logits("skip", [ROOT])
    first, second = torch.topk(logits, 2).indices.tolist()
    chain = _greedy_chain("skip", [ROOT, first], 2)
    assert drafter.tree.tokens == [ROOT, first, second, *chain]
    assert [(n, p) for n, p, _ in added] == [(1, 0), (3, 1), (4, 3), (2, 0)]
    probs = [
        torch.softmax(_reference_logits("skip", path), -1)[token].item()
        for path, token in [
            ([ROOT], first),
            ([ROOT, first], chain[0]),
            ([ROOT, first, chain[0]], chain[1]),
            ([ROOT], second),
        ]
    ]
    assert [c for _, _, c in added] == pytest.approx(probs, rel=1e-12, abs=0)
    assert [i.primary for i in drafter.info[1:]] == [True, False, True, True]
    assert _calls(drafter) == {"skip": 3} and len(clock.ticks) == 6


@pytest.mark.parametrize(
    ("max_depth", "k", "width", "want"),
    [
        (2, 4, 2, [(1, 0), (3, 1), (2, 0)]),  # the depth budget ends the chain
        (9, 1, 3, [(1, 0), (2, 0), (3, 0)]),  # k = 1: siblings only
        (0, 3, 2, []),  # no room at all
    ],
)
def test_model_expansion_respects_the_budgets(
    max_depth: int, k: int, width: int, want: list[tuple[int, int]]
) -> None:
    drafter = _drafter(max_depth=max_depth)
    assert [(n, p) for n, p, _ in drafter.expand(0, "exit", k, width)] == want
    assert drafter.size() == 1 + len(want)
