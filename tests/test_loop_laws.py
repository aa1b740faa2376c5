"""Whole-loop exact laws for every method, on cases chosen so that sibling bugs can show.

`generate_speculative` runs as in production (drafts, tree, one target forward, `verify_tree`,
KV commits, DyTC); only the coins come from `exact_law`'s enumerating source, and DyTC's clock
is driven by the model's forwards (`_TimedModel` of tests/test_speculative_law.py). The exact law
of the emitted tokens must equal the law of plain AR sampling (`generate_ar` under the same
enumeration) within 1e-12 in total variation, for every method x case of the matrix below.

A law test only sees the bugs its cases exercise: a case whose residuals are one-hot after every
rejection passes a verifier that tests siblings with the wrong law. A recording wrapper around
the loop's verifier replays every rejection from the rules and checks, over all enumerated
paths, that the cases exercise what they claim (`Coverage.claims`):
- ``sampled_siblings``: some step has >= 2 siblings drawn from a draft law (rules 2 and 3);
- ``sibling_residual``: some later sibling is tested against a residual with >= 2 tokens of
  support (so the law it is tested with matters);
- ``sibling_residual_mass``: some later sampled sibling is tested against a residual whose mass
  before normalisation is below 1, where the law of the token that sibling's test yields
  (accepted, or drawn from what is left) changes if the residual is left unnormalised: a
  verifier that forgets to normalise is seen there (`_one_sibling_law`);
- ``third_sibling``: some step tests a third sampled sibling against a residual with >= 2 tokens
  of support (`THREE_SIBLINGS`: a static tree of shape (3, 1), DyTC with ``siblings=3``);
- ``final_residual``: some residual drawn from after a rejection has >= 2 tokens of support;
- ``accepted2``: some step accepts >= 2 drafted tokens.
Three mutants must be caught (total variation > 1e-9): two drafting mutants of
`StepDrafter.propose_children` (monkeypatched), without-replacement siblings declared
INDEPENDENT, and later siblings drawn from the raw softmax while the processed q is recorded, on
every branching method; and a verifier that rebuilds the without-replacement q at each sibling
(only the latest earlier sibling removed), which only a third sibling shows, on static-tree and
cas-spec.

Cost: every enumerated path re-runs the whole generation, so cases stay small (vocabulary 4-5,
3-5 tokens, top-k/top-p shrinking supports where 5 tokens are wanted). The larger matrix is
marked `thorough` (`make thorough`). ``python tests/test_loop_laws.py [METHOD ...]`` prints the
rows of docs/testing.md's table.
"""

from __future__ import annotations

import copy
import dataclasses
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import torch
from test_speculative_law import DRAFTS, _model, _TimedModel

import casspec_ref.speculative as speculative
from casspec_ref import proof as oracle
from casspec_ref.baselines import ScheduleOptions
from casspec_ref.draft import StepDrafter
from casspec_ref.dsia.prompt_lookup import PromptLookupConfig
from casspec_ref.dytc import DyTC
from casspec_ref.dytc_config import PLD, RECYCLE, DyTCConfig
from casspec_ref.dytc_refinements import RefinedDyTC
from casspec_ref.generate import generate_ar
from casspec_ref.sampling import RandomSource
from casspec_ref.tree import ChildRule, DraftTree

TOLERANCE = 1e-12
CAUGHT = 1e-9

#: Trees stay small: a chain of 2, a static tree of 2 sampled siblings then 1, DyTC up to 4 nodes
#: with 2 siblings where a model draft expands a leaf.
SCHEDULE = ScheduleOptions(
    chain_k=2, hc_split=1, static_branching=(2, 1), swift_threshold=0.3, swift_max_depth=2
)
PLD_CONFIG = PromptLookupConfig(max_proposal=3)
DYTC = DyTCConfig(warmup=0, max_tree_size=4, max_k=2, siblings=2)
METHODS = tuple("pld chain pld-or-chain vc hc vchc swift-tree static-tree cas-spec".split())
#: Methods whose trees have sampled siblings (the others draft chains).
BRANCHING = ("swift-tree", "static-tree", "cas-spec")


@dataclass(frozen=True)
class LoopCase:
    """One model and sampling setting; ``n_tokens`` tokens are enumerated."""

    name: str
    vocab: int
    seed: int
    prompt: tuple[int, ...]
    n_tokens: int
    temperature: float
    top_k: int = 0
    top_p: float = 1.0
    #: DyTC only: force the prompt-lookup estimate to 0 so that the model levels (with their
    #: sampled siblings) draft.
    dytc_models_only: bool = False
    schedule: ScheduleOptions = SCHEDULE
    dytc: DyTCConfig = DYTC

    @property
    def sampling(self) -> dict[str, Any]:
        return {"temperature": self.temperature, "top_k": self.top_k, "top_p": self.top_p}


@dataclass(frozen=True)
class Rejection:
    """One rejected child: ``index`` among its siblings, the support and the mass (before
    normalisation) of the residual it left, and whether a sibling was tested next."""

    index: int
    support: int
    mass: float
    sibling_next: bool
    sampled: bool  # the siblings were drawn from a draft law (not deterministic)
    #: A sampled sibling followed, the residual's mass before normalisation is below 1, and
    #: the law of the token the remaining siblings' tests yield differs with it unnormalised.
    scale_matters: bool


@dataclass
class Coverage:
    """What the enumerated paths exercised (the max, or min, over every step of every path)."""

    steps: int = 0
    max_tree: int = 1
    sampled_siblings: int = 0
    sibling_residual: int = 0  # support of a residual a later sibling was tested against
    third_sibling_residual: int = 0  # the same for a third or later sampled sibling
    sibling_residual_mass: float = math.inf  # least mass before normalisation of those residuals
    scale_matters: bool = False  # some sampled sibling's test depends on that normalisation
    final_residual: int = 0  # support of a residual the next token was drawn from
    max_accepted: int = 0
    outcomes: int = 0

    def record(self, rejection: Rejection) -> None:
        if not rejection.sibling_next:
            self.final_residual = max(self.final_residual, rejection.support)
            return
        self.sibling_residual = max(self.sibling_residual, rejection.support)
        if rejection.sampled:
            self.sibling_residual_mass = min(self.sibling_residual_mass, rejection.mass)
            self.scale_matters |= rejection.scale_matters
            if rejection.index >= 1:
                self.third_sibling_residual = max(self.third_sibling_residual, rejection.support)

    def merge(self, other: Coverage) -> None:
        self.steps += other.steps
        self.outcomes += other.outcomes
        for name in (
            "max_tree",
            "sampled_siblings",
            "sibling_residual",
            "third_sibling_residual",
            "final_residual",
            "max_accepted",
        ):
            setattr(self, name, max(getattr(self, name), getattr(other, name)))
        self.sibling_residual_mass = min(self.sibling_residual_mass, other.sibling_residual_mass)
        self.scale_matters |= other.scale_matters

    def claims(self) -> dict[str, bool]:
        return {
            "sampled_siblings": self.sampled_siblings >= 2,
            "sibling_residual": self.sibling_residual >= 2,
            "sibling_residual_mass": self.sibling_residual_mass < 1 and self.scale_matters,
            "third_sibling": self.sampled_siblings >= 3 and self.third_sibling_residual >= 2,
            "final_residual": self.final_residual >= 2,
            "accepted2": self.max_accepted >= 2,
        }


def _yielded_law(
    residual: np.ndarray, laws: list[np.ndarray], wor: bool, removed: list[int], normalise: bool
) -> np.ndarray:
    """The law of the token that testing the remaining siblings against ``residual`` yields,
    averaged over their draws: each x ~ q is accepted with probability min(1, residual(x) /
    q(x)); on rejection the residual becomes max(residual - q, 0), normalised if ``normalise``
    (itself when that is empty, as verify.py does); after the last, a token is drawn from it.
    ``laws``: each remaining sibling's q (without replacement: the one shared q, its earlier
    draws ``removed``). With ``normalise`` this is ``residual`` itself (rejection sampling)."""
    if not laws:
        return residual / residual.sum()
    q = laws[0].copy()
    if wor:
        q[removed] = 0.0
        q = q / q.sum()
    rest = np.maximum(residual - q, 0.0)  # (V,)
    rest = residual if rest.sum() == 0 else rest / rest.sum() if normalise else rest
    out = np.zeros_like(residual)
    for x in np.flatnonzero(q):
        accept = min(1.0, residual[x] / q[x])
        out[x] += q[x] * accept
        later = _yielded_law(rest, laws[1:], wor, [*removed, int(x)], normalise)
        out += q[x] * (1.0 - accept) * later
    return out


def _rejections(tree: DraftTree, laws: np.ndarray, decisions) -> Iterator[Rejection]:
    """Every rejection of one verification, replayed from the rules (docs/method.md §5),
    independently of verify.py."""
    by_parent: dict[int, list[tuple[int, bool]]] = {}
    for child, accepted in decisions:
        by_parent.setdefault(tree.parent(child), []).append((child, accepted))
    for parent, tested in by_parent.items():
        residual = np.array(laws[parent], dtype=np.float64)
        rule = tree.child_rule(parent)
        sampled = rule in (ChildRule.INDEPENDENT, ChildRule.WITHOUT_REPLACEMENT)
        qs, removed = [], []
        for child, _ in tested:
            if rule is ChildRule.DETERMINISTIC:
                q = np.zeros_like(residual)
                q[tree.token(child)] = 1.0
            else:
                q = np.array(tree.draft_probs(child), dtype=np.float64)
                if rule is ChildRule.WITHOUT_REPLACEMENT:
                    q[removed] = 0.0
                    q = q / q.sum()
            qs.append(q)
            removed.append(tree.token(child))
        for i, (_, accepted) in enumerate(tested):
            if accepted:
                break
            excess = np.maximum(residual - qs[i], 0.0)
            mass = float(excess.sum())
            if mass > 0:
                residual = excess / mass
            sibling_next = i + 1 < len(tested)
            support = int(np.count_nonzero(residual > 1e-12))
            matters = False
            if sibling_next and sampled and 0 < mass < 1:
                # The remaining siblings' tests, averaged over their draws, yield the residual's
                # law; left unnormalised they may not (the same law when the unnormalised
                # residual lies below each q: a lost acceptance is drawn back exactly).
                wor = rule is ChildRule.WITHOUT_REPLACEMENT
                later = tree.children(parent)[i + 1 :]
                laws_left = [np.array(tree.draft_probs(c), dtype=np.float64) for c in later]
                yielded = _yielded_law(excess, laws_left, wor, removed[: i + 1], False)
                matters = bool(np.abs(yielded - residual).sum() / 2 > 1e-9)
                exact = _yielded_law(residual, laws_left, wor, removed[: i + 1], True)
                assert np.abs(exact - residual).sum() < 1e-9, "the replay's own rule is wrong"
            yield Rejection(i, support, mass, sibling_next, sampled, matters)


def _recording_verifier(coverage: Coverage) -> Callable[..., Any]:
    real = speculative.verify_tree

    def verify(tree: DraftTree, target_probs: np.ndarray, rng: RandomSource, **kw: Any) -> Any:
        result = real(tree, target_probs, rng, **kw)
        coverage.steps += 1
        coverage.max_tree = max(coverage.max_tree, len(tree))
        coverage.max_accepted = max(coverage.max_accepted, len(result.accepted))
        for node in range(len(tree)):
            if tree.child_rule(node) in (ChildRule.INDEPENDENT, ChildRule.WITHOUT_REPLACEMENT):
                siblings = len(tree.children(node))
                coverage.sampled_siblings = max(coverage.sampled_siblings, siblings)
        for rejection in _rejections(tree, target_probs, result.decisions):
            coverage.record(rejection)
        return result

    return verify


def _warm_policy(model: _TimedModel, case: LoopCase, method: str) -> DyTC:
    """A DyTC policy (the paper's for ``cas-spec:paper``) that has timed the target and every
    draft in one earlier generation, so that DyTC drafts trees from the first step of the
    enumerated generations."""
    kind = DyTC if method == "cas-spec:paper" else RefinedDyTC
    policy = kind([plan.name for plan in DRAFTS], case.dytc)
    model.clock.now = 0.0
    speculative.generate_speculative(
        model,
        list(case.prompt),
        12,
        method=method,
        seed=0,
        drafts=DRAFTS,
        policy=policy,
        clock=model.clock,
        **case.sampling,
    )
    if case.dytc_models_only:
        policy.alpha[PLD].alpha = policy.alpha[RECYCLE].alpha = 0.0
    return policy


def loop_law(model: _TimedModel, case: LoopCase, method: str) -> oracle.Law:
    """The exact law of the first ``case.n_tokens`` tokens of `generate_speculative`."""
    warm = _warm_policy(model, case, method) if method.startswith("cas-spec") else None

    def run(rng: RandomSource) -> tuple[int, ...]:
        model.clock.now = 0.0
        result = speculative.generate_speculative(
            model,
            list(case.prompt),
            case.n_tokens,
            method=method,
            rng=rng,
            drafts=DRAFTS,
            # A fresh copy per enumerated path: the function must not depend on earlier paths.
            policy=copy.deepcopy(warm),
            dytc=case.dytc,
            schedule=case.schedule,
            pld=PLD_CONFIG,
            clock=model.clock,
            **case.sampling,
        )
        return tuple(result.tokens)

    return oracle.exact_law(run)


def ar_law(model: _TimedModel, case: LoopCase) -> oracle.Law:
    def run(rng: RandomSource) -> tuple[int, ...]:
        result = generate_ar(model, list(case.prompt), case.n_tokens, rng=rng, **case.sampling)
        return tuple(result.tokens)

    return oracle.exact_law(run)


def measure(case: LoopCase, method: str, monkeypatch: pytest.MonkeyPatch) -> tuple[float, Coverage]:
    """(total variation from the AR law, coverage) of one method x case."""
    model = _model(vocab=case.vocab, seed=case.seed)
    want = ar_law(model, case)
    coverage = Coverage()
    with monkeypatch.context() as patch:
        patch.setattr(speculative, "verify_tree", _recording_verifier(coverage))
        got = loop_law(model, case, method)
    coverage.outcomes = len(got)
    assert abs(float(sum(got.values())) - 1.0) < 1e-12
    return float(oracle.total_variation(got, want)), coverage


# --- The two drafting mutants ---------------------------------------------------------------

_REAL_PROPOSE = StepDrafter.propose_children


def _siblings_declared_independent(self: StepDrafter, level, node, count):
    """Mutant: siblings drawn without replacement, declared INDEPENDENT with the unconditional q
    (so the verifier tests the second sibling with q instead of q without the first)."""
    added = _REAL_PROPOSE(self, level, node, count)
    if self.tree.child_rule(node) is ChildRule.WITHOUT_REPLACEMENT:
        self.tree.nodes[node].child_rule = ChildRule.INDEPENDENT
    return added


class _RawLaterSiblings:
    """A random source that draws the 2nd and later categorical of one `propose_children` call
    from the raw softmax of the draft logits (earlier draws removed), not from the processed law
    it is handed."""

    def __init__(self, inner: RandomSource, logits: list[torch.Tensor]) -> None:
        self.inner, self.logits, self.drawn = inner, logits, []  # type: ignore[var-annotated]

    def bernoulli(self, prob):  # type: ignore[no-untyped-def]
        return self.inner.bernoulli(prob)

    def categorical(self, probs):  # type: ignore[no-untyped-def]
        if self.drawn:
            raw = torch.softmax(self.logits[-1].double(), -1).numpy().copy()  # (V,)
            raw[self.drawn] = 0.0
            probs = raw / raw.sum()
        token = int(self.inner.categorical(probs))
        self.drawn.append(token)
        return token


def _later_siblings_from_raw_softmax(self: StepDrafter, level, node, count):
    """Mutant: later siblings drawn from the raw softmax while the processed q is recorded."""
    logits: list[torch.Tensor] = []
    real_logits = self.draft_logits

    def capture(level_: str, node_: int) -> torch.Tensor:
        row = real_logits(level_, node_)
        logits.append(row)
        return row

    inner = self.rng
    self.rng = _RawLaterSiblings(inner, logits)  # type: ignore[assignment]
    self.draft_logits = capture  # type: ignore[method-assign]
    try:
        return _REAL_PROPOSE(self, level, node, count)
    finally:
        self.rng = inner
        del self.draft_logits


def _rebuilt_q_tree(tree: DraftTree) -> DraftTree:
    """``tree`` with each without-replacement sibling relabelled INDEPENDENT with the law a
    verifier that rebuilds q at each sibling uses: q without the latest earlier sibling only."""
    relabelled = DraftTree(tree.token(0))
    for child in range(1, len(tree)):
        parent = tree.parent(child)
        rule, q = tree.child_rule(parent), tree.draft_probs(child)
        siblings = tree.children(parent)
        if rule is ChildRule.WITHOUT_REPLACEMENT:
            rank = siblings.index(child)
            q = np.array(q, dtype=np.float64)
            if rank > 0:
                q[tree.token(siblings[rank - 1])] = 0.0
                q = q / q.sum()
            rule = ChildRule.INDEPENDENT
        relabelled.add_child(parent, tree.token(child), rule, q)  # type: ignore[arg-type]
    return relabelled


def _rebuilt_q_verifier(real: Callable[..., Any]) -> Callable[..., Any]:
    """Mutant (in the verifier): the without-replacement q rebuilt from the siblings' q at each
    sibling, with only the latest earlier sibling removed. Right for two siblings, wrong from
    the third on: the second sibling drawn is still given mass at the third."""

    def verify(tree: DraftTree, target_probs: np.ndarray, rng: RandomSource, **kw: Any) -> Any:
        return real(_rebuilt_q_tree(tree), target_probs, rng, **kw)

    return verify


MUTANTS = {
    "wor_declared_independent": _siblings_declared_independent,
    "later_siblings_raw_softmax": _later_siblings_from_raw_softmax,
}


# --- The matrix -----------------------------------------------------------------------------

PROMPT = (0, 1, 2, 0, 1)
#: Full support at T = 0.5 (residuals keep >= 2 tokens: sibling bugs show); 5 tokens with top-k
#: 2; top-p 0.8 at T = 0.8 with 4 tokens (deep enough to accept 2 drafted tokens).
CASES = (
    LoopCase("v5-T0.5", vocab=5, seed=11, prompt=PROMPT, n_tokens=3, temperature=0.5),
    LoopCase("v5-T1.0-k2", vocab=5, seed=3, prompt=PROMPT, n_tokens=5, temperature=1.0, top_k=2),
    LoopCase(
        "v4-T0.8-p0.8", vocab=4, seed=7, prompt=PROMPT, n_tokens=4, temperature=0.8, top_p=0.8
    ),
)
#: The case on which the drafting mutants are measured (no top-k: raw softmax and processed q
#: differ only through the temperature, and enumeration stays small).
SIBLING_CASE = CASES[0]


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
def test_drafting_mutants_are_caught(mutant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each drafting mutant changes the law of every branching method on the sibling case."""
    tvs = {}
    with monkeypatch.context() as patch:
        patch.setattr(StepDrafter, "propose_children", MUTANTS[mutant])
        for method in BRANCHING:
            tvs[method], _ = measure(SIBLING_CASE, method, monkeypatch)
    assert min(tvs.values()) > CAUGHT, tvs


#: Three sampled siblings drawn without replacement at V = 4 (full support at T = 1): a static
#: tree of shape (3, 1) and DyTC expanding a leaf with 3 siblings. DyTC's default is 3 siblings;
#: the matrix's trees have 2, where a verifier that rebuilds q at each sibling is still right.
THREE_SIBLINGS = LoopCase(
    "v4-T1.0-3siblings",
    vocab=4,
    seed=11,
    prompt=PROMPT,
    n_tokens=3,
    temperature=1.0,
    schedule=dataclasses.replace(SCHEDULE, static_branching=(3, 1)),
    dytc=dataclasses.replace(DYTC, siblings=3),
)
THREE_SIBLING_METHODS = ("static-tree", "cas-spec")


@pytest.mark.parametrize("method", THREE_SIBLING_METHODS)
def test_the_third_sibling_catches_a_verifier_that_rebuilds_q(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The verifier mutant that rebuilds q at each without-replacement sibling (only the latest
    earlier sibling removed) is right for two siblings: the matrix's cases cannot see it. The
    three-sibling case does (TV > 1e-9), through static-tree and cas-spec alike."""
    with monkeypatch.context() as patch:
        patch.setattr(speculative, "verify_tree", _rebuilt_q_verifier(speculative.verify_tree))
        tv, _ = measure(THREE_SIBLINGS, method, monkeypatch)
    assert tv > CAUGHT, f"{method}: the rebuilt-q mutant's total variation {tv}"


def cases_of(method: str) -> tuple[LoopCase, ...]:
    """The matrix's cases, after the three-sibling case where the method branches 3 ways."""
    return ((THREE_SIBLINGS,) if method in THREE_SIBLING_METHODS else ()) + CASES


@pytest.mark.parametrize("method", METHODS)
def test_loop_law_equals_ar_and_exercises_what_it_claims(
    method: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every case: TV < 1e-12 from the AR law. Over the cases: >= 5 tokens somewhere, some
    step accepting >= 2 drafts, some residual drawn from after a rejection with >= 2 tokens of
    support; for the branching methods also >= 2 sampled siblings tested against a residual
    with >= 2 tokens of support, and a later sampled sibling tested against a residual whose
    mass before normalisation is below 1, where leaving it unnormalised changes the law of the
    token the test yields; for static-tree and cas-spec a third sampled sibling tested against a
    residual with >= 2 tokens of support."""
    seen = Coverage()
    for case in cases_of(method):
        tv, coverage = measure(case, method, monkeypatch)
        assert tv < TOLERANCE, f"{method} on {case.name}: total variation {tv}"
        assert coverage.max_tree >= 2, f"{method} on {case.name}: no tree was drafted"
        seen.merge(coverage)
    assert max(case.n_tokens for case in CASES) >= 5
    claims = seen.claims()
    assert claims["accepted2"], f"{method}: no step accepted 2 drafted tokens"
    assert claims["final_residual"], f"{method}: every residual drawn from was one-hot"
    if method in BRANCHING:
        assert claims["sampled_siblings"], f"{method}: no step had 2 sampled siblings"
        assert claims["sibling_residual"], f"{method}: later siblings met one-hot residuals only"
        assert claims["sibling_residual_mass"], f"{method}: no sibling saw an unnormalised mass"
    if method in THREE_SIBLING_METHODS:
        assert claims["third_sibling"], f"{method}: no third sampled sibling was tested"


#: More seeds, full supports, top-k with top-p, 4-5 tokens; minutes per method (make thorough).
THOROUGH_CASES = (
    LoopCase("v4-T0.8", vocab=4, seed=5, prompt=PROMPT, n_tokens=4, temperature=0.8),
    LoopCase("v5-T0.5-k3", vocab=5, seed=13, prompt=PROMPT, n_tokens=4, temperature=0.5, top_k=3),
    LoopCase("v4-T1.0", vocab=4, seed=21, prompt=(3, 1, 3, 1, 2), n_tokens=4, temperature=1.0),
    LoopCase(
        "v5-T0.8-k3-p0.9",
        vocab=5,
        seed=17,
        prompt=PROMPT,
        n_tokens=5,
        temperature=0.8,
        top_k=3,
        top_p=0.9,
    ),
    LoopCase(
        "v5-T0.5-models",
        vocab=5,
        seed=23,
        prompt=PROMPT,
        n_tokens=3,
        temperature=0.5,
        dytc_models_only=True,
    ),
)


@pytest.mark.thorough
@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("case", THOROUGH_CASES, ids=lambda case: case.name)
def test_loop_law_thorough(method: str, case: LoopCase, monkeypatch: pytest.MonkeyPatch) -> None:
    tv, coverage = measure(case, method, monkeypatch)
    assert tv < TOLERANCE, f"{method} on {case.name}: total variation {tv}"
    assert coverage.max_tree >= 2


@pytest.mark.thorough
@pytest.mark.parametrize("mutant", sorted(MUTANTS))
@pytest.mark.parametrize("seed", [29, 31, 37])
def test_drafting_mutants_are_caught_on_more_seeds(
    mutant: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = LoopCase(f"v4-T0.5-s{seed}", 4, seed, PROMPT, 3, 0.5)
    with monkeypatch.context() as patch:
        patch.setattr(StepDrafter, "propose_children", MUTANTS[mutant])
        tvs = {method: measure(case, method, monkeypatch)[0] for method in BRANCHING}
    assert max(tvs.values()) > CAUGHT, tvs


def test_recycled_tokens_loop_law_equals_ar() -> None:
    """Recycled tokens learn their table from the verify forwards of the same generation, so the
    method drafts from its third step on: a 6-token case with top-k 2 (a small enumeration)
    shows drafted recycled tokens, some accepted, and the exact law of plain decoding."""
    case = LoopCase(
        "v4-T1.0-k2", vocab=4, seed=3, prompt=PROMPT, n_tokens=6, temperature=1.0, top_k=2
    )
    with pytest.MonkeyPatch.context() as patch:
        tv, coverage = measure(case, "recycle", patch)
    assert tv < TOLERANCE, tv
    assert coverage.max_tree >= 2 and coverage.max_accepted >= 1, coverage


def table_row(method: str, case: LoopCase) -> str:
    """One row of docs/testing.md's loop-law table: TV and what the cell exercised."""
    with pytest.MonkeyPatch.context() as patch:
        tv, c = measure(case, method, patch)
    mass = "-" if math.isinf(c.sibling_residual_mass) else f"{c.sibling_residual_mass:.3f}"
    cells = (
        method,
        case.name,
        case.n_tokens,
        f"{tv:.1e}",
        c.outcomes,
        c.max_tree,
        c.sampled_siblings,
        c.sibling_residual,
        c.third_sibling_residual,
        mass,
        "yes" if c.scale_matters else "no",
        c.final_residual,
        c.max_accepted,
    )
    return "| " + " | ".join(str(cell) for cell in cells) + " |"


if __name__ == "__main__":  # python tests/test_loop_laws.py [METHOD ...]: the table's rows
    import sys

    for method in sys.argv[1:] or METHODS:
        for case in cases_of(method):
            print(table_row(method, case), flush=True)
