"""Prompt lookup (PLD): hand-made sequences and a brute-force oracle by a different path."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from casspec_ref.dsia.prompt_lookup import PromptLookup, PromptLookupConfig


def brute_force(tokens: list[int], cfg: PromptLookupConfig, limit: int) -> tuple[list[int], int]:
    """Rescan the whole context for every n (the O(context) formulation of the public PLD code)."""
    size = len(tokens)
    for n in range(cfg.max_ngram, cfg.min_ngram - 1, -1):
        if size < n:
            continue
        suffix = tokens[size - n :]
        starts = [s for s in range(0, size - n) if tokens[s : s + n] == suffix]
        if starts:
            s = starts[-1] if cfg.prefer == "recent" else starts[0]
            return tokens[s + n : s + n + limit], n
    return [], 0


def test_simple_copy() -> None:
    pld = PromptLookup([10, 11, 12, 13, 14, 99, 11, 12])
    assert pld.propose() == [13, 14, 99, 11, 12]
    assert pld.match().ngram == 2  # (11, 12) matches; (99, 11, 12) does not


def test_the_continuation_is_copied_up_to_the_end_of_the_context() -> None:
    # The suffix (5, 6) occurred at the start: what followed it, then the suffix itself.
    assert PromptLookup([5, 6, 7, 8, 5, 6]).propose() == [7, 8, 5, 6]


def test_absent_ngram_proposes_nothing() -> None:
    pld = PromptLookup([1, 2, 3, 4])
    m = pld.match()
    assert m.tokens == () and m.ngram == 0 and m.source_start == -1
    assert PromptLookup([]).propose() == []
    assert PromptLookup([7]).propose() == []


def test_longest_ngram_wins_over_more_recent_shorter() -> None:
    # 3-gram (1, 2, 3) occurred early, followed by 50; the 1-gram (3) occurs later followed by 60.
    pld = PromptLookup([1, 2, 3, 50, 3, 60, 1, 2, 3])
    assert pld.propose(2) == [50, 3]
    assert pld.match().ngram == 3


def test_recent_versus_first_occurrence() -> None:
    seq = [5, 6, 1, 8, 5, 6, 2, 9, 5, 6]
    assert PromptLookup(seq).propose(1) == [2]
    assert PromptLookup(seq, PromptLookupConfig(prefer="first")).propose(1) == [1]


def test_overlapping_ngrams_in_a_run() -> None:
    # In a run of one token the suffix (a, a, a) overlaps its most recent earlier occurrence,
    # whose continuation is the last token only.
    pld = PromptLookup([4, 4, 4, 4])
    assert pld.propose() == [4]
    assert pld.match().ngram == 3
    # Periodic text: the continuation is copied up to the end of the context.
    pld = PromptLookup([1, 2, 1, 2, 1, 2])
    assert pld.propose() == [1, 2]
    pld.append(1)
    assert pld.propose() == [2, 1]


def test_incremental_equals_rebuilt_and_limit() -> None:
    seq = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 1, 4]
    pld = PromptLookup()
    for i, t in enumerate(seq):
        pld.append(t)
        assert pld.propose() == PromptLookup(seq[: i + 1]).propose()
    assert pld.propose(3) == [1, 5, 9]
    assert pld.propose(0) == []


def test_bad_inputs_are_rejected() -> None:
    with pytest.raises(ValueError, match="min_ngram"):
        PromptLookupConfig(max_ngram=1, min_ngram=2)
    with pytest.raises(ValueError, match="max_proposal"):
        PromptLookupConfig(max_proposal=0)
    with pytest.raises(ValueError, match="prefer"):
        PromptLookupConfig(prefer="last")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="non-negative"):
        PromptLookup([1, -2])
    with pytest.raises(ValueError, match="max_tokens"):
        PromptLookup([1, 1]).propose(-1)


@given(
    tokens=st.lists(st.integers(0, 4), max_size=40),
    max_ngram=st.integers(1, 4),
    min_ngram=st.integers(1, 4),
    limit=st.integers(0, 12),
    prefer=st.sampled_from(["recent", "first"]),
)
@example(tokens=[0, 0, 0], max_ngram=3, min_ngram=1, limit=10, prefer="recent")
def test_matches_brute_force(
    tokens: list[int], max_ngram: int, min_ngram: int, limit: int, prefer: str
) -> None:
    if min_ngram > max_ngram:
        min_ngram, max_ngram = max_ngram, min_ngram
    cfg = PromptLookupConfig(max_ngram=max_ngram, min_ngram=min_ngram, prefer=prefer)  # type: ignore[arg-type]
    m = PromptLookup(tokens, cfg).match(limit)
    expected, n = brute_force(tokens, cfg, limit)
    assert list(m.tokens) == expected
    assert m.ngram == n


@settings(max_examples=300)
@given(
    tokens=st.lists(st.integers(0, 3), max_size=30),
    extra=st.lists(st.integers(0, 3), max_size=8),
    max_ngram=st.integers(1, 5),
    limit=st.integers(0, 9),
    prefer=st.sampled_from(["recent", "first"]),
)
@example(tokens=[1, 2, 3, 1, 2], extra=[3, 1, 2], max_ngram=5, limit=4, prefer="recent")
def test_propose_after_equals_the_extended_context(
    tokens: list[int], extra: list[int], max_ngram: int, limit: int, prefer: str
) -> None:
    """Below the root, the one prompt lookup answers for context + path without appending."""
    cfg = PromptLookupConfig(max_ngram=max_ngram, prefer=prefer)  # type: ignore[arg-type]
    pld = PromptLookup(tokens, cfg)
    want = PromptLookup(tokens + extra, cfg).propose(limit)
    assert pld.propose_after(extra, limit) == want
    assert list(pld.tokens) == tokens  # the index is not changed
