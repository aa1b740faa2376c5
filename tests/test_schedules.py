"""Draft schedules: tree shapes, declared child rules and laws, lookup, the independence of the
tree from the verifier's coins, and option validation."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
import torch

from casspec_ref.base.random_weights import random_init_
from casspec_ref.baselines import ScheduleOptions
from casspec_ref.config import tiny_llama
from casspec_ref.draft import DraftSampling, StepDrafter
from casspec_ref.dsia.prompt_lookup import PromptLookup
from casspec_ref.dsia.virtual_draft import DraftRunner
from casspec_ref.dytc_config import PLD, RECYCLE, DyTCConfig
from casspec_ref.dytc_estimates import Outcome
from casspec_ref.dytc_refinements import outcome
from casspec_ref.kv_cache import KVCache
from casspec_ref.model import Transformer
from casspec_ref.plan import ExecutionPlan
from casspec_ref.sampling import TorchRandomSource, target_law
from casspec_ref.schedules import SCHEDULES, ScheduleSpec
from casspec_ref.speculative import generate_speculative
from casspec_ref.tree import ChildRule

LEVELS = {
    "exit": ExecutionPlan(exit_after=2, name="exit"),
    "skip": ExecutionPlan(skip_mlp=frozenset({2}), name="skip"),
}
CONTEXT = [3, 5, 7, 9, 3, 5, 7, 11, 3, 5]


def _model() -> Transformer:
    return random_init_(
        Transformer(tiny_llama(vocab_size=32, max_seq_len=128)).to(torch.float64), seed=4
    )


def _drafter(
    model: Transformer, sampling: DraftSampling, seed: int = 0
) -> tuple[StepDrafter, KVCache]:
    cache = KVCache(model.config, 128, torch.float64)
    with torch.no_grad():
        model.forward(torch.tensor([CONTEXT[:-1]]), None, cache=cache)
    drafter = StepDrafter(
        CONTEXT[-1],
        CONTEXT,
        DraftRunner(model, cache),
        PromptLookup(CONTEXT),
        LEVELS,
        sampling,
        TorchRandomSource(seed),
        max_nodes=64,
        max_depth=16,
    )
    return drafter, cache


def test_lookup_below_the_root_uses_the_one_prompt_lookup() -> None:
    """A node's proposal is the prompt lookup of the committed context plus the path to it."""
    model = _model()
    drafter, _ = _drafter(model, DraftSampling())
    node = drafter.add_chain(0, [3, 5], "pld")[-1]
    want = PromptLookup(CONTEXT + [3, 5]).propose(4)
    assert want and drafter.lookup(node, 4) == want


def test_static_tree_shape_and_greedy_rules() -> None:
    model = _model()
    drafter, cache = _drafter(model, DraftSampling())
    options = ScheduleOptions(static_branching=(2, 2, 1))
    SCHEDULES["static-tree"](ScheduleSpec(list(LEVELS), 3, options=options)).build(drafter)
    tree = drafter.tree
    assert len(tree) == 1 + 2 + 4 + 4
    assert tree.max_depth == 3
    for node in range(len(tree)):
        if tree.children(node):
            assert tree.child_rule(node) is ChildRule.DETERMINISTIC
    # Greedy: the first child of every node is the draft's argmax along that path.
    for node in range(len(tree)):
        kids = tree.children(node)
        if kids:
            logits = drafter.runner.logits(LEVELS["skip"], drafter.path_tokens(node))[-1]  # type: ignore[union-attr]
            assert tree.token(kids[0]) == int(logits.argmax())
    drafter.runner.release()  # type: ignore[union-attr]
    assert cache.length == len(CONTEXT) - 1


def test_sampled_children_declare_the_processed_law_they_were_drawn_from() -> None:
    model = _model()
    sampling = DraftSampling(temperature=0.7, top_k=5, top_p=0.9)
    drafter, _ = _drafter(model, sampling)
    options = ScheduleOptions(static_branching=(3, 1))
    SCHEDULES["static-tree"](ScheduleSpec(list(LEVELS), 3, options=options)).build(drafter)
    tree = drafter.tree
    assert tree.child_rule(0) is ChildRule.WITHOUT_REPLACEMENT
    for node in range(1, len(tree)):
        parent = tree.parent(node)
        logits = drafter.runner.logits(LEVELS["skip"], drafter.path_tokens(parent))[-1]  # type: ignore[union-attr]
        q = target_law(logits, 0.7, 5, 0.9).numpy()
        law = tree.draft_probs(node)
        assert law is not None
        np.testing.assert_array_equal(law, q)  # exactly the processed law, not the raw softmax
        assert q[tree.token(node)] > 0
    first = tree.children(0)
    assert len({tree.token(c) for c in first}) == len(first)  # without replacement


@pytest.mark.parametrize("method", ["chain", "vc", "hc", "vchc"])
def test_chain_methods_draft_chain_k_tokens(method: str) -> None:
    model = _model()
    drafter, _ = _drafter(model, DraftSampling())
    options = ScheduleOptions(chain_k=5)
    SCHEDULES[method](ScheduleSpec(list(LEVELS), 3, options=options)).build(drafter)
    tree = drafter.tree
    assert tree.max_depth == 5 and len(tree) == 6  # a chain
    sources = {info.source for info in drafter.info[1:]}
    if method == "hc":
        assert sources == {"skip", "exit"}  # upper level first, cheapest later
        assert drafter.info[1].source == "skip" and drafter.info[-1].source == "exit"


def test_pld_or_chain_takes_the_lookup_when_it_has_one_else_drafts_a_chain() -> None:
    model = _model()
    options = ScheduleOptions(chain_k=3, lookup_k=2)
    drafter, _ = _drafter(model, DraftSampling())
    SCHEDULES["pld-or-chain"](ScheduleSpec(list(LEVELS), 3, options=options)).build(drafter)
    want = PromptLookup(CONTEXT).propose(2)
    assert want and drafter.tree.tokens[1:] == want  # lookup_k tokens of the lookup, no forward
    assert {i.source for i in drafter.info[1:]} == {"pld"} and drafter.runner.forwards == 0  # type: ignore[union-attr]
    context = [3, 5, 7, 9, 11]  # no token repeats: the lookup has nothing
    cache = KVCache(model.config, 128, torch.float64)
    with torch.no_grad():
        model.forward(torch.tensor([context[:-1]]), None, cache=cache)
    drafter = StepDrafter(
        context[-1],
        context,
        DraftRunner(model, cache),
        PromptLookup(context),
        LEVELS,
        DraftSampling(),
        TorchRandomSource(0),
        max_nodes=64,
        max_depth=16,
    )
    SCHEDULES["pld-or-chain"](ScheduleSpec(list(LEVELS), 3, options=options)).build(drafter)
    assert drafter.tree.max_depth == 3 and len(drafter.tree) == 4  # a chain of chain_k
    assert {i.source for i in drafter.info[1:]} == {"skip"}  # the most accurate level


def test_pld_only_uses_no_model() -> None:
    drafter = StepDrafter(
        CONTEXT[-1],
        CONTEXT,
        None,
        PromptLookup(CONTEXT),
        {},
        DraftSampling(),
        TorchRandomSource(0),
        max_nodes=64,
        max_depth=16,
    )
    SCHEDULES["pld"](ScheduleSpec([], 3)).build(drafter)
    assert drafter.tree.tokens[1:] == PromptLookup(CONTEXT).propose(10)


def test_tree_never_depends_on_the_verifier_coins() -> None:
    """In every step, every draft draw happens before the first verifier draw: a recording
    random source sees the drafting and verifying phases strictly in that order."""
    events: list[str] = []

    class Recording(TorchRandomSource):
        def bernoulli(self, prob):  # type: ignore[no-untyped-def]
            events.append("verify")
            return super().bernoulli(prob)

        def categorical(self, probs):  # type: ignore[no-untyped-def]
            import inspect

            # Who drew, by module (not by function name, which a mutation tool may rename).
            frame = inspect.stack()[1]
            module = frame.filename.replace("\\", "/").rsplit("/", 1)[-1]
            events.append("verify" if module == "verify.py" else f"draw:{frame.function}")
            return super().categorical(probs)

    model = _model()
    generate_speculative(
        model,
        CONTEXT,
        20,
        method="static-tree",
        temperature=1.0,
        rng=Recording(3),
        drafts=tuple(LEVELS.values()),
        on_step=lambda t: events.append("step"),
    )
    steps = " ".join(events).split("step")
    assert len(steps) > 3
    drafted = 0
    for segment in steps:
        kinds = segment.split()
        if "verify" in kinds:
            first_verify = kinds.index("verify")
            assert all(k == "verify" for k in kinds[first_verify:]), kinds
        drafted += sum(1 for k in kinds if k.startswith("draw:") and "propose_children" in k)
    assert drafted > 0


def test_option_and_method_errors() -> None:
    with pytest.raises(ValueError, match="chain_k"):
        ScheduleOptions(chain_k=0)
    with pytest.raises(ValueError, match="swift_threshold"):
        ScheduleOptions(swift_threshold=1.5)
    with pytest.raises(ValueError, match="unknown method"):
        generate_speculative(_model(), [1], 4, method="medusa")
    with pytest.raises(ValueError, match="needs at least one model draft"):
        SCHEDULES["static-tree"](ScheduleSpec([], 3))


def test_dytc_learns_a_lookup_chain_continuing_apart_from_its_first_token() -> None:
    """Prompt lookup's first token is a guess, the next ones extend a match: a verified chain
    teaches `pld` by its first node and its continuation rate by the nodes below it; a model
    draft's chain teaches its one estimate."""
    model = _model()
    drafter, _ = _drafter(model, DraftSampling())
    first, second, third = drafter.add_chain(0, [3, 5, 7], "pld")
    drafter.add_chain(0, [9], "skip")  # a sibling of another draft, rejected
    schedule = SCHEDULES["cas-spec"](ScheduleSpec(list(LEVELS), model.config.n_layers))
    policy = schedule.policy
    schedule.observe(drafter, [first, second], 0.01)  # the third lookup token is rejected
    assert (policy.alpha[PLD].count, policy.alpha[PLD].accepted) == (1, 1.0)
    assert (
        policy.estimate(Outcome(PLD, "next")).count,
        policy.estimate(Outcome(PLD, "next")).accepted,
    ) == (2, 1.0)
    assert policy.alpha["skip"].count == 1 and policy.estimate(Outcome(RECYCLE, "next")).count == 0


def test_dytc_learns_a_lookups_first_token_by_its_match_length() -> None:
    """A lookup DyTC drafted (the context's suffix 3, 5 matched on 2 tokens) teaches the
    estimate of 2-token matches and the pooled ``pld`` by its first node, the continuation's by
    the next ones."""
    model = _model()
    drafter, _ = _drafter(model, DraftSampling())
    assert drafter.offers(0, "pld") == 4 and drafter.match(0) == 2
    first, second, _, _ = [node for node, _, _ in drafter.expand(0, "pld", 4, 1)]
    schedule = SCHEDULES["cas-spec"](ScheduleSpec(list(LEVELS), model.config.n_layers))
    policy = schedule.policy
    schedule.observe(drafter, [first, second], 0.01)  # the third lookup token is rejected
    assert (
        policy.estimate(Outcome(PLD, "match", 2)).count,
        policy.estimate(Outcome(PLD, "match", 2)).accepted,
    ) == (1, 1.0)
    assert (policy.alpha[PLD].count, policy.estimate(Outcome(PLD, "next")).count) == (1, 2)
    assert (
        policy.estimate(Outcome(PLD, "match", 1)).count
        == policy.estimate(Outcome(PLD, "match", 3)).count
        == 0
    )


def test_dytc_learns_a_model_drafted_token_by_its_margin() -> None:
    """A model chain DyTC drafted teaches each token's margin bin (the drafter's margin, binned
    by `outcome`) and the draft's pooled estimate; a sibling teaches neither."""
    model = _model()
    drafter, _ = _drafter(model, DraftSampling())
    grown = drafter.expand(0, "skip", 2, 2)  # a chain of 2 and one sibling of its first token
    (first, _, _), (second, _, _), (sibling, _, _) = grown
    names = [outcome(DyTCConfig(), "skip", "x", 0, drafter.margin(n)) for n in (first, second)]
    assert drafter.margin(sibling) is None
    assert all(n.draft == "skip" and n.kind == "margin" for n in names)
    schedule = SCHEDULES["cas-spec"](ScheduleSpec(list(LEVELS), model.config.n_layers))
    policy = schedule.policy
    schedule.observe(drafter, [first], 0.01)  # the second chain token is rejected
    bins = {key: e.count for key, e in policy.refined.items() if key.kind == "margin" and e.count}
    assert bins == dict(Counter(names))
    assert policy.alpha["skip"].count == 2 and policy.alpha["skip"].accepted == 1.0
    assert policy.margins_known("skip") and not policy.margins_known("exit")
