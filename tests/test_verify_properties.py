"""Property tests: the verifier is lossless on random trees, laws and sampling settings.

Each property runs one speculative step (drafting from toy draft models, then `verify_tree`)
under the exact-law oracle, finishes with plain AR sampling up to depth + 1 tokens, and compares
the exact law of the emitted tokens with the law of plain AR sampling from the target, computed
by direct recursion (casspec_ref.proof.harness.ar_law, a different code path). With `Fraction`
laws the two must be *equal*; in float64 within 1e-12 total variation.

Scenarios: vocabularies of 2 to 8 tokens; context-dependent target and draft models given by a
palette of 1 to 3 laws (random integer weights with zeros, one-hots); drafts equal to the target
(p = q) or with a support disjoint from it; trees of depth <= 3 and branching <= 3 with mixed
child rules and draft levels (grown within a budget of enumerated paths, PATH_BUDGET, so that
exact enumeration stays fast); stop tokens and length limits. Profiles: see tests/conftest.py.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from casspec_ref.proof import (
    ChildSpec,
    DraftSpec,
    ToyLM,
    ar_law,
    casspec_tree_verifier,
    draft_tree,
    exact_law,
    spec_depth,
    speculative_tokens,
    total_variation,
)
from casspec_ref.sampling import TorchRandomSource
from casspec_ref.tree import ChildRule
from casspec_ref.verify import verify_tree

IND, WOR, DET = ChildRule.INDEPENDENT, ChildRule.WITHOUT_REPLACEMENT, ChildRule.DETERMINISTIC


@dataclass(frozen=True)
class Scenario:
    """Everything one property example needs, as plain data (so it can be pinned)."""

    vocab: int
    target: tuple[tuple[int, ...], ...]  # integer weights of the target's palette of laws
    drafts: tuple[tuple[tuple[int, ...], ...] | None, ...]  # None: the target itself (p = q)
    spec: DraftSpec
    stop_ids: tuple[int, ...] = ()
    max_accept: int | None = None
    salt: int = 0

    def models(self, exact: bool) -> tuple[ToyLM, list[ToyLM]]:
        def lm(palette: tuple[tuple[int, ...], ...], salt: int) -> ToyLM:
            laws = []
            for weights in palette:
                total = sum(weights)
                if exact:
                    laws.append(np.array([Fraction(w, total) for w in weights], dtype=object))
                else:
                    laws.append(np.array([w / total for w in weights], dtype=np.float64))
            return ToyLM(laws, salt=salt)

        target = lm(self.target, self.salt)
        drafts = [
            target if d is None else lm(d, self.salt + 1 + i) for i, d in enumerate(self.drafts)
        ]
        return target, drafts


def _weights(draw: st.DrawFn, vocab: int, allowed: list[int]) -> tuple[int, ...]:
    kind = draw(st.sampled_from(["random", "random", "random", "one_hot", "uniform"]))
    if kind == "one_hot":
        hot = draw(st.sampled_from(allowed))
        return tuple(int(i == hot) for i in range(vocab))
    if kind == "uniform":
        return tuple(int(i in allowed) for i in range(vocab))
    values = draw(st.lists(st.integers(0, 4), min_size=vocab, max_size=vocab))
    weights = [v if i in allowed else 0 for i, v in enumerate(values)]
    if sum(weights) == 0:
        weights[allowed[0]] = 1
    return tuple(weights)


#: Exact enumeration explores about (2V) paths per sampled node (its draw, then accept/reject), 2
#: per deterministic node and V per AR token after the step; trees are grown only while that
#: estimate stays below this bound, so that one example takes well under a second.
PATH_BUDGET = 50_000


def _spec(draw: st.DrawFn, vocab: int, n_drafts: int) -> DraftSpec:
    """A random tree shape (depth <= 3, branching <= 3) within PATH_BUDGET."""
    state = {"paths": 1, "depth": 0}

    def affordable(branch: int, level: int) -> bool:
        depth = max(level, state["depth"])
        return state["paths"] * branch * vocab ** (depth + 1) <= PATH_BUDGET

    def grow(level: int) -> DraftSpec | None:
        rule = draw(st.sampled_from([IND, WOR, DET]))
        branch = 2 if rule is DET else 2 * vocab
        children = []
        for _ in range(draw(st.integers(1, 3))):
            # The root's first child is always added, whatever the budget.
            if (children or level > 1) and not affordable(branch, level):
                break
            state["paths"] *= branch
            state["depth"] = max(state["depth"], level)
            token = draw(st.none() | st.integers(0, vocab - 1)) if rule is DET else None
            then = grow(level + 1) if level < 3 and draw(st.booleans()) else None
            children.append(
                ChildSpec(
                    draft=draw(st.integers(0, n_drafts - 1)),
                    rank=draw(st.integers(0, vocab - 1)),
                    token=token,
                    then=then,
                )
            )
        return DraftSpec(rule, tuple(children)) if children else None

    spec = grow(1)
    assert spec is not None  # the root always gets its first child
    return spec


@st.composite
def scenarios(draw: st.DrawFn, limits: bool = True) -> Scenario:
    vocab = draw(st.integers(2, 8))
    everything = list(range(vocab))
    disjoint = draw(st.booleans())
    if disjoint:
        support = draw(st.lists(st.sampled_from(everything), min_size=1, max_size=vocab - 1))
        target_support = sorted(set(support))
        draft_support = [t for t in everything if t not in target_support]
    else:
        target_support = draft_support = everything
    target = tuple(_weights(draw, vocab, target_support) for _ in range(draw(st.integers(1, 3))))
    n_drafts = draw(st.integers(1, 2))
    drafts = []
    for _ in range(n_drafts):
        if not disjoint and draw(st.booleans()):
            drafts.append(None)
        else:
            size = draw(st.integers(1, 2))
            drafts.append(tuple(_weights(draw, vocab, draft_support) for _ in range(size)))
    spec = _spec(draw, vocab, n_drafts)
    stop_ids: tuple[int, ...] = ()
    max_accept = None
    if limits:
        stop_ids = tuple(draw(st.lists(st.integers(0, vocab - 1), max_size=1)))
        max_accept = draw(st.none() | st.integers(0, 3))
    return Scenario(
        vocab=vocab,
        target=target,
        drafts=tuple(drafts),
        spec=spec,
        stop_ids=stop_ids,
        max_accept=max_accept,
        salt=draw(st.integers(0, 50)),
    )


def step_and_ar_laws(scenario: Scenario, exact: bool) -> tuple[dict, dict]:
    target, drafts = scenario.models(exact)
    n = spec_depth(scenario.spec) + 1
    context = (0,)
    step = functools.partial(
        speculative_tokens,
        target=target,
        drafts=drafts,
        spec=scenario.spec,
        context=context,
        n=n,
        verifier=casspec_tree_verifier(scenario.stop_ids, scenario.max_accept),
        stop_ids=scenario.stop_ids,
    )
    got = exact_law(step, exact=exact)
    want = ar_law(target, context, n, stop_ids=scenario.stop_ids, exact=exact)
    return got, want


# Pinned examples: the counterexamples Hypothesis found, then the cases that matter most (each
# fails under one of the mutants in tests/test_mutants.py).

# Found by Hypothesis: the last WITHOUT_REPLACEMENT child exhausts q's support. A verifier that
# computes the (empty) conditional law for a sibling that does not exist raises here.
FOUND_WOR_EXHAUSTED = Scenario(
    vocab=2,
    target=((0, 1),),
    drafts=(((1, 0),),),
    spec=DraftSpec(WOR, (ChildSpec(),)),
)
# Two children drawn without replacement: the unconditional-q mutant errs by only 1.6e-3 here.
WOR_SUBTLE = Scenario(
    vocab=4,
    target=((5, 6, 6, 7),),
    drafts=(((5, 5, 8, 6),),),
    spec=DraftSpec(WOR, (ChildSpec(), ChildSpec())),
)
DUPLICATE_DETERMINISTIC = Scenario(
    vocab=3,
    target=((1, 1, 2), (0, 1, 3)),
    drafts=(None,),
    spec=DraftSpec(DET, (ChildSpec(token=1), ChildSpec(token=1), ChildSpec(rank=0))),
)
MIXED_TREE = Scenario(
    vocab=3,
    target=((1, 2, 1), (3, 0, 1), (0, 0, 1)),
    drafts=(None, ((1, 1, 1), (0, 2, 1))),
    spec=DraftSpec(
        IND,
        (
            ChildSpec(draft=1, then=DraftSpec(DET, (ChildSpec(rank=0), ChildSpec(rank=1)))),
            ChildSpec(draft=0, then=DraftSpec(WOR, (ChildSpec(draft=1), ChildSpec(draft=1)))),
        ),
    ),
    stop_ids=(2,),
    max_accept=1,
)
DISJOINT = Scenario(
    vocab=4,
    target=((1, 0, 3, 0),),
    drafts=(((0, 1, 0, 1),),),
    spec=DraftSpec(IND, (ChildSpec(then=DraftSpec(IND, (ChildSpec(),))),)),
)


# Three siblings drawn without replacement: the third is tested with q without both others
# (forgetting the first sibling there errs by 4.6e-2 in total variation).
THREE_WOR = Scenario(
    vocab=4,
    target=((3, 5, 1, 5),),
    drafts=(((6, 3, 6, 1),),),
    spec=DraftSpec(WOR, (ChildSpec(), ChildSpec(), ChildSpec())),
)
# The scenarios of the mutation battery (tests/test_mutants.py), pinned here as well.
CHAIN2 = Scenario(
    vocab=3,
    target=((2, 1, 1), (1, 3, 0), (1, 1, 1)),
    drafts=(((1, 2, 1), (2, 0, 1)),),
    spec=DraftSpec(IND, (ChildSpec(then=DraftSpec(IND, (ChildSpec(),))),)),
)
TWO_DRAFT_LEVELS = Scenario(
    vocab=3,
    target=((3, 1, 2), (0, 1, 1)),
    drafts=(((1, 1, 1),), ((2, 1, 0),)),
    spec=DraftSpec(IND, (ChildSpec(draft=0), ChildSpec(draft=1))),
)
DET_TOP2 = Scenario(
    vocab=4,
    target=((1, 2, 3, 2), (4, 1, 0, 1)),
    drafts=(((1, 1, 3, 1),),),
    spec=DraftSpec(DET, (ChildSpec(rank=0), ChildSpec(rank=1))),
)


@given(scenario=scenarios())
@example(scenario=FOUND_WOR_EXHAUSTED)
@example(scenario=WOR_SUBTLE)
@example(scenario=DUPLICATE_DETERMINISTIC)
@example(scenario=MIXED_TREE)
@example(scenario=DISJOINT)
@example(scenario=THREE_WOR)
@example(scenario=CHAIN2)
@example(scenario=TWO_DRAFT_LEVELS)
@example(scenario=DET_TOP2)
def test_tree_verification_is_exactly_lossless(scenario):
    got, want = step_and_ar_laws(scenario, exact=True)
    assert sum(got.values()) == 1
    assert got == want


@given(scenario=scenarios())
@example(scenario=WOR_SUBTLE)
@example(scenario=MIXED_TREE)
@example(scenario=THREE_WOR)
@example(scenario=CHAIN2)
@example(scenario=TWO_DRAFT_LEVELS)
@example(scenario=DET_TOP2)
def test_tree_verification_is_lossless_in_float64(scenario):
    got, want = step_and_ar_laws(scenario, exact=False)
    assert total_variation(got, want) < 1e-12


finite_logits = st.floats(-3, 3, allow_nan=False, allow_infinity=False)


@st.composite
def transformed_models(draw: st.DrawFn) -> tuple[ToyLM, list[ToyLM], DraftSpec]:
    vocab = draw(st.integers(2, 6))

    def logits_palette() -> list[np.ndarray]:
        palette = []
        for _ in range(draw(st.integers(1, 3))):
            row = np.array(draw(st.lists(finite_logits, min_size=vocab, max_size=vocab)))
            masked = draw(st.lists(st.integers(0, vocab - 1), max_size=vocab - 1))
            row[masked] = -np.inf
            if np.isneginf(row).all():
                row[0] = 0.0
            palette.append(row)
        return palette

    def settings() -> tuple[float, int, float]:
        temperature = draw(st.sampled_from([0.0, 0.5, 1.0, 1.5]))
        top_k = draw(st.integers(0, vocab))
        top_p = draw(st.sampled_from([1.0, 0.9, 0.6, 0.3]))
        return temperature, top_k, top_p

    target = ToyLM.from_logits(logits_palette(), *settings(), salt=draw(st.integers(0, 9)))
    drafts = [target] if draw(st.booleans()) else []
    drafts.append(ToyLM.from_logits(logits_palette(), *settings(), salt=draw(st.integers(0, 9))))
    spec = _spec(draw, vocab, len(drafts))
    return target, drafts, spec


@given(models=transformed_models())
def test_verification_is_lossless_under_temperature_top_k_top_p(models):
    """Both laws processed by casspec_ref.sampling.target_law; q is the processed draft law."""
    target, drafts, spec = models
    n = spec_depth(spec) + 1
    step = functools.partial(
        speculative_tokens, target=target, drafts=drafts, spec=spec, context=(0,), n=n
    )
    got = exact_law(step)
    assert total_variation(got, ar_law(target, (0,), n)) < 1e-12


@given(models=transformed_models())
def test_greedy_emits_exactly_the_argmax_tokens(models):
    """At temperature 0 the step is a point mass on the greedy AR continuation."""
    target, drafts, spec = models
    greedy = ToyLM([np.eye(target.vocab_size)[int(np.argmax(p))] for p in target.laws], target.salt)
    n = spec_depth(spec) + 1
    step = functools.partial(
        speculative_tokens, target=greedy, drafts=drafts, spec=spec, context=(0,), n=n
    )
    expected: tuple[int, ...] = ()
    for _ in range(n):
        expected += (int(np.argmax(greedy.law((0, *expected)))),)
    got = exact_law(step)
    assert list(got) == [expected]
    # And with a real random source: the same tokens for every seed.
    for seed in range(3):
        assert step(TorchRandomSource(seed)) == expected


@given(scenario=scenarios(limits=False), seed=st.integers(0, 2**16))
def test_verification_never_modifies_the_callers_laws(scenario, seed):
    target, drafts = scenario.models(exact=False)
    rng = TorchRandomSource(seed)
    tree, contexts = draft_tree(scenario.spec, (0,), drafts, rng)
    laws = [target.law(c) for c in contexts]
    before_p = [law.copy() for law in laws]
    before_q = [
        None if tree.draft_probs(i) is None else tree.draft_probs(i).copy()
        for i in range(len(tree))
    ]
    verify_tree(tree, laws, rng)
    assert all(np.array_equal(a, b) for a, b in zip(before_p, laws, strict=True))
    for i in range(len(tree)):
        if before_q[i] is not None:
            assert np.array_equal(before_q[i], tree.draft_probs(i))


@st.composite
def sibling_scenarios(draw: st.DrawFn) -> Scenario:
    """Focused: 2-3 sampled siblings under one node, random laws with zeros (rules 2 and 3)."""
    vocab = draw(st.integers(3, 5))
    weights = st.lists(st.integers(0, 6), min_size=vocab, max_size=vocab).filter(any)
    rule = draw(st.sampled_from([WOR, IND]))
    n_children = draw(st.integers(2, 3))
    children = tuple(ChildSpec(draft=draw(st.integers(0, 1))) for _ in range(n_children))
    return Scenario(
        vocab=vocab,
        target=(tuple(draw(weights)),),
        drafts=((tuple(draw(weights)),), (tuple(draw(weights)),)),
        spec=DraftSpec(rule, children),
    )


@given(scenario=sibling_scenarios())
@example(scenario=WOR_SUBTLE)
@example(scenario=THREE_WOR)
@example(scenario=TWO_DRAFT_LEVELS)
def test_sibling_rules_are_exactly_lossless(scenario):
    got, want = step_and_ar_laws(scenario, exact=True)
    assert got == want
