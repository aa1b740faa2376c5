"""The replay of drafting schedules on recorded acceptances (`casspec_ref.tools.replay`): what it
records, and its clock and verification worked by hand."""

from __future__ import annotations

import json

import pytest
import torch

from casspec_ref.base.random_weights import random_init_
from casspec_ref.baselines import ScheduleOptions
from casspec_ref.config import tiny_llama
from casspec_ref.dsia.prompt_lookup import PromptLookup, PromptLookupConfig
from casspec_ref.dsia.recycle import TokenRecycler
from casspec_ref.dytc_config import PLD, RECYCLE, DyTCConfig
from casspec_ref.dytc_estimates import Outcome
from casspec_ref.dytc_refinements import RefinedDyTC
from casspec_ref.generate import generate_ar
from casspec_ref.kv_cache import KVCache
from casspec_ref.model import Transformer
from casspec_ref.plan import ExecutionPlan
from casspec_ref.schedules import SCHEDULES, Schedule, ScheduleSpec
from casspec_ref.tools.replay import (
    Costs,
    Recorded,
    ReplayDrafter,
    StepKind,
    hindsight,
    question_orders,
    record,
    replay,
)

ANSWER = list(range(10, 21))  # 11 tokens: the first comes from the prefill, 10 are decoded
COSTS = Costs(
    {1: 1.0, 2: 1.25, 3: 1.5, 4: 1.75, 5: 2.0}, {"good": 0.2, "bad": 0.2}, 0.05, 0.1, 0.01, 0.02
)
LOOKUP = COSTS.lookup_overhead


_SPEC = ScheduleSpec(["bad", "good"], 0)


def _recorded(prompt: list[int], top: str = "good") -> Recorded:
    """Row i predicts answer[i]: "good" always right, "bad" never; `top` is the most accurate
    level (recorded last), the one a chain drafts with."""
    good = ([[t, 0, 1] for t in ANSWER], [[0.9, 0.05, 0.05]] * len(ANSWER))
    bad = ([[999, 0, 1]] * len(ANSWER), [[0.9, 0.05, 0.05]] * len(ANSWER))
    target = ([[t, 0, 1, 2] for t in ANSWER], [[0.7, 0.1, 0.1, 0.1]] * len(ANSWER))
    drafts = {"bad": bad, "good": good} if top == "good" else {"good": good, "bad": bad}
    return Recorded("g", prompt, ANSWER, drafts, target)


def _baseline(method: str, chain_k: int, lookup_k: int = 5) -> Schedule:
    """The package's own schedule, as the bench builds it."""
    options = ScheduleOptions(chain_k=chain_k, lookup_k=lookup_k)
    return SCHEDULES[method](ScheduleSpec(["bad", "good"], 0, options=options))


def test_the_naive_loop_pays_one_forward_per_decoded_token() -> None:
    run = replay([_recorded([1, 2, 3])], COSTS)
    assert run.steps == 10 and run.tokens == {"g": 10}
    assert run.seconds["g"] == pytest.approx(10 * 1.0)
    twice = replay([_recorded([1, 2, 3])] * 2, COSTS)  # a group's questions add up
    assert twice.steps == 20 and twice.tokens == {"g": 20}
    assert twice.seconds["g"] == pytest.approx(20 * 1.0)


def test_costs_read_back_from_their_json() -> None:
    stored = json.loads(json.dumps({"verify": {1: 0.02, 8: 0.03}, "draft": {"good": 0.01}}))
    assert Costs.from_json(stored) == Costs({1: 0.02, 8: 0.03}, {"good": 0.01})
    costs = Costs.from_json(stored, draft_overhead=0.5, step_overhead=0.25)
    assert (costs.draft_overhead, costs.step_overhead, costs.verify_seconds(9)) == (0.5, 0.25, 0.03)
    measured = {**stored, "overheads": {"draft": 0.004, "step": 0.002}}
    costs = Costs.from_json(measured)
    assert (costs.draft_overhead, costs.step_overhead) == (0.004, 0.002)  # as measured
    assert Costs.from_json(measured, step_overhead=0.25).step_overhead == 0.25  # stated wins


def test_pld_k_looks_up_k_tokens() -> None:
    copied = _recorded([*ANSWER, 5], top="bad")
    pld = SCHEDULES["pld"](ScheduleSpec(["bad", "good"], 0))
    assert replay([copied], COSTS, pld).steps == 1  # the default proposal (10) covers it all
    short = replay([copied], COSTS, pld, lookup=PromptLookupConfig(max_proposal=2))
    assert short.steps == 4  # 3 tokens a step (2 looked up, 1 the target's): 3, 3, 3, 1


def test_a_right_chain_commits_k_plus_one_tokens_a_step_at_its_cost() -> None:
    run = replay([_recorded([1, 2, 3])], COSTS, _baseline("chain", 3))
    # Steps commit 4, 4, then 2 (the answer's end limits the last chain to one token):
    # 7 draft calls, verify forwards over 4, 4 and 2 tokens, 3 step overheads.
    assert run.steps == 3
    assert run.seconds["g"] == pytest.approx(7 * 0.25 + 2 * 1.75 + 1.25 + 3 * 0.1)


def test_steps_by_kind_add_up_to_the_naive_loops_time_less_the_replays() -> None:
    naive = replay([_recorded([1, 2, 3])], COSTS)
    assert naive.kinds == {"plain": StepKind(10, 10, 10.0, 0.0, 10.0)}  # a forward a token
    chain = replay([_recorded([1, 2, 3])], COSTS, _baseline("chain", 3))
    spent = 7 * 0.25 + 2 * 1.75 + 1.25 + 3 * 0.1  # as the test above works it
    assert list(chain.kinds) == ["good"] and chain.kinds["good"].steps == 3
    assert chain.kinds["good"].tokens == 10 and chain.kinds["good"].seconds == pytest.approx(spent)
    assert chain.kinds["good"].gained == pytest.approx(10 * 1.0 - spent)
    assert chain.kinds["good"].overhead_seconds == pytest.approx(7 * 0.05 + 3 * 0.1)
    wrong = replay([_recorded([1, 2, 3], top="bad")], COSTS, _baseline("chain", 3))
    lost = wrong.kinds["bad"]  # every step drafted, none of its tokens right
    assert (lost.steps, lost.tokens) == (9, 9) and lost.gained < 0
    assert wrong.kinds["plain"].steps == 1  # the last token: no room to draft
    assert sum(k.gained for k in wrong.kinds.values()) == pytest.approx(
        sum(naive.seconds.values()) - sum(wrong.seconds.values())
    )


def test_a_lookup_step_is_named_by_its_match_length() -> None:
    # The context ends in answer[0] = 10, which the prompt holds once, at its start: a one-token
    # match, whose continuation copies the answer.
    one = replay([_recorded([*ANSWER, 5], top="bad")], COSTS, SCHEDULES["pld"](_SPEC))
    assert list(one.kinds) == ["pld match 1"]
    # A prompt ending in answer[:3] before the answer: the lookup matches 3 tokens from the
    # second step on (the first step's context ends in 9, 10, which the prompt does not hold).
    three = _recorded([9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 0, 9], top="bad")
    run = replay([three], COSTS, SCHEDULES["pld"](_SPEC), lookup=PromptLookupConfig(max_proposal=3))
    assert "pld match 3+" in run.kinds and all(k.startswith("pld match") for k in run.kinds)


def test_a_wrong_chain_commits_one_token_a_step() -> None:
    run = replay([_recorded([1, 2, 3], top="bad")], COSTS, _baseline("chain", 3))
    assert run.steps == 10  # every draft rejected: only the target's own token each step


def test_lookup_or_chain_takes_the_lookup_where_the_prompt_holds_the_answer() -> None:
    rule = _baseline("pld-or-chain", 3, lookup_k=4)
    copied = replay([_recorded([*ANSWER, 5], top="bad")], COSTS, rule)
    assert copied.steps == 2  # the lookup copies the answer: 5 tokens a step, then the rest
    fresh = replay([_recorded([1, 2, 3])], COSTS, rule)
    assert fresh.steps == 3  # nothing to look up: the chain, as above


def test_dytc_learns_the_recorded_drafts_apart() -> None:
    policy = RefinedDyTC(["bad", "good"], DyTCConfig(warmup=2))
    records = [_recorded([1, 2, 3])] * 6
    run = replay(records, COSTS, policy=policy)
    assert run.tokens == {"g": 60}
    assert 60 * 0.3 < run.seconds["g"] < 60 * 1.0  # its own Python time is in, and small
    assert policy.alpha["good"].alpha > 0.9 and policy.alpha["bad"].alpha < 0.3
    # It learned what decoding lets it time: a draft call's forward (not its bookkeeping), a
    # step's verify with the step's overhead (some size seen often enough to have converged).
    assert policy.draft_cost["good"].predict(1) == pytest.approx(0.2)
    with_overhead = {t: COSTS.verify_seconds(t) + COSTS.step_overhead for t in range(1, 33)}
    learned = policy.verify_cost.seconds
    assert any(abs(s - with_overhead[t]) < 1e-3 for t, s in learned.items())
    assert all(s <= with_overhead[t] + 1e-9 for t, s in learned.items())


def test_question_orders_start_with_the_recorded_one_then_seeded_shuffles() -> None:
    records = [Recorded(f"g{i}", [i], ANSWER, {}, ([], [])) for i in range(6)]
    orders = question_orders(records, 4)
    assert len(orders) == 4 and orders[0] == records
    for order in orders[1:]:  # each a permutation of all the questions
        assert sorted(id(r) for r in order) == sorted(id(r) for r in records)
    assert len({tuple(id(r) for r in order) for order in orders}) == 4  # no two alike here
    assert question_orders(records, 4) == orders  # seeded: the same orders every run
    assert question_orders(records, 1) == [records]
    with pytest.raises(ValueError, match="at least 1"):
        question_orders(records, 0)


def _drafter(
    rec: Recorded,
    committed: int,
    recycler: TokenRecycler | None = None,
    max_nodes: int = 32,
    max_depth: int = 16,
) -> ReplayDrafter:
    pld = PromptLookup([*rec.prompt, *rec.answer[:committed]])
    return ReplayDrafter(
        rec, committed, pld, recycler or TokenRecycler(4), COSTS, max_nodes, max_depth
    )


def test_replay_drafter_grows_a_level_chain_with_siblings_and_verifies_it() -> None:
    # The good level's top-3 after answer index i are (answer[i + 1], 0, 1) at (0.9, 0.05, 0.05).
    d = _drafter(_recorded([1, 2, 3]), committed=2)  # root: answer[1] = 11, at index 1
    grown = d.expand(0, "good", 3, 2)
    # Both children of the root first (12, and the runner-up 0), then the chain on: 13, 14.
    assert grown == [(1, 0, 0.9), (3, 1, 0.9), (4, 3, 0.9), (2, 0, 0.05)]
    assert d.tokens == [11, 12, 0, 13, 14] and d.index == [1, 2, 2, 3, 4]
    assert d.primary == [True, True, False, True, True] and d.depth == [0, 1, 1, 2, 3]
    assert d.size() == 5 and not d.is_leaf(0) and d.is_leaf(4) and d.room(4) == 13
    assert d.charged["good"][0] == 3 and d.bookkeeping == pytest.approx(3 * 0.05)
    assert d.seconds() == pytest.approx(0.6)
    assert d.alternatives(4, "good", 2) == [0.9, 0.05]  # after node 4: a fourth forward
    assert d.charged["good"][0] == 4
    # Verified against the answer: the chain is accepted; the runner-up is never tested.
    assert d.verify() == (
        [1, 3, 4],
        [(Outcome("good", "margin", 4), True)] * 3,
    )  # margin 0.9 - 0.05: the top bin
    # The bad level: one rejected chain node, tested once; nothing accepted.
    bad = _drafter(_recorded([1, 2, 3]), committed=2)
    bad.expand(0, "bad", 2, 1)
    assert bad.tokens == [11, 999, 999] and bad.verify() == (
        [],
        [(Outcome("bad", "margin", 4), False)],
    )


def test_replay_drafter_lookup_and_recycled_chains() -> None:
    rec = _recorded([10, 11, 12, 13, 99])  # the prompt holds answer[0..3], then a wrong token
    d = _drafter(rec, committed=1)  # root: 10; lookup proposes 11, 12, 13, 99, 10, ...
    assert d.offers(0, PLD) == 5  # the context after the match: 11, 12, 13, 99, 10
    grown = d.expand(0, PLD, 4, 3)  # a lookup is one chain, whatever the width
    assert d.tokens[1:] == [11, 12, 13, 99]
    assert d.charged == {PLD: (1, LOOKUP)}  # one lookup, its measured seconds, once
    assert [(parent, conf) for _, parent, conf in grown] == [
        (0, None),
        (1, None),
        (2, None),
        (3, None),
    ]
    assert d.verify() == (
        [1, 2, 3],
        [
            (Outcome(PLD, "match", 1), True),
            (Outcome(PLD, "next"), True),
            (Outcome(PLD, "next"), True),
            (Outcome(PLD, "next"), False),
        ],
    )
    recycler = TokenRecycler(4)
    recycler.successors = {10: ([11, 7], [0.6, 0.3]), 11: ([12], [0.8]), 12: ([98], [0.5])}
    r = _drafter(rec, committed=1, recycler=recycler)
    assert r.offers(0, RECYCLE) == 3  # the walk 11, 12, 98 (98 has no successors)
    grown = r.expand(0, RECYCLE, 3, 2)
    assert r.tokens == [10, 11, 7, 12, 98]  # the root's two successors, then the walk on
    assert r.charged == {RECYCLE: (1, COSTS.recycle_overhead)}  # one walk, its own seconds
    assert grown == [(1, 0, 0.6), (3, 1, 0.8), (4, 3, 0.5), (2, 0, 0.3)]
    assert r.alternatives(0, RECYCLE, 2) == [0.6, 0.3]
    assert r.verify() == (
        [1, 3],
        [
            (Outcome(RECYCLE), True),
            (Outcome(RECYCLE, "next"), True),
            (Outcome(RECYCLE, "next"), False),
        ],
    )
    # Without an `offers` first, a lookup of k; a lookup below drafted nodes reads their path
    # (root 10, then 11, 12: the 2-token match "11 12" continues 13, 99).
    k2 = _drafter(rec, committed=1)
    k2.expand(0, PLD, 2, 1)
    assert k2.tokens == [10, 11, 12]
    assert k2.lookup(2, 3) == [13, 99, 10] and k2.lookup(1, 1) == [12]
    # A recycled walk of k (k - 1 after the first child), one child at width 1.
    recycler.successors |= {98: ([97], [0.4]), 97: ([96], [0.4])}
    w1 = _drafter(rec, committed=1, recycler=recycler)
    w1.expand(0, RECYCLE, 2, 1)
    assert w1.tokens == [10, 11, 12]
    # The node budget and the depth limit hold.
    small = _drafter(rec, committed=1, max_nodes=3, max_depth=2)
    small.expand(0, "good", 5, 3)
    assert small.size() == 3 and max(small.depth) <= 2


def test_hindsight_is_the_cheapest_path_worked_by_hand() -> None:
    # Nothing right to draft (the bad level alone, nothing to look up): one forward per token.
    bad = _recorded([1, 2, 3])
    bad.drafts.pop("good")
    assert hindsight(bad, COSTS) == (pytest.approx(10.0), {"plain": 10})
    # The good level: one chain of all 9 tokens before the last (COSTS clamps a forward over more
    # than 5 tokens to 5's cost), 9 calls.
    seconds, kinds = hindsight(_recorded([1, 2, 3]), COSTS)
    assert kinds == {"good": 1} and seconds == pytest.approx(9 * 0.25 + 2.0 + 0.1)
    # The prompt holds the answer: one lookup copies it, no draft call.
    copied = _recorded([*ANSWER, 5])
    copied.drafts.pop("good")
    seconds, kinds = hindsight(copied, COSTS)
    assert kinds == {"pld": 1} and seconds == pytest.approx(LOOKUP + 2.0 + 0.1)
    # The prompt holds the next three (then a wrong one): the lookup's 3, the level's other 6.
    seconds, kinds = hindsight(_recorded([9, 10, 11, 12, 13, 99]), COSTS)
    assert kinds == {"pld+good": 1} and seconds == pytest.approx(LOOKUP + 1.5 + 2.0 + 0.1)


def _one_level(prompt: list[int], answer: list[int], right: list[bool]) -> Recorded:
    """A record with one level, "good" (as COSTS knows it), whose greedy token at answer index i
    is right iff ``right[i]``."""
    ids = [[t if ok else 999, 0, 1] for t, ok in zip(answer, right, strict=True)]
    probs = [[0.9, 0.05, 0.05]] * len(answer)
    target = ([[t] for t in answer], [[1.0]] * len(answer))
    return Recorded("g", prompt, answer, {"good": (ids, probs)}, target)


def test_hindsight_takes_the_shortest_steps_that_pay() -> None:
    wrong = [False] * len(ANSWER)
    # A lookup right for one token, at the first position only (answer tokens never repeat).
    seconds, kinds = hindsight(_one_level([10, 11, 99], ANSWER, wrong), COSTS)
    assert kinds == {"pld": 1, "plain": 8}
    assert seconds == pytest.approx(LOOKUP + 1.25 + 0.1 + 8 * 1.0)
    # A level right at every odd answer index: a one-token chain from each odd position.
    odd = [i % 2 == 1 for i in range(len(ANSWER))]
    assert hindsight(_one_level([1, 2, 3], ANSWER, odd), COSTS) == (
        pytest.approx(5 * (0.25 + 1.25 + 0.1)),
        {"good": 5},
    )
    # The whole answer in the prompt: lookups of 16 tokens (17 committed a step), then one plain.
    long = list(range(100, 136))
    _, kinds = hindsight(_one_level([*long, 5], long, [False] * 36), COSTS)
    assert kinds == {"pld": 2, "plain": 1}


def test_no_fixed_schedule_of_chains_beats_hindsight() -> None:
    costs = Costs({1: 1.0, 2: 1.3, 3: 1.2, 4: 1.9, 5: 1.6, 6: 2.4}, {"good": 0.3, "bad": 0.1})
    half = [t if i % 3 else 999 for i, t in enumerate(ANSWER)]  # a level wrong every third token
    records = [
        _recorded([1, 2, 3]),
        _recorded([*ANSWER[:6], 7, *ANSWER[4:]], top="bad"),  # the lookup is right in places
        Recorded(
            "g",
            [5, *ANSWER[:3]],
            ANSWER,
            {"good": ([[t, 0, 1] for t in half], [[0.5, 0.2, 0.2]] * len(ANSWER))},
            ([[t] for t in ANSWER], [[1.0]] * len(ANSWER)),
        ),
    ]
    for rec in records:
        bound, _ = hindsight(rec, costs)
        top = list(rec.drafts)[-1]
        for method, k in [("chain", 2), ("chain", 4), ("pld-or-chain", 3), ("pld-or-chain", 5)]:
            spec = ScheduleSpec(list(rec.drafts), 0, options=ScheduleOptions(chain_k=k, lookup_k=k))
            run = replay([rec], costs, SCHEDULES[method](spec))
            assert bound <= run.seconds["g"] + 1e-12, (method, k, top)
        for k in (2, 3, 5, 8):
            pld = replay(
                [rec],
                costs,
                SCHEDULES["pld"](ScheduleSpec(list(rec.drafts), 0)),
                lookup=PromptLookupConfig(max_proposal=k),
            )
            assert bound <= pld.seconds["g"] + 1e-12, k
        assert bound <= replay([rec], costs).seconds["g"]


def test_record_reads_each_level_as_a_draft_reads_it_in_decoding() -> None:
    model = random_init_(Transformer(tiny_llama(vocab_size=32)).to(torch.float64), seed=3)
    prompt = [3, 5, 7, 9]
    answer = list(generate_ar(model, prompt, 8).tokens)
    target = ExecutionPlan(name="same")  # the identity plan: a draft that is the target
    skip = ExecutionPlan(skip_mlp=frozenset({1}), name="skip")
    rec = record(model, prompt, answer, [target, skip])
    assert [row[0] for row in rec.drafts["same"][0]] == answer  # row i predicts answer[i]
    assert [row[0] for row in rec.target[0]] == answer
    # Row r of the skip level is that plan's forward over token P + r - 1 alone, on the target's
    # K/V of the tokens before it (what a draft's first forward of a step reads).
    tokens = prompt + answer
    for r in (0, 3, 7):
        cache = KVCache(model.config, 32, torch.float64)
        with torch.no_grad():
            model.forward(torch.tensor([tokens[: len(prompt) + r - 1]]), cache=cache)
            fed = torch.tensor([[tokens[len(prompt) + r - 1]]])
            logits = model.forward(fed, cache=cache, plan=skip)[0, -1]
        assert rec.drafts["skip"][0][r][0] == int(logits.argmax())
        probs = torch.softmax(logits, -1)
        assert rec.drafts["skip"][1][r][0] == pytest.approx(float(probs.max()), abs=1e-5)
    with pytest.raises(ValueError, match="greedy continuation"):
        record(model, prompt, [(t + 1) % 32 for t in answer], [skip])
