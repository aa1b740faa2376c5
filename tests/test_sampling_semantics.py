"""What `target_law` means, restated: temperature, then top-k, then top-p, and nothing else.

`restated_law` computes the processed law in numpy from its definition (docs/method.md §1):
divide the logits by the temperature; keep the ``top_k`` largest (a stable descending sort:
equal logits keep the lower ids); renormalise; keep the minimal prefix of the decreasing order
(equal probabilities: lower ids first) whose mass before each kept token is below ``top_p``;
renormalise. It shares no code with casspec_ref.sampling or base/nucleus.py.

The drafts and the target both call `target_law`, so a wrong order of the transforms keeps the
speculative loop lossless against the wrong law: no law test of the loop can see it. These
tests can. The smallest case where the order matters is pinned (`test_top_k_comes_before_top_p`).

transformers' `TemperatureLogitsWarper`, `TopKLogitsWarper` and `TopPLogitsWarper` (applied in
that order, as its `generate` does) give the same law wherever no tie and no rounding decides
(`test_agrees_with_transformers_warpers`). Where one does, the two differ, by design, and
`test_transformers_ties_differ_as_documented` pins each difference (sampling.py's docstring
gives the reasons).
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch
from hypothesis import assume, example, given
from hypothesis import strategies as st

from casspec_ref.sampling import target_law

#: The logits of probabilities (0.4, 0.35, 0.25): the smallest case where top-k before top-p
#: and top-p before top-k differ (`test_top_k_comes_before_top_p`).
V3_ORDER_CASE = [math.log(0.4), math.log(0.35), math.log(0.25)]
HAS_TRANSFORMERS = importlib.util.find_spec("transformers") is not None
needs_transformers = pytest.mark.skipif(
    not HAS_TRANSFORMERS, reason="transformers is not installed (the compare extra)"
)
#: A token whose mass before it is this close to top_p is decided by rounding, not by the rule.
BOUNDARY = 1e-9


def restated_law(
    logits: list[float], temperature: float, top_k: int, top_p: float
) -> tuple[np.ndarray, np.ndarray]:
    """(the processed law (V,), the mass before each token in top-p's order (V,), inf for
    tokens top-k removed), float64, for ``temperature > 0``."""
    x = np.asarray(logits, dtype=np.float64) / temperature  # (V,)
    v = x.shape[0]
    if 0 < top_k < v:
        order = np.argsort(-x, kind="stable")  # (V,) decreasing, equal logits by id
        x = x.copy()
        x[order[top_k:]] = -np.inf
    probs = np.exp(x - x.max())  # (V,)
    probs /= probs.sum()
    mass_before = np.full(v, np.inf)
    if top_p < 1.0:
        order = sorted(range(v), key=lambda i: (-probs[i], i))
        running = 0.0
        for i in order:
            if probs[i] > 0:
                mass_before[i] = running
            running += probs[i]
        probs = np.where(mass_before < top_p, probs, 0.0)
        probs /= probs.sum()
    return probs, mass_before


def _decided_by_rounding(logits: list[float], temperature: float, top_k: int, top_p: float) -> bool:
    """True when a token's fate rests on rounding: its mass before it within `BOUNDARY` of
    top_p, or two different logits closer than rounding can tell apart after the division."""
    _, mass_before = restated_law(logits, temperature, top_k, top_p)
    finite = mass_before[np.isfinite(mass_before)]
    if top_p < 1.0 and np.any(np.abs(finite - top_p) < BOUNDARY):
        return True
    x = np.sort(np.asarray(logits, dtype=np.float64))
    gaps = np.diff(x)
    return bool(np.any((gaps > 0) & (gaps < 1e-9)))


logit_lists = st.lists(
    st.floats(-5, 5, allow_nan=False, allow_infinity=False), min_size=1, max_size=8
)


@given(
    logits=logit_lists,
    temperature=st.sampled_from([0.3, 0.7, 1.0, 1.6]),
    top_k=st.integers(1, 8),
    top_p=st.floats(0.05, 0.99),
)
@example(logits=V3_ORDER_CASE, temperature=1.0, top_k=2, top_p=0.5)
@example(logits=[2.0, 2.0, 2.0, 1.0], temperature=1.0, top_k=2, top_p=0.6)  # a tie at the k-th
@example(logits=[1.0, 1.0, 1.0], temperature=0.5, top_k=3, top_p=0.5)  # a tie at top-p
def test_target_law_is_the_restated_law(logits, temperature, top_k, top_p):
    """top-k and top-p together, over Hypothesis examples: the same kept tokens and the same law
    (1e-12), except where rounding decides (a token's mass before it within 1e-9 of top_p)."""
    assume(not _decided_by_rounding(logits, temperature, top_k, top_p))
    got = target_law(torch.tensor(logits, dtype=torch.float64), temperature, top_k, top_p).numpy()
    want, _ = restated_law(logits, temperature, top_k, top_p)
    assert np.flatnonzero(got).tolist() == np.flatnonzero(want).tolist(), (got, want)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)


def test_top_k_comes_before_top_p():
    """The smallest case where the order shows: probabilities (0.4, 0.35, 0.25), T = 1,
    top_k = 2, top_p = 0.5. top-k first leaves (0.533, 0.467): the first token alone holds 0.5,
    so top-p keeps it alone, (1, 0, 0). top-p first would keep the first two of the original
    law and give (0.533, 0.467, 0)."""
    logits = torch.tensor(V3_ORDER_CASE, dtype=torch.float64)
    law = target_law(logits, 1.0, top_k=2, top_p=0.5)
    assert law.tolist() == [1.0, 0.0, 0.0]
    # Each transform alone keeps two tokens: the composition, not either one, gives one.
    assert np.count_nonzero(target_law(logits, 1.0, top_k=2).numpy()) == 2
    assert np.count_nonzero(target_law(logits, 1.0, top_p=0.5).numpy()) == 2


# --- transformers' warpers ---------------------------------------------------------------------


def transformers_law(logits: list[float], temperature: float, top_k: int, top_p: float):
    """The law transformers samples from: its three warpers in `generate`'s order, then softmax."""
    import transformers as warpers

    scores = torch.tensor([logits], dtype=torch.float64)  # (1, V)
    ids = torch.zeros((1, 1), dtype=torch.long)
    scores = warpers.TemperatureLogitsWarper(temperature)(ids, scores)
    if top_k > 0:
        scores = warpers.TopKLogitsWarper(top_k)(ids, scores)
    if top_p < 1.0:
        scores = warpers.TopPLogitsWarper(top_p)(ids, scores)
    return torch.softmax(scores, dim=-1)[0].numpy()


def _has_ties(logits: list[float]) -> bool:
    return len(set(logits)) < len(logits)


@needs_transformers
@given(
    logits=logit_lists,
    temperature=st.sampled_from([0.3, 0.7, 1.0, 1.6]),
    top_k=st.integers(0, 8),
    top_p=st.floats(0.05, 1.0),
)
@example(logits=V3_ORDER_CASE, temperature=1.0, top_k=2, top_p=0.5)
def test_agrees_with_transformers_warpers(logits, temperature, top_k, top_p):
    """Without ties and away from a rounding boundary, transformers' warpers keep the same
    tokens and give the same law (1e-12)."""
    assume(not _has_ties(logits) and not _decided_by_rounding(logits, temperature, top_k, top_p))
    theirs = transformers_law(logits, temperature, top_k, top_p)
    ours = target_law(torch.tensor(logits, dtype=torch.float64), temperature, top_k, top_p).numpy()
    assert np.flatnonzero(ours).tolist() == np.flatnonzero(theirs).tolist(), (ours, theirs)
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-12)


def _kept(law: np.ndarray) -> list[int]:
    return np.flatnonzero(law).tolist()


@needs_transformers
def test_transformers_ties_differ_as_documented():
    """The two tie rules where transformers differs (sampling.py's docstring says why ours):

    - top-k: transformers keeps every token tied with the k-th largest logit (3 of 4 here
      with k = 2); ours keeps exactly k, the lower ids.
    - top-p: transformers walks an ascending sort and drops the smallest first, so among equal
      probabilities it drops the lower ids; ours keeps the lower ids (a stable descending sort).

    Both keep the same number of tokens at a top-p tie, and each law is uniform over its kept
    tokens: only which tied tokens stay differs."""
    logits = [2.0, 1.0, 2.0, 2.0]
    ours = target_law(torch.tensor(logits, dtype=torch.float64), 1.0, top_k=2).numpy()
    theirs = transformers_law(logits, 1.0, top_k=2, top_p=1.0)
    assert _kept(ours) == [0, 2] and _kept(theirs) == [0, 2, 3]

    logits = [1.0, 1.0, 1.0]
    ours = target_law(torch.tensor(logits, dtype=torch.float64), 1.0, top_p=0.5).numpy()
    theirs = transformers_law(logits, 1.0, top_k=0, top_p=0.5)
    assert _kept(ours) == [0, 1] and _kept(theirs) == [1, 2]
    assert ours.max() == ours[0] == 0.5 and theirs.max() == theirs[2] == 0.5


@needs_transformers
def test_transformers_rounding_at_the_top_p_boundary_differs_as_documented():
    """When top_p equals the mass of a prefix of the order (up to rounding), the next token's
    fate rests on rounding. Ours sums from the largest probability and compares the mass
    before a token with top_p; transformers sums from the smallest and compares the mass up to
    a token with 1 - top_p. Here top_p is our mass before the second token, so ours keeps one
    token, and transformers' sums round the other way and keep two."""
    logits = [-3.3023357247239122, -1.2725515672619818, -1.5577780517227322, -0.7497526547937897]
    top_p = 0.47248340479421114
    ours = target_law(torch.tensor(logits, dtype=torch.float64), 1.0, top_p=top_p).numpy()
    theirs = transformers_law(logits, 1.0, top_k=0, top_p=top_p)
    _, mass_before = restated_law(logits, 1.0, 0, top_p)
    assert mass_before[1] == top_p  # the second token sits exactly on the boundary
    assert _kept(ours) == [3] and _kept(theirs) == [1, 3]
