"""The exact-law oracle: prove a verifier lossless by enumerating every outcome, not by sampling.

Scope (docs/method.md §1 "lossless", §5, §6): peers test losslessness with Monte Carlo counts,
which cannot see an error of total variation 4e-4. Here a function that draws all of its
randomness through the `RandomSource` protocol is run under `EnumeratingSource`, which explores
every outcome with its probability (a depth-first replay of decision prefixes, pruning
probability-0 branches), in float64 or exactly with `fractions.Fraction`. The function is the
real code: the verifier's own code path runs, only the coins are replaced.

Contents, in reading order:
1. `exact_law`, `total_variation`: the enumeration itself.
2. A harness for speculative steps: `ToyLM` (a context-dependent toy model given by a few fixed
   laws), `DraftSpec`/`ChildSpec` (a tree shape with its child rules and draft levels),
   `draft_tree` (drafting through the random source), `speculative_tokens` (draft, verify, then
   finish with plain AR sampling up to n tokens) and `ar_law` (the law of plain AR sampling,
   computed by direct recursion: an oracle by a different path).
3. A product for other implementations: `check_verifier` on a third-party *chain* verifier with
   the `ChainVerifier` signature, `run_check_command` for the CLI
   (``python -m casspec_ref oracle check MODULE:FUNCTION``), and JSON test vectors
   (`build_vectors`, ``casspec_ref/data/oracle_vectors.json``) that other languages can replay.

Why finishing with AR sampling is a complete check: a step emits at most depth + 1 tokens, and
the emitted sequence is lossless iff for every n the law of the first n tokens of "this step,
then plain AR" equals the law of n plain AR tokens; for n = depth + 1 that is every token the step
decides, and longer n only append AR tokens to both sides (docs/oracle.md).
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import sys
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Protocol, TextIO

import numpy as np
import torch

from casspec_ref.sampling import RandomSource, target_law
from casspec_ref.tree import ChildRule, DraftTree
from casspec_ref.verify import VerifyResult, verify_tree

Prob = float | Fraction
Law = dict[Hashable, Prob]

# ---------------------------------------------------------------------------------------------
# 1. Enumeration
# ---------------------------------------------------------------------------------------------


class NonDeterministicFunctionError(RuntimeError):
    """The enumerated function made different draws after the same decisions."""


class EnumeratingSource:
    """A `RandomSource` that replays a forced prefix of choices, then takes the first option.

    It records, for every decision past the forced prefix, the options it did not take, so that
    `exact_law` can replay each of them. ``weight`` is the probability of the path taken.
    """

    def __init__(self, forced: tuple[tuple[str, int], ...], exact: bool) -> None:
        self.forced = forced
        self.exact = exact
        # A decision is (kind, option): kind names the draw ("bernoulli", or "categorical/V"),
        # so that a replay that draws a different kind of decision is detected.
        self.taken: list[tuple[str, int]] = []
        self.untaken: list[list[tuple[str, int]]] = []
        self.weight: Prob = Fraction(1) if exact else 1.0

    def _number(self, value: Any) -> Prob:
        if self.exact:
            return value if isinstance(value, Fraction) else Fraction(float(value))
        return float(value)

    def _decide(self, kind: str, options: list[tuple[int, Prob]]) -> int:
        depth = len(self.taken)
        if depth < len(self.forced):
            forced_kind, choice = self.forced[depth]
            matches = [prob for option, prob in options if option == choice]
            if forced_kind != kind or not matches:
                raise NonDeterministicFunctionError(
                    "the function drew differently after the same earlier decisions; it must take "
                    "all of its randomness from the RandomSource it is given"
                )
            prob = matches[0]
            self.untaken.append([])
        else:
            choice, prob = options[0]
            self.untaken.append([(kind, option) for option, _ in options[1:]])
        self.taken.append((kind, choice))
        self.weight = self.weight * prob
        return choice

    def bernoulli(self, prob: float | Fraction) -> bool:
        p = self._number(prob)
        if p < 0 or p > 1 or (isinstance(p, float) and math.isnan(p)):
            raise ValueError(f"bernoulli probability must be in [0, 1], got {prob}")
        options = [(option, w) for option, w in ((1, p), (0, 1 - p)) if w > 0]
        return self._decide("bernoulli", options) == 1

    def categorical(self, probs: np.ndarray) -> int:
        law = np.asarray(probs)
        if law.ndim != 1 or law.shape[0] == 0:
            raise ValueError(f"categorical needs a non-empty 1-D law, got shape {law.shape}")
        weights = [self._number(v) for v in law]
        if any(w < 0 for w in weights):
            raise ValueError("categorical law has negative entries")
        total = sum(weights, Fraction(0) if self.exact else 0.0)
        if not total > 0:
            raise ValueError("categorical law has no mass")
        # Normalize as a sampler does (inverse CDF scaled by the total mass).
        options = [(i, w / total) for i, w in enumerate(weights) if w > 0]
        return self._decide(f"categorical/{law.shape[0]}", options)


def _freeze(value: Any) -> Hashable:
    if isinstance(value, np.ndarray | torch.Tensor):
        value = value.tolist()
    if isinstance(value, list | tuple):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.integer):
        return int(value)
    return value


def exact_law(
    fn: Callable[[RandomSource], Any], *, exact: bool = False, max_paths: int = 1_000_000
) -> Law:
    """The exact law of ``fn(rng)``'s output over every outcome of its random draws.

    ``fn`` must take all of its randomness from ``rng`` and be deterministic given the draws.
    Outputs are made hashable (lists and arrays become tuples). With ``exact=True`` the
    probabilities are `Fraction` (float inputs are converted exactly, as binary fractions).
    Raises `ValueError` when more than ``max_paths`` outcomes would be enumerated.
    """
    law: Law = {}
    stack: list[tuple[tuple[str, int], ...]] = [()]
    paths = 0
    while stack:
        forced = stack.pop()
        paths += 1
        if paths > max_paths:
            raise ValueError(f"more than max_paths={max_paths} outcomes; use smaller cases")
        source = EnumeratingSource(forced, exact)
        key = _freeze(fn(source))
        law[key] = law.get(key, 0) + source.weight
        for depth in range(len(forced), len(source.taken)):
            for option in source.untaken[depth]:
                stack.append((*source.taken[:depth], option))
    return law


def total_variation(law_a: Law, law_b: Law) -> Prob:
    """Total-variation distance: half the L1 distance over the union of outcomes."""
    total: Any = 0
    for key in set(law_a) | set(law_b):
        total = total + abs(law_a.get(key, 0) - law_b.get(key, 0))
    result: Prob = total / 2
    return result


# ---------------------------------------------------------------------------------------------
# 2. The speculative-step harness
# ---------------------------------------------------------------------------------------------


class ToyLM:
    """A context-dependent toy model: the law at a context is one of a few fixed laws.

    Which law a context gets is a fixed hash of (salt, context), so different prefixes see
    different laws, as with a real model. ``raw_laws`` are the unprocessed laws (softmax of the
    raw logits) for bug replicas that use them; they default to ``laws``.
    """

    def __init__(
        self,
        laws: Sequence[np.ndarray],
        salt: int = 0,
        raw_laws: Sequence[np.ndarray] | None = None,
        logits: Sequence[np.ndarray] | None = None,
    ) -> None:
        if not laws:
            raise ValueError("a ToyLM needs at least one law")
        self.laws = [np.asarray(law) for law in laws]
        self.raw_laws = [np.asarray(law) for law in raw_laws] if raw_laws else self.laws
        self.logits = [np.asarray(x, dtype=np.float64) for x in logits] if logits else None
        self.salt = salt
        self.vocab_size = self.laws[0].shape[0]

    @classmethod
    def from_logits(
        cls,
        logits: Sequence[np.ndarray],
        temperature: float,
        top_k: int = 0,
        top_p: float = 1.0,
        salt: int = 0,
    ) -> ToyLM:
        """Processed laws from raw logits through `target_law` (float64)."""
        raw = torch.tensor(np.asarray(logits, dtype=np.float64))  # (M, V)
        laws = target_law(raw, temperature, top_k, top_p).numpy()  # (M, V)
        raw_laws = target_law(raw, 1.0).numpy()  # (M, V)
        return cls(list(laws), salt, list(raw_laws), list(np.asarray(logits, dtype=np.float64)))

    def index(self, context: tuple[int, ...]) -> int:
        h = self.salt * 7919 + 17
        for token in context:
            h = (h * 31 + token + 1) % 1_000_003
        return h % len(self.laws)

    def law(self, context: tuple[int, ...]) -> np.ndarray:
        return self.laws[self.index(context)]

    def raw_law(self, context: tuple[int, ...]) -> np.ndarray:
        return self.raw_laws[self.index(context)]

    def raw_logits(self, context: tuple[int, ...]) -> np.ndarray:
        if self.logits is None:
            with np.errstate(divide="ignore"):
                return np.log(self.raw_law(context).astype(np.float64))
        return self.logits[self.index(context)]


@dataclass(frozen=True)
class ChildSpec:
    """One child of a `DraftSpec`.

    Attributes:
        draft: index of the draft model that proposes it (INDEPENDENT: its own q_i;
            WITHOUT_REPLACEMENT: the first child's model gives the shared q; DETERMINISTIC: the
            model whose ranking ``rank`` refers to).
        rank: DETERMINISTIC: the rank-th most likely token of that model (ties: lowest id).
        token: DETERMINISTIC: a fixed token instead (prompt-lookup style; may repeat, may have
            p = 0).
        then: the spec of this child's own children (None: a leaf).
    """

    draft: int = 0
    rank: int = 0
    token: int | None = None
    then: DraftSpec | None = None


@dataclass(frozen=True)
class DraftSpec:
    """How the children of one node are proposed: one rule, then one `ChildSpec` per child."""

    rule: ChildRule
    children: tuple[ChildSpec, ...]


def draft_tree(
    spec: DraftSpec | None,
    context: tuple[int, ...],
    drafts: Sequence[ToyLM],
    rng: RandomSource,
) -> tuple[DraftTree, list[tuple[int, ...]]]:
    """Draft a tree after ``context`` (its last token is the root) following ``spec``.

    Sampled children are drawn through ``rng``; WITHOUT_REPLACEMENT children are drawn in order
    from q with earlier children removed, and stop early if q's support is exhausted. Returns the
    tree and each node's context (``context`` + the path to the node).
    """
    if not context:
        raise ValueError("context must hold at least the root token")
    tree = DraftTree(context[-1])
    contexts = [context]

    def grow(node: int, ctx: tuple[int, ...], node_spec: DraftSpec | None) -> None:
        if node_spec is None:
            return
        rule = node_spec.rule
        remaining: np.ndarray | None = None
        shared_q: np.ndarray | None = None
        for child in node_spec.children:
            if rule is ChildRule.INDEPENDENT:
                q = drafts[child.draft].law(ctx)
                token = int(rng.categorical(q))
                index = tree.add_child(node, token, rule, q)
            elif rule is ChildRule.WITHOUT_REPLACEMENT:
                if shared_q is None:
                    shared_q = drafts[node_spec.children[0].draft].law(ctx)
                    remaining = shared_q
                assert remaining is not None
                if not any(v > 0 for v in remaining):
                    break
                token = int(rng.categorical(remaining))
                index = tree.add_child(node, token, rule, shared_q)
                remaining = remaining.copy()
                remaining[token] = 0
                mass = remaining.sum()
                remaining = remaining / mass if mass > 0 else remaining
            else:
                vocab = drafts[child.draft].vocab_size
                if child.token is not None:
                    token = child.token % vocab
                else:
                    law = np.asarray(drafts[child.draft].law(ctx), dtype=np.float64)
                    order = np.argsort(-law, kind="stable")  # (V,) most likely first
                    token = int(order[child.rank % vocab])
                index = tree.add_child(node, token, rule)
            contexts.append((*ctx, token))
            grow(index, (*ctx, token), child.then)

    grow(0, context, spec)
    return tree, contexts


#: A verifier as the harness calls it: (tree, processed target law per node, rng) -> emitted.
TreeVerifier = Callable[[DraftTree, list[np.ndarray], RandomSource], Sequence[int]]


def casspec_tree_verifier(
    stop_ids: Iterable[int] = (), max_accept: int | None = None
) -> TreeVerifier:
    """casspec_ref's own `verify_tree` with the harness's calling convention."""
    stops = tuple(stop_ids)

    def verifier(tree: DraftTree, laws: list[np.ndarray], rng: RandomSource) -> list[int]:
        result: VerifyResult = verify_tree(tree, laws, rng, stop_ids=stops, max_accept=max_accept)
        return result.emitted

    return verifier


def speculative_tokens(
    rng: RandomSource,
    *,
    target: ToyLM,
    drafts: Sequence[ToyLM],
    spec: DraftSpec | None,
    context: tuple[int, ...],
    n: int,
    verifier: TreeVerifier | None = None,
    stop_ids: Iterable[int] = (),
) -> tuple[int, ...]:
    """One speculative step (draft, verify), then plain AR sampling up to ``n`` tokens.

    The sequence ends early after a stop token. ``verifier`` defaults to `verify_tree`.
    """
    stops = frozenset(stop_ids)
    verify = verifier if verifier is not None else casspec_tree_verifier(stops)
    tree, contexts = draft_tree(spec, context, drafts, rng)
    laws = [target.law(c) for c in contexts]
    out = [int(t) for t in verify(tree, laws, rng)][:n]
    for i, token in enumerate(out):
        if token in stops:
            return tuple(out[: i + 1])
    while len(out) < n:
        token = int(rng.categorical(target.law((*context, *out))))
        out.append(token)
        if token in stops:
            break
    return tuple(out)


def ar_law(
    target: ToyLM,
    context: tuple[int, ...],
    n: int,
    *,
    stop_ids: Iterable[int] = (),
    exact: bool = False,
) -> Law:
    """The law of ``n`` tokens of plain AR sampling from ``target`` (ending early at a stop)."""
    stops = frozenset(stop_ids)
    law: Law = {}

    def walk(prefix: tuple[int, ...], prob: Prob) -> None:
        if len(prefix) == n or (prefix and prefix[-1] in stops):
            law[prefix] = law.get(prefix, 0) + prob
            return
        p = target.law((*context, *prefix))
        for token in range(p.shape[0]):
            mass = Fraction(p[token]) if exact else float(p[token])
            if mass > 0:
                walk((*prefix, token), prob * mass)

    walk((), Fraction(1) if exact else 1.0)
    return law


def spec_depth(spec: DraftSpec | None) -> int:
    """The depth of the deepest node a spec can draft."""
    if spec is None or not spec.children:
        return 0
    return 1 + max(spec_depth(c.then) for c in spec.children)


# ---------------------------------------------------------------------------------------------
# 3. Checking other implementations
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainInputs:
    """What a third-party chain verifier receives (K drafted tokens, vocabulary V).

    Attributes:
        target_probs: (K+1, V) processed target law p after each drafted prefix (row i: the law
            of the token after i drafted tokens; row K gives the bonus token).
        draft_probs: (K, V) the processed law q each drafted token was drawn from.
        draft_tokens: the K drafted tokens.
        target_logits: (K+1, V) raw target logits such that
            ``target_law(target_logits, temperature, top_k, top_p) == target_probs``, for
            implementations that process logits themselves. In exact mode (Fractions),
            they are log(p) in float64 and the transforms are off.
        temperature, top_k, top_p: the sampling settings of the target.
    """

    target_probs: np.ndarray
    draft_probs: np.ndarray
    draft_tokens: tuple[int, ...]
    target_logits: np.ndarray
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0


class ChainVerifier(Protocol):
    """The signature `check_verifier` needs: ``fn(inputs, rng) -> emitted tokens``.

    Return the tokens the step commits: the accepted prefix of ``inputs.draft_tokens``, then the
    residual sample or bonus token. All randomness must come from ``rng`` (``rng.bernoulli(prob)``
    for accept/reject, ``rng.categorical(law)`` for a token); see docs/oracle.md for a shim that
    adapts code calling ``torch.rand``.
    """

    def __call__(self, inputs: ChainInputs, rng: RandomSource) -> Sequence[int]: ...


@dataclass(frozen=True)
class CheckCase:
    """One case of `check_verifier`: a target and a draft toy model, K drafts, a context."""

    name: str
    target: ToyLM = field(compare=False)
    draft: ToyLM = field(compare=False)
    draft_length: int
    context: tuple[int, ...] = (0,)
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    @property
    def vocab_size(self) -> int:
        return self.target.vocab_size


@dataclass
class CheckReport:
    """The verdict of `check_verifier`."""

    lossless: bool
    worst_tv: float
    worst_case: str
    n_cases: int
    tolerance: float
    failing_cases: list[str]
    counterexample: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        return {
            "lossless": self.lossless,
            "worst_total_variation": self.worst_tv,
            "worst_case": self.worst_case,
            "cases": self.n_cases,
            "tolerance": self.tolerance,
            "failing_cases": self.failing_cases,
            "minimal_counterexample": self.counterexample,
        }

    def format(self) -> str:
        verdict = "LOSSLESS" if self.lossless else "NOT LOSSLESS"
        lines = [
            f"{verdict}: {self.n_cases} cases, worst total variation {self.worst_tv:.3e} "
            f"(case {self.worst_case}), tolerance {self.tolerance:.1e}"
        ]
        if self.counterexample is not None:
            lines.append(f"failing cases: {', '.join(self.failing_cases)}")
            lines.append("minimal counterexample:")
            lines.append(json.dumps(self.counterexample, indent=2))
        return "\n".join(lines)


def _chain_step(fn: ChainVerifier, case: CheckCase, rng: RandomSource) -> tuple[int, ...]:
    """Draft K tokens from the case's draft model, call ``fn``, finish with AR to K+1 tokens."""
    tokens: list[int] = []
    for _ in range(case.draft_length):
        tokens.append(int(rng.categorical(case.draft.law((*case.context, *tokens)))))
    prefixes = [(*case.context, *tokens[:i]) for i in range(case.draft_length + 1)]
    inputs = ChainInputs(
        target_probs=np.stack([case.target.law(c) for c in prefixes]),  # (K+1, V)
        draft_probs=np.stack([case.draft.law(c) for c in prefixes[:-1]]),  # (K, V)
        draft_tokens=tuple(tokens),
        target_logits=np.stack([case.target.raw_logits(c) for c in prefixes]),  # (K+1, V)
        temperature=case.temperature,
        top_k=case.top_k,
        top_p=case.top_p,
    )
    out = [int(t) for t in fn(inputs, rng)][: case.draft_length + 1]
    n = case.draft_length + 1
    while len(out) < n:
        out.append(int(rng.categorical(case.target.law((*case.context, *out)))))
    return tuple(out)


def _fraction_laws(laws: np.ndarray) -> list[np.ndarray]:
    """Rational laws close to float ones: integer weights out of 2**20, exactly normalized."""
    out = []
    for law in laws:
        weights = [int(round(float(v) * 2**20)) for v in law]
        total = sum(weights)
        out.append(np.array([Fraction(w, total) for w in weights], dtype=object))
    return out


def default_cases(*, exact: bool = False, seed: int = 20251030) -> list[CheckCase]:
    """The case families `check_verifier` runs, smallest first (so the first failure is minimal).

    Families: random laws; p = q; disjoint supports; greedy target (temperature 0); zeros in both
    laws; and (float64 only) temperature 0.6, top-k 2 and top-p 0.7 targets, where raw and
    processed laws differ.
    """
    gen = np.random.default_rng(seed)
    cases: list[CheckCase] = []
    for vocab, k in [(2, 1), (3, 1), (3, 2), (4, 2), (3, 3)]:
        families: list[tuple[str, float, int, float]] = [
            ("random", 1.0, 0, 1.0),
            ("p_equals_q", 1.0, 0, 1.0),
            ("disjoint", 1.0, 0, 1.0),
            ("greedy", 0.0, 0, 1.0),
            ("zeros", 1.0, 0, 1.0),
        ]
        if not exact:
            families += [("temperature", 0.6, 0, 1.0), ("top_k", 0.8, 2, 1.0)]
            families += [("top_p", 1.3, 0, 0.7)]
        for family, temperature, top_k, top_p in families:
            target_logits = gen.normal(0.0, 1.5, size=(3, vocab))  # (M, V)
            draft_logits = gen.normal(0.0, 1.5, size=(3, vocab))  # (M, V)
            if family == "disjoint":
                target_logits[:, 1::2] = -np.inf
                draft_logits[:, 0::2] = -np.inf
            if family == "zeros":
                target_logits[:, vocab - 1] = -np.inf
                draft_logits[:, 0] = -np.inf
            target = ToyLM.from_logits(list(target_logits), temperature, top_k, top_p, salt=1)
            draft = ToyLM.from_logits(list(draft_logits), temperature or 1.0, top_k, top_p, salt=2)
            if family == "p_equals_q":
                draft = target
            if exact:
                target = ToyLM(_fraction_laws(np.stack(target.laws)), salt=1)
                draft = (
                    target
                    if family == "p_equals_q"
                    else ToyLM(_fraction_laws(np.stack(draft.laws)), salt=2)
                )
            cases.append(
                CheckCase(
                    name=f"{family}-V{vocab}-K{k}",
                    target=target,
                    draft=draft,
                    draft_length=k,
                    temperature=temperature,
                    top_k=top_k,
                    top_p=top_p,
                )
            )
    return cases


def check_verifier(
    fn: ChainVerifier,
    *,
    cases: Sequence[CheckCase] | None = None,
    exact: bool = False,
    tolerance: float | None = None,
) -> CheckReport:
    """Say whether the chain verifier ``fn`` is lossless, by exact laws over ``cases``.

    For every case, the exact law of "draft K tokens from q, call ``fn``, finish with plain AR up
    to K+1 tokens" is compared with the law of K+1 plain AR tokens. ``tolerance`` on the total
    variation defaults to 1e-9 in float64 and 0 with ``exact=True`` (Fractions).
    """
    if tolerance is None:
        tolerance = 0.0 if exact else 1e-9
    if cases is None:
        cases = default_cases(exact=exact)
    worst_tv, worst_case = 0.0, ""
    failing: list[str] = []
    counterexample: dict[str, Any] | None = None
    for case in cases:
        n = case.draft_length + 1
        got = exact_law(functools.partial(_chain_step, fn, case), exact=exact)
        want = ar_law(case.target, case.context, n, exact=exact)
        tv = float(total_variation(got, want))
        if tv > worst_tv or not worst_case:
            worst_tv, worst_case = tv, case.name
        if tv > tolerance:
            failing.append(case.name)
            if counterexample is None:
                counterexample = _describe(case, got, want, tv)
    return CheckReport(
        lossless=not failing,
        worst_tv=worst_tv,
        worst_case=worst_case,
        n_cases=len(cases),
        tolerance=tolerance,
        failing_cases=failing,
        counterexample=counterexample,
    )


def _describe(case: CheckCase, got: Law, want: Law, tv: float) -> dict[str, Any]:
    keys = sorted(set(got) | set(want), key=lambda k: -abs(float(got.get(k, 0) - want.get(k, 0))))
    root = case.context
    return {
        "case": case.name,
        "vocab_size": case.vocab_size,
        "draft_length": case.draft_length,
        "temperature": case.temperature,
        "top_k": case.top_k,
        "top_p": case.top_p,
        "total_variation": tv,
        "target_law_at_root": [float(v) for v in case.target.law(root)],
        "draft_law_at_root": [float(v) for v in case.draft.law(root)],
        "worst_outcomes": [
            {
                "tokens": list(k),  # type: ignore[call-overload]
                "got": float(got.get(k, 0)),
                "want": float(want.get(k, 0)),
            }
            for k in keys[:3]
        ],
    }


def reference_chain_verifier(inputs: ChainInputs, rng: RandomSource) -> list[int]:
    """casspec_ref's `verify_tree` behind the `ChainVerifier` signature (a chain tree)."""
    tree = DraftTree(0)
    node = 0
    for i, token in enumerate(inputs.draft_tokens):
        node = tree.add_child(node, token, ChildRule.INDEPENDENT, inputs.draft_probs[i])
    return verify_tree(tree, list(inputs.target_probs), rng).emitted


def raw_bonus_replica(inputs: ChainInputs, rng: RandomSource) -> list[int]:
    """A replica of a shipped bug (docs/method.md §6): the bonus token from *unprocessed* logits.

    Everything else is right. It is here only so that the CLI can demonstrate a failing check:
    ``python -m casspec_ref oracle check casspec_ref.proof.oracle:raw_bonus_replica``.
    """
    emitted = reference_chain_verifier(inputs, rng)
    k = len(inputs.draft_tokens)
    if len(emitted) == k + 1:  # every draft accepted: the last token is the bonus token
        raw = target_law(torch.tensor(inputs.target_logits[k]), 1.0).numpy()  # (V,)
        emitted[-1] = int(rng.categorical(raw))
    return emitted


def run_check_command(
    target: str,
    *,
    as_json: bool = False,
    exact: bool = False,
    tolerance: float | None = None,
    stream: TextIO | None = None,
) -> int:
    """The CLI ``oracle check MODULE:FUNCTION``: print the report; exit code 0 lossless, 1 not
    lossless, 2 bad target (not importable, not a callable, or it raised)."""
    out = stream if stream is not None else sys.stdout
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        print(f"error: target must be MODULE:FUNCTION, got {target!r}", file=sys.stderr)
        return 2
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        print(f"error: cannot import module {module_name!r}: {err}", file=sys.stderr)
        return 2
    fn = module
    for part in attr.split("."):
        fn = getattr(fn, part, None)  # type: ignore[assignment]
        if fn is None:
            print(f"error: {module_name!r} has no attribute {attr!r}", file=sys.stderr)
            return 2
    if not callable(fn):
        print(f"error: {target!r} is not callable", file=sys.stderr)
        return 2
    try:
        report = check_verifier(fn, exact=exact, tolerance=tolerance)
    except Exception as err:  # a third-party function may fail in any way: report, do not crash
        print(f"error: {target} raised {type(err).__name__}: {err}", file=sys.stderr)
        return 2
    if as_json:
        print(json.dumps({"target": target, **report.to_json()}, indent=2), file=out)
    else:
        print(f"{target}: {report.format()}", file=out)
    return 0 if report.lossless else 1


# ---------------------------------------------------------------------------------------------
# 3b. JSON test vectors
# ---------------------------------------------------------------------------------------------

VECTORS_PATH = Path(__file__).parents[1] / "data" / "oracle_vectors.json"
VECTORS_FORMAT = "casspec-oracle-vectors/1"


def _frac_str(value: Prob) -> str:
    f = Fraction(value)
    return f"{f.numerator}/{f.denominator}"


def _vector_trees() -> list[tuple[str, DraftTree, list[np.ndarray]]]:
    """Fixed trees with rational laws: every node rule, duplicates, zeros, one-hots."""
    f = Fraction

    def law(*values: int) -> np.ndarray:
        total = sum(values)
        return np.array([f(v, total) for v in values], dtype=object)

    cases = []
    p, q = law(2, 3, 1, 4), law(1, 1, 1, 1)
    chain = DraftTree(0)
    a = chain.add_child(0, 3, ChildRule.INDEPENDENT, q)
    chain.add_child(a, 1, ChildRule.INDEPENDENT, law(0, 5, 3, 2))
    cases.append(("chain-2", chain, [p, law(1, 1, 2, 0), law(3, 0, 0, 1)]))

    indep = DraftTree(1)
    indep.add_child(0, 2, ChildRule.INDEPENDENT, law(1, 2, 3, 0))
    indep.add_child(0, 2, ChildRule.INDEPENDENT, law(0, 0, 1, 1))
    indep.add_child(0, 0, ChildRule.INDEPENDENT, law(1, 0, 0, 0))
    cases.append(("independent-3", indep, [law(1, 1, 1, 1), law(0, 1, 0, 0), p, law(2, 1, 0, 1)]))

    wor = DraftTree(2)
    wor_q = law(4, 3, 2, 1)
    w1 = wor.add_child(0, 0, ChildRule.WITHOUT_REPLACEMENT, wor_q)
    wor.add_child(0, 2, ChildRule.WITHOUT_REPLACEMENT, wor_q)
    wor.add_child(w1, 3, ChildRule.DETERMINISTIC)
    cases.append(
        ("without-replacement", wor, [law(1, 2, 3, 4), law(1, 1, 1, 1), p, law(5, 1, 1, 1)])
    )

    det = DraftTree(3)
    det.add_child(0, 1, ChildRule.DETERMINISTIC)
    det.add_child(0, 1, ChildRule.DETERMINISTIC)
    det.add_child(0, 3, ChildRule.DETERMINISTIC)
    cases.append(
        ("deterministic-duplicate", det, [p, law(1, 0, 0, 0), law(0, 1, 0, 0), law(1, 1, 1, 1)])
    )

    greedy = DraftTree(0)
    g1 = greedy.add_child(0, 3, ChildRule.DETERMINISTIC)
    greedy.add_child(g1, 2, ChildRule.INDEPENDENT, law(1, 1, 1, 1))
    cases.append(("greedy-one-hot", greedy, [law(0, 0, 0, 1), law(0, 0, 1, 0), law(0, 1, 0, 0)]))
    return cases


def _tree_json(tree: DraftTree) -> list[dict[str, Any]]:
    nodes = []
    for i in range(1, len(tree)):
        q = tree.draft_probs(i)
        rule = tree.child_rule(tree.parent(i))
        assert rule is not None
        nodes.append(
            {
                "token": tree.token(i),
                "parent": tree.parent(i),
                "rule": rule.value,
                "draft_probs": None if q is None else [_frac_str(v) for v in q],
            }
        )
    return nodes


def tree_from_json(root_token: int, nodes: list[dict[str, Any]]) -> DraftTree:
    """Rebuild a `DraftTree` from the ``nodes`` of a test vector."""
    tree = DraftTree(root_token)
    for node in nodes:
        q = node["draft_probs"]
        law = None if q is None else np.array([Fraction(v) for v in q], dtype=object)
        tree.add_child(node["parent"], node["token"], ChildRule(node["rule"]), law)
    return tree


def _emitted(tree: DraftTree, laws: list[np.ndarray], rng: RandomSource) -> list[int]:
    return verify_tree(tree, laws, rng).emitted


def build_vectors() -> dict[str, Any]:
    """The test vectors: for each fixed tree and target laws, the exact law of the emitted
    tokens under casspec_ref's verifier (the rules of docs/method.md §5), as "a/b" strings."""
    vectors = []
    for name, tree, laws in _vector_trees():
        law = exact_law(functools.partial(_emitted, tree, laws), exact=True)
        vectors.append(
            {
                "name": name,
                "vocab_size": len(laws[0]),
                "root_token": tree.token(0),
                "nodes": _tree_json(tree),
                "target_probs": [[_frac_str(v) for v in p] for p in laws],
                "emitted_law": {
                    " ".join(str(t) for t in k): _frac_str(v)  # type: ignore[attr-defined]
                    for k, v in sorted(law.items())  # type: ignore[type-var]
                },
            }
        )
    return {
        "format": VECTORS_FORMAT,
        "description": (
            "Exact output laws of lossless tree verification (casspec_ref, docs/method.md §5). "
            "Node 0 is the root; nodes are listed from 1 in order; 'rule' is how the parent's "
            "children were proposed; target_probs[i] is the processed target law at node i; "
            "emitted_law maps the space-separated emitted tokens (accepted drafts, then the "
            "next token) to its probability. See docs/oracle.md."
        ),
        "vectors": vectors,
    }


def write_vectors(path: Path = VECTORS_PATH) -> None:
    """Regenerate the JSON test vectors."""
    path.write_text(json.dumps(build_vectors(), indent=1) + "\n")


def load_vectors(path: Path = VECTORS_PATH) -> dict[str, Any]:
    """Read the JSON test vectors (plain JSON; no pickle anywhere)."""
    if not path.is_file():
        raise FileNotFoundError(f"no oracle vectors at {path}; regenerate with write_vectors()")
    data: dict[str, Any] = json.loads(path.read_text())
    if data.get("format") != VECTORS_FORMAT:
        raise ValueError(f"{path} is not in format {VECTORS_FORMAT}")
    return data
