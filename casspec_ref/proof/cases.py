"""The catalogue of cases the checker runs: chains, trees and whole decoding loops.

Every case is a pair of context-dependent toy models (`ToyLM`) small enough to enumerate, with a
family name saying what it probes. Cases are listed smallest first, so the first failing case
is a minimal counterexample. In exact mode (Fractions) every law is rational: temperature 1/2
squares the raw law, top-k and top-p keep a prefix of it, all renormalized exactly, so the
transformed families run in exact mode too.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TypeVar

import numpy as np
import torch

from casspec_ref.proof.harness import ChildSpec, DraftSpec, ToyLM, spec_depth
from casspec_ref.tree import ChildRule

DEFAULT_SEED = 20251030

#: The chain families, in the order they are listed.
CHAIN_FAMILIES = (
    "random",
    "p_equals_q",
    "disjoint",
    "greedy",
    "zeros",
    "temperature",
    "top_k",
    "top_p",
    "point_mass",
)
TREE_FAMILIES = ("chain", "independent", "mixed_levels", "without_replacement", "deterministic")
LOOP_FAMILIES = ("plain", "temperature")


@dataclass(frozen=True)
class CheckCase:
    """One chain case: a target and a draft toy model, K drafts, a context."""

    name: str
    target: ToyLM = field(compare=False)
    draft: ToyLM = field(compare=False)
    draft_length: int
    context: tuple[int, ...] = (0,)
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    family: str = ""

    @property
    def vocab_size(self) -> int:
        return self.target.vocab_size


@dataclass(frozen=True)
class TreeCase:
    """One tree case: a target, the draft models of each level, and the tree's shape."""

    name: str
    family: str
    target: ToyLM = field(compare=False)
    drafts: tuple[ToyLM, ...] = field(compare=False)
    spec: DraftSpec = field(compare=False)
    context: tuple[int, ...] = (0,)

    @property
    def vocab_size(self) -> int:
        return self.target.vocab_size

    @property
    def draft_length(self) -> int:
        return spec_depth(self.spec)


@dataclass(frozen=True)
class LoopCase:
    """One loop case: a target and a draft model given by raw logits, a sampling temperature,
    a prompt, and the number of new tokens whose law is compared (``n_tokens``)."""

    name: str
    family: str
    target: ToyLM = field(compare=False)
    draft: ToyLM = field(compare=False)
    temperature: float
    prompt: tuple[int, ...]
    n_tokens: int

    @property
    def vocab_size(self) -> int:
        return self.target.vocab_size

    @property
    def draft_length(self) -> int:
        return self.n_tokens


def _fraction_laws(laws: np.ndarray) -> list[np.ndarray]:
    """Rational laws close to float ones: integer weights out of 2**20, exactly normalized."""
    out = []
    for law in laws:
        weights = [int(round(float(v) * 2**20)) for v in law]
        total = sum(weights)
        out.append(np.array([Fraction(w, total) for w in weights], dtype=object))
    return out


def rational_process(
    raw: np.ndarray, temperature: Fraction, top_k: int = 0, top_p: Fraction = Fraction(1)
) -> np.ndarray:
    """The processed law of a rational raw law, exactly: temperature 1/n raises it to the n-th
    power, then top-k and top-p keep a prefix in decreasing order (ties: lower ids first),
    as `casspec_ref.sampling.target_law` does in floats."""
    power = 1 / temperature
    if power.denominator != 1:
        raise ValueError(f"exact temperature must be 1/n for an integer n, got {temperature}")
    law = [Fraction(v) ** int(power) for v in raw]
    total = sum(law)
    law = [v / total for v in law]
    order = sorted(range(len(law)), key=lambda i: (-law[i], i))
    keep = set(order[:top_k]) if top_k else set(order)
    if top_p < 1:
        kept, mass = set(), Fraction(0)
        for i in order:
            if mass < top_p:
                kept.add(i)
            mass += law[i]
        keep &= kept
    total = sum(law[i] for i in keep)
    return np.array([law[i] / total if i in keep else Fraction(0) for i in range(len(law))])


def _exact_toy(
    raw_logits: np.ndarray, temperature: float, top_k: int, top_p: float, salt: int
) -> ToyLM:
    raw = _fraction_laws(torch.softmax(torch.tensor(raw_logits), -1).numpy())
    temp = Fraction(1) if temperature == 1.0 else Fraction(1, 2)
    laws = [rational_process(r, temp, top_k, Fraction(top_p).limit_denominator(100)) for r in raw]
    laws = [np.array(law, dtype=object) for law in laws]
    return ToyLM(laws, salt, raw_laws=raw, logits=list(np.log(np.asarray(raw, dtype=float))))


#: The settings of each chain family: (temperature, top_k, top_p); exact mode uses
#: temperature 1/2 and top-p 7/10 (rational) where floats use 0.6 and 0.7.
_SETTINGS = {
    "random": (1.0, 0, 1.0),
    "p_equals_q": (1.0, 0, 1.0),
    "disjoint": (1.0, 0, 1.0),
    "greedy": (0.0, 0, 1.0),
    "zeros": (1.0, 0, 1.0),
    "temperature": (0.6, 0, 1.0),
    "top_k": (0.8, 2, 1.0),
    "top_p": (1.3, 0, 0.7),
}
_EXACT_SETTINGS = {"temperature": (0.5, 0, 1.0), "top_k": (1.0, 2, 1.0), "top_p": (1.0, 0, 0.7)}


def default_cases(*, exact: bool = False, seed: int = DEFAULT_SEED) -> list[CheckCase]:
    """The chain cases `check_verifier` runs, smallest first (so the first failure is minimal).

    Families: random laws; p = q; disjoint supports; greedy target (temperature 0); zeros in both
    laws; temperature, top-k 2 and top-p targets (where raw and processed laws differ; rational
    in exact mode), on vocabularies 2-4 with K = 1-3, then random and top-k at V = 12 and 16,
    then point-mass drafts (prompt lookup) at V = 3 and 4.
    """
    gen = np.random.default_rng(seed)
    cases: list[CheckCase] = []
    laws = CHAIN_FAMILIES[:-1]  # point_mass comes last, from its own generator (below)
    shapes: list[tuple[int, int, Sequence[str]]] = [
        (v, k, laws) for v, k in [(2, 1), (3, 1), (3, 2), (4, 2), (3, 3)]
    ]
    shapes += [(12, 1, ("random", "top_k")), (16, 1, ("random",))]
    for vocab, k, families in shapes:
        for family in families:
            temperature, top_k, top_p = _SETTINGS[family]
            if vocab > 4 and family == "top_k":
                top_k = 8
            target_logits = gen.normal(0.0, 1.5, size=(3, vocab))  # (M, V)
            draft_logits = gen.normal(0.0, 1.5, size=(3, vocab))  # (M, V)
            if family == "disjoint":
                target_logits[:, 1::2] = -np.inf
                draft_logits[:, 0::2] = -np.inf
            if family == "zeros":
                target_logits[:, vocab - 1] = -np.inf
                draft_logits[:, 0] = -np.inf
            if exact and family in _EXACT_SETTINGS:
                temperature, top_k, top_p = _EXACT_SETTINGS[family]
                top_k = 8 if top_k and vocab > 4 else top_k
                target = _exact_toy(target_logits, temperature, top_k, top_p, salt=1)
                draft = _exact_toy(draft_logits, temperature, top_k, top_p, salt=2)
            else:
                target = ToyLM.from_logits(list(target_logits), temperature, top_k, top_p, salt=1)
                draft = ToyLM.from_logits(
                    list(draft_logits), temperature or 1.0, top_k, top_p, salt=2
                )
                if exact:
                    target = ToyLM(_fraction_laws(np.stack(target.laws)), salt=1)
                    draft = ToyLM(_fraction_laws(np.stack(draft.laws)), salt=2)
            if family == "p_equals_q":
                draft = target
            cases.append(
                CheckCase(
                    name=f"{family}-V{vocab}-K{k}",
                    target=target,
                    draft=draft,
                    draft_length=k,
                    temperature=temperature,
                    top_k=top_k,
                    top_p=top_p,
                    family=family,
                )
            )
    return cases + _point_mass_cases(exact, seed)


def _point_mass_cases(exact: bool, seed: int) -> list[CheckCase]:
    """Drafts whose law is a point mass on the drafted token (prompt lookup, n-grams): q(x) = 1,
    so acceptance is p(x) and the residual is p without x. V = 3, K = 2 and V = 4, K = 3."""
    gen = np.random.default_rng(seed + 1)
    cases = []
    for vocab, k in [(3, 2), (4, 3)]:
        target = ToyLM.from_logits(list(gen.normal(0.0, 1.5, size=(3, vocab))), 1.0, salt=1)
        if exact:
            target = ToyLM(_fraction_laws(np.stack(target.laws)), salt=1)
        one = Fraction(1) if exact else 1.0
        masses = [np.array([one * (i == t) for i in range(vocab)]) for t in (0, 1, vocab - 1)]
        draft = ToyLM(masses, salt=2)
        name = f"point_mass-V{vocab}-K{k}"
        cases.append(CheckCase(name, target, draft, k, family="point_mass"))
    return cases


def _tree_specs() -> list[tuple[str, DraftSpec]]:
    indep, wor, det = ChildRule.INDEPENDENT, ChildRule.WITHOUT_REPLACEMENT, ChildRule.DETERMINISTIC
    leaf_i = DraftSpec(indep, (ChildSpec(0),))
    return [
        ("chain", DraftSpec(indep, (ChildSpec(0, then=leaf_i),))),
        ("independent", DraftSpec(indep, (ChildSpec(0, then=leaf_i), ChildSpec(0)))),
        ("mixed_levels", DraftSpec(indep, (ChildSpec(0), ChildSpec(1, then=leaf_i)))),
        ("without_replacement", DraftSpec(wor, (ChildSpec(0, then=leaf_i), ChildSpec(0)))),
        (
            "deterministic",
            DraftSpec(
                det,
                (
                    ChildSpec(0, rank=0, then=DraftSpec(det, (ChildSpec(0), ChildSpec(0, 1)))),
                    ChildSpec(0, rank=1),
                ),
            ),
        ),
    ]


def tree_cases(*, exact: bool = False, seed: int = DEFAULT_SEED) -> list[TreeCase]:
    """The tree cases `check_tree_verifier` runs: chains, siblings drawn independently (with
    replacement) from one or from two draft models (mixed draft levels), siblings drawn without
    replacement, and deterministic (top-k) children, on V = 2, 3 and 5, smallest first. V = 5 is
    there for the without-replacement rule: with V = 2 the second sibling is forced, and small
    vocabularies can hide the unconditional-q bug (docs/oracle.md)."""
    gen = np.random.default_rng(seed + 1)
    cases = []
    for vocab in (2, 3, 5):
        for family, spec in _tree_specs():
            logits = [gen.normal(0.0, 1.5, size=(3, vocab)) for _ in range(3)]
            models = [
                ToyLM.from_logits(list(x), 1.0, salt=s)
                for s, x in zip((1, 2, 3), logits, strict=True)
            ]
            if exact:
                models = [
                    ToyLM(_fraction_laws(np.stack(m.laws)), salt=s)
                    for s, m in zip((1, 2, 3), models, strict=True)
                ]
            cases.append(
                TreeCase(f"tree-{family}-V{vocab}", family, models[0], tuple(models[1:]), spec)
            )
    return cases


def loop_cases(*, seed: int = DEFAULT_SEED) -> list[LoopCase]:
    """The loop cases `check_loop` runs: the first 4 new tokens at temperature 1 on V = 2, and
    the first 3 at temperature 1/2 on V = 3 (where a drafter that reports q at the wrong
    temperature is wrong). A loop drafting 2 tokens a step needs at least two steps for them."""
    gen = np.random.default_rng(seed + 2)
    cases = []
    for family, temperature, vocab, n_tokens in (("plain", 1.0, 2, 4), ("temperature", 0.5, 3, 3)):
        target_logits = gen.normal(0.0, 1.5, size=(3, vocab))
        draft_logits = gen.normal(0.0, 1.5, size=(3, vocab))
        target = ToyLM.from_logits(list(target_logits), temperature, salt=1)
        draft = ToyLM.from_logits(list(draft_logits), temperature, salt=2)
        name = f"loop-{family}-V{vocab}-M{n_tokens}"
        cases.append(LoopCase(name, family, target, draft, temperature, (0,), n_tokens))
    return cases


C = TypeVar("C", CheckCase, TreeCase, LoopCase)


def select_cases(
    cases: Iterable[C],
    *,
    families: Iterable[str] | None = None,
    vocab: Iterable[int] | None = None,
    k: Iterable[int] | None = None,
) -> list[C]:
    """The cases of the given families, vocabulary sizes and draft lengths (None: all)."""
    fams = set(families) if families is not None else None
    vocabs = set(vocab) if vocab is not None else None
    ks = set(k) if k is not None else None
    out = [
        c
        for c in cases
        if (fams is None or c.family in fams)
        and (vocabs is None or c.vocab_size in vocabs)
        and (ks is None or c.draft_length in ks)
    ]
    return out
