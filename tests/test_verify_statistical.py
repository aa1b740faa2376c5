"""A seeded statistical second line: repeated speculative steps against plain AR sampling.

The exact-law tests prove one step lossless; this one runs the loop as a decoder does (draft a
tree with `TorchRandomSource`, `verify_tree`, commit, repeat) on a context-dependent toy model at
temperature 0.8 with top-k 3, and compares the joint law of the first 3 emitted tokens with that
of plain AR sampling from the same processed law, by a two-sample G-test of homogeneity.

False-failure rate: the threshold is the 1 - 1e-6 quantile of the chi-square law, so an
unseeded run of a lossless verifier fails with probability about 1e-6 (the G statistic is only
asymptotically chi-square; cells with fewer than 5 expected draws are pooled to keep that
approximation good). The seeds are fixed, so the test is deterministic. The control test runs
the same procedure on the raw-bonus mutant and must reject it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
import pytest
import torch
from test_mutants import raw_bonus_verifier

from casspec_ref.proof import (
    ChildSpec,
    DraftSpec,
    ToyLM,
    TreeVerifier,
    casspec_tree_verifier,
    draft_tree,
)
from casspec_ref.sampling import TorchRandomSource
from casspec_ref.tree import ChildRule

FALSE_FAILURE_RATE = 1e-6
N_SAMPLES = 20_000
N_TOKENS = 3

SPEC = DraftSpec(
    ChildRule.WITHOUT_REPLACEMENT,
    (
        ChildSpec(draft=0, then=DraftSpec(ChildRule.DETERMINISTIC, (ChildSpec(draft=1),))),
        ChildSpec(draft=0),
    ),
)


def toy_models() -> tuple[ToyLM, list[ToyLM]]:
    gen = np.random.default_rng(7)
    target = ToyLM.from_logits(list(gen.normal(0, 1.2, (5, 5))), 0.8, top_k=3, salt=3)
    draft_a = ToyLM.from_logits(list(gen.normal(0, 1.2, (3, 5))), 1.0, salt=4)
    draft_b = ToyLM.from_logits(list(gen.normal(0, 1.2, (2, 5))), 0.5, salt=5)
    return target, [draft_a, draft_b]


def speculative_samples(
    make_verifier: Callable[[tuple[int, ...]], TreeVerifier], seed: int
) -> Counter:
    """First N_TOKENS tokens of repeated steps; ``make_verifier(context)`` verifies one step."""
    target, drafts = toy_models()
    rng = TorchRandomSource(seed)
    counts: Counter = Counter()
    for _ in range(N_SAMPLES):
        out: list[int] = []
        while len(out) < N_TOKENS:
            context = (0, *out)
            tree, contexts = draft_tree(SPEC, context, drafts, rng)
            verify = make_verifier(context)
            out.extend(verify(tree, [target.law(c) for c in contexts], rng))
        counts[tuple(out[:N_TOKENS])] += 1
    return counts


def ar_samples(seed: int) -> Counter:
    target, _ = toy_models()
    rng = TorchRandomSource(seed)
    counts: Counter = Counter()
    for _ in range(N_SAMPLES):
        out: list[int] = []
        while len(out) < N_TOKENS:
            out.append(rng.categorical(target.law((0, *out))))
        counts[tuple(out)] += 1
    return counts


def g_test_p_value(a: Counter, b: Counter) -> float:
    """Two-sample G-test of homogeneity; cells expected < 5 in either sample are pooled."""
    cells = sorted(set(a) | set(b))
    table = np.array([[a[c] for c in cells], [b[c] for c in cells]], dtype=np.float64)  # (2, C)
    expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()  # (2, C)
    small = (expected < 5).any(axis=0)
    if small.any():
        pooled = table[:, small].sum(1, keepdims=True)  # (2, 1)
        table = np.concatenate([table[:, ~small], pooled], axis=1)  # (2, C')
        expected = table.sum(1, keepdims=True) * table.sum(0, keepdims=True) / table.sum()
    nonzero = table > 0
    g = 2.0 * float((table[nonzero] * np.log(table[nonzero] / expected[nonzero])).sum())
    dof = table.shape[1] - 1
    # The chi-square survival function through the regularized upper incomplete gamma.
    return float(torch.special.gammaincc(torch.tensor(dof / 2.0), torch.tensor(g / 2.0)))


@pytest.mark.slow
def test_speculative_loop_matches_ar_sampling():
    ours = speculative_samples(lambda context: casspec_tree_verifier(), 1)
    p_value = g_test_p_value(ours, ar_samples(2))
    assert p_value > FALSE_FAILURE_RATE


@pytest.mark.slow
def test_statistical_test_rejects_the_raw_bonus_mutant():
    target, _ = toy_models()
    mutant = speculative_samples(lambda context: raw_bonus_verifier(target, context), 1)
    assert g_test_p_value(mutant, ar_samples(2)) < FALSE_FAILURE_RATE
