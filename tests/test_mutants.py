"""Mutation controls: the exact-law checks must catch every known way to break a verifier.

Each mutant is a deliberately broken verifier (docs/method.md §6 lists where these bugs shipped).
The same check as tests/test_verify_properties.py (exact law of one speculative step, then AR,
against the law of plain AR sampling) runs on a fixed battery of scenarios; a mutant is caught
when some scenario shows a total variation above 1e-9. A control runs the unbroken variant of the
same mutant code and the real `verify_tree` through the same battery and must show none.

Mutants of the node rules run through `mutant_verifier`, a compact restatement of the rules with
one bug switched on (the ``"none"`` switch is the control). Mutants of the surrounding loop (raw
logits, greedy drafting) wrap the real `verify_tree`.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from fractions import Fraction

import numpy as np
import pytest
from test_verify_properties import (
    CHAIN2,
    DET_TOP2,
    DISJOINT,
    DUPLICATE_DETERMINISTIC,
    MIXED_TREE,
    THREE_WOR,
    TWO_DRAFT_LEVELS,
    WOR_SUBTLE,
)

from casspec_ref.proof import (
    ChildSpec,
    DraftSpec,
    ToyLM,
    TreeVerifier,
    ar_law,
    casspec_tree_verifier,
    check_verifier,
    exact_law,
    raw_bonus_replica,
    spec_depth,
    speculative_tokens,
    total_variation,
)
from casspec_ref.sampling import RandomSource
from casspec_ref.tree import ChildRule, DraftTree
from casspec_ref.verify import verify_tree

IND, WOR, DET = ChildRule.INDEPENDENT, ChildRule.WITHOUT_REPLACEMENT, ChildRule.DETERMINISTIC
CAUGHT = 1e-9


class SharedUniform:
    """One uniform u reused for several decisions, modelled exactly through a `RandomSource`.

    It keeps the interval [lo, hi) that u is known to lie in; a test ``u < x`` or an inverse-CDF
    draw is a decision with the conditional probability of u's position, so the enumerating
    source still gives the exact law of a verifier that (wrongly) reuses its coin.
    """

    def __init__(self, rng: RandomSource) -> None:
        self.rng = rng
        self.lo: Fraction | float = 0
        self.hi: Fraction | float = 1

    def less_than(self, x: Fraction | float) -> bool:
        width = self.hi - self.lo
        prob = min(max((x - self.lo) / width, 0), 1)
        if self.rng.bernoulli(prob):
            self.hi = min(self.hi, x)
            return True
        self.lo = max(self.lo, x)
        return False

    def categorical(self, weights: np.ndarray) -> int:
        total = weights.sum()
        cumulative = np.cumsum(weights) / total  # (V,)
        starts = np.concatenate([[0], cumulative[:-1]])  # (V,)
        overlap = [
            max(min(self.hi, c) - max(self.lo, s), 0)
            for s, c in zip(starts, cumulative, strict=True)
        ]
        width = self.hi - self.lo
        token = int(self.rng.categorical(np.array([o / width for o in overlap], dtype=object)))
        self.lo, self.hi = max(self.lo, starts[token]), min(self.hi, cumulative[token])
        return token


def _zero_like(law: np.ndarray):
    return Fraction(0) if law.dtype == object else 0.0


def _normalized(law: np.ndarray) -> np.ndarray:
    mass = law.sum()
    return law / mass if mass > 0 else law


def mutant_verifier(bug: str) -> TreeVerifier:
    """The node rules of docs/method.md §5 with one bug switched on ("none": no bug)."""

    def verify(tree: DraftTree, laws: list[np.ndarray], rng: RandomSource) -> list[int]:
        node, emitted = 0, []
        while True:
            residual = laws[node]
            coin = SharedUniform(rng) if bug == "reused_coin" else None
            rule = tree.child_rule(node)
            removed: list[int] = []
            chosen = None
            for child in tree.children(node):
                token = tree.token(child)
                if rule is DET:
                    draft = np.array([_zero_like(residual)] * len(residual), dtype=residual.dtype)
                    draft[token] = 1
                elif rule is WOR and bug != "unconditional_q":
                    draft = tree.draft_probs(child).copy()
                    # The "wor_last_sibling_only" bug forgets all but the latest earlier sibling.
                    earlier_siblings = removed[-1:] if bug == "wor_last_sibling_only" else removed
                    for earlier in earlier_siblings:
                        draft[earlier] = 0
                    draft = _normalized(draft)
                else:
                    draft = tree.draft_probs(child)
                prob = min(residual[token] / draft[token], 1) if draft[token] > 0 else 0
                if bug == "always_accept":
                    accept = True
                elif coin is not None:
                    accept = coin.less_than(prob)
                else:
                    accept = rng.bernoulli(prob)
                if accept:
                    chosen = child
                    break
                removed.append(token)
                excess = np.where(residual - draft > 0, residual - draft, _zero_like(residual))
                if bug == "residual_is_p":
                    residual = laws[node]
                elif bug == "unnormalized_residual":
                    residual = excess
                elif bug == "rejected_deterministic_kept" and rule is DET:
                    pass
                elif bug == "in_place":
                    residual -= draft  # the caller's array is overwritten
                    residual[residual < 0] = 0
                    residual /= residual.sum()
                else:
                    residual = _normalized(excess) if excess.sum() > 0 else residual
            if chosen is None:
                draw = coin.categorical if coin is not None else rng.categorical
                return [*emitted, int(draw(residual))]
            emitted.append(tree.token(chosen))
            node = chosen

    return verify


def _context_of(tree: DraftTree, node: int, context: tuple[int, ...]) -> tuple[int, ...]:
    return (*context, *(tree.token(i) for i in tree.path_to(node)))


def raw_draft_q_verifier(draft: ToyLM, context: tuple[int, ...]) -> TreeVerifier:
    """transformers #47932: q from the raw logits while drafts came from processed ones."""

    def verify(tree: DraftTree, laws: list[np.ndarray], rng: RandomSource) -> list[int]:
        relabelled = DraftTree(tree.token(0))
        for i in range(1, len(tree)):
            parent = tree.parent(i)
            raw = draft.raw_law(_context_of(tree, parent, context))
            relabelled.add_child(parent, tree.token(i), IND, raw)
        return verify_tree(relabelled, laws, rng).emitted

    return verify


def raw_bonus_verifier(target: ToyLM, context: tuple[int, ...]) -> TreeVerifier:
    """SWIFT / a vendored EAGLE-2: the bonus token from the raw (unprocessed) target logits."""

    def verify(tree: DraftTree, laws: list[np.ndarray], rng: RandomSource) -> list[int]:
        result = verify_tree(tree, laws, rng)
        if result.accepted and not tree.children(result.accepted[-1]):
            at = _context_of(tree, result.accepted[-1], context)
            return [*result.accepted_tokens, int(rng.categorical(target.raw_law(at)))]
        return result.emitted

    return verify


def greedy_draft_softmax_q_verifier(draft: ToyLM, context: tuple[int, ...]) -> TreeVerifier:
    """transformers #32867: the draft token is its argmax, but its softmax is used as q."""

    def verify(tree: DraftTree, laws: list[np.ndarray], rng: RandomSource) -> list[int]:
        relabelled = DraftTree(tree.token(0))
        for i in range(1, len(tree)):
            parent = tree.parent(i)
            q = draft.law(_context_of(tree, parent, context))
            relabelled.add_child(parent, tree.token(i), IND, q)
        return verify_tree(relabelled, laws, rng).emitted

    return verify


# --- The battery -------------------------------------------------------------------------------

EXACT_BATTERY = [
    WOR_SUBTLE,
    THREE_WOR,
    DUPLICATE_DETERMINISTIC,
    MIXED_TREE,
    DISJOINT,
    CHAIN2,
    TWO_DRAFT_LEVELS,
    DET_TOP2,
]


def _tv(
    target: ToyLM, drafts: Sequence[ToyLM], spec: DraftSpec, verifier: TreeVerifier, exact: bool
) -> float:
    n = spec_depth(spec) + 1
    want = ar_law(target, (0,), n, exact=exact)  # before the step: a mutant may corrupt laws
    step = functools.partial(
        speculative_tokens,
        target=target,
        drafts=drafts,
        spec=spec,
        context=(0,),
        n=n,
        verifier=verifier,
    )
    try:
        got = exact_law(step, exact=exact)
    except (ValueError, ZeroDivisionError, FloatingPointError, RuntimeError):
        # A crash is caught too; RuntimeError includes NonDeterministicFunctionError, raised when a
        # verifier corrupts the laws it is given (later replays then see different laws).
        return 1.0
    return float(total_variation(got, want))


def worst_tv_exact(make_verifier) -> float:
    worst = 0.0
    for scenario in EXACT_BATTERY:
        for exact in (True, False):
            target, drafts = scenario.models(exact)
            worst = max(worst, _tv(target, drafts, scenario.spec, make_verifier(), exact))
    return worst


def transformed_models(seed: int) -> tuple[ToyLM, ToyLM]:
    gen = np.random.default_rng(seed)
    target = ToyLM.from_logits(list(gen.normal(0, 1.5, (3, 4))), 0.5, top_k=3, top_p=0.9, salt=1)
    draft = ToyLM.from_logits(list(gen.normal(0, 1.5, (2, 4))), 0.7, top_k=3, salt=2)
    return target, draft


TRANSFORM_SPECS = [
    DraftSpec(IND, (ChildSpec(then=DraftSpec(IND, (ChildSpec(),))),)),
    DraftSpec(WOR, (ChildSpec(then=DraftSpec(IND, (ChildSpec(),))), ChildSpec())),
]
GREEDY_SPEC = DraftSpec(DET, (ChildSpec(rank=0, then=DraftSpec(DET, (ChildSpec(rank=0),))),))


def worst_tv_transformed(make_verifier, specs=TRANSFORM_SPECS) -> float:
    worst = 0.0
    for seed in range(3):
        target, draft = transformed_models(seed)
        for spec in specs:
            verifier = make_verifier(target, draft)
            worst = max(worst, _tv(target, [draft], spec, verifier, exact=False))
    return worst


RULE_MUTANTS = [
    "always_accept",
    "residual_is_p",
    "unconditional_q",
    "reused_coin",
    "unnormalized_residual",
    "rejected_deterministic_kept",
    "in_place",
    "wor_last_sibling_only",
]


def test_controls_pass_the_battery():
    assert worst_tv_exact(lambda: mutant_verifier("none")) < 1e-12
    assert worst_tv_exact(casspec_tree_verifier) < 1e-12
    assert worst_tv_transformed(lambda t, d: casspec_tree_verifier()) < 1e-12
    assert worst_tv_transformed(lambda t, d: mutant_verifier("none"), [GREEDY_SPEC]) < 1e-12


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the in-place mutant divides by zero
@pytest.mark.parametrize("bug", RULE_MUTANTS)
def test_rule_mutant_is_caught(bug):
    assert worst_tv_exact(lambda: mutant_verifier(bug)) > CAUGHT


def test_unconditional_q_error_is_small_but_caught():
    """EAGLE #74/#110: the error is 1.6e-3 in total variation on WOR_SUBTLE, below the noise of a
    Monte Carlo test of 1e5 draws over these 16 outcomes (~5e-3 in total variation), but exact
    here."""
    target, drafts = WOR_SUBTLE.models(exact=True)
    tv = _tv(target, drafts, WOR_SUBTLE.spec, mutant_verifier("unconditional_q"), exact=True)
    assert CAUGHT < tv < 0.05


def test_third_sibling_bug_needs_three_siblings():
    """Removing only the latest earlier sibling from q is right for two siblings and wrong for
    three: only the pinned THREE_WOR scenario sees it."""
    for scenario, caught in ((WOR_SUBTLE, False), (THREE_WOR, True)):
        target, drafts = scenario.models(exact=True)
        verifier = mutant_verifier("wor_last_sibling_only")
        tv = _tv(target, drafts, scenario.spec, verifier, exact=True)
        assert (tv > CAUGHT) is caught, (scenario, tv)


def test_raw_draft_q_is_caught():
    assert worst_tv_transformed(lambda t, d: raw_draft_q_verifier(d, (0,))) > CAUGHT


def test_raw_bonus_is_caught():
    assert worst_tv_transformed(lambda t, d: raw_bonus_verifier(t, (0,))) > CAUGHT


def test_greedy_draft_with_softmax_q_is_caught():
    make = lambda t, d: greedy_draft_softmax_q_verifier(d, (0,))  # noqa: E731
    assert worst_tv_transformed(make, [GREEDY_SPEC]) > CAUGHT


def test_check_verifier_flags_the_raw_bonus_replica():
    report = check_verifier(raw_bonus_replica)
    assert not report.lossless
    assert report.worst_tv > CAUGHT
    assert report.counterexample is not None
