"""The held-out prompt set: Spec-Bench format, every group, nothing shared with the tuning set."""

from __future__ import annotations

from collections import Counter

from casspec_ref.tools import bench


def test_heldout_set_covers_every_group_and_differs_from_the_bundled_one() -> None:
    heldout = bench.load_questions(bench.default_questions_path("prompts_heldout"))
    bundled = bench.load_questions(bench.default_questions_path())
    counts = Counter(q.group for q in heldout)
    assert set(counts) == set(bench.GROUP_ORDER)
    assert all(2 <= n <= 3 for n in counts.values()), counts
    ids = [q.question_id for q in heldout]
    assert len(set(ids)) == len(ids)
    assert not set(ids) & {q.question_id for q in bundled}
    assert not {t for q in heldout for t in q.turns} & {t for q in bundled for t in q.turns}
    # The passages that prompt lookup can copy from are of realistic length.
    for q in heldout:
        if q.group in ("rag", "summarization"):
            assert len(q.turns[0]) >= 400, q.question_id
