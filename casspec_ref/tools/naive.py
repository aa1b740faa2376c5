"""The naive loops a speedup is measured against, timed side by side.

The naive loop runs in two forms (docs/floating_point.md): ``exact``, the target's
shape-invariant forwards, whose tokens every speculative method equals bit for bit; and
``plain``, the fastest kernels per row count, whose rows round by shape. Where the plain loop
gives the same tokens it is the faster honest base; where it does not, the exact loop is. The
demo and ``generate --compare-ar`` report a speedup against `fastest_equal`, as the bench does,
after an untimed run of every loop they time (`warm_up`), as the bench's warm-up questions do,
and say what bounds CAS-Spec's speedup on the machine (`verify_costs`: a verify forward's cost
against one token's, from the timings its policy took).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from casspec_ref.generate import generate_ar
from casspec_ref.model import Transformer

if TYPE_CHECKING:
    from casspec_ref.dytc import DyTC

#: The answer length of `warm_up`'s untimed runs, and the request they answer: not the timed
#: one, so that DyTC's acceptance estimates are not learned on the answer they are timed on.
WARM_UP_TOKENS = 24
WARM_UP_REQUEST = "Name the four seasons and say one thing about each."


@dataclass(frozen=True)
class NaiveRun:
    """One timed naive loop: its form, tokens and speed."""

    form: str  # "exact" or "plain"
    tokens: list[int]
    seconds: float

    @property
    def tokens_per_s(self) -> float:
        return len(self.tokens) / self.seconds if self.seconds > 0 else float("nan")


def time_naive_loops(
    model: Transformer, prompt: Sequence[int], max_new_tokens: int, **options: Any
) -> list[NaiveRun]:
    """Run the naive loop in the exact form, then in the plain form (``generate_ar``'s
    ``options``), each timed; the model's form is restored."""
    runs = []
    previous = model.shape_invariant
    try:
        for form, invariant in (("exact", True), ("plain", False)):
            model.shape_invariant = invariant
            start = time.perf_counter()
            result = generate_ar(model, prompt, max_new_tokens, **options)
            runs.append(NaiveRun(form, list(result.tokens), time.perf_counter() - start))
    finally:
        model.shape_invariant = previous
    return runs


def fastest_equal(runs: Sequence[NaiveRun], tokens: Sequence[int]) -> NaiveRun:
    """The faster of ``runs`` whose tokens equal ``tokens``; the exact loop when none does."""
    equal = [r for r in runs if r.tokens == list(tokens)]
    if not equal:
        return next(r for r in runs if r.form == "exact")
    return max(equal, key=lambda r: r.tokens_per_s)


def describe(runs: Sequence[NaiveRun], base: NaiveRun, tokens: Sequence[int]) -> list[str]:
    """One line per naive loop: its speed, whether its tokens equal ``tokens``, which is the
    base."""
    lines = []
    for r in runs:
        same = "same tokens" if r.tokens == list(tokens) else "other tokens"
        mark = "  <- the base" if r is base else ""
        lines.append(f"naive loop, {r.form}: {r.tokens_per_s:6.1f} tok/s ({same}){mark}")
    return lines


def warm_up(
    model: Transformer, prompt: Sequence[int], method: str, **options: Any
) -> dict[str, Any]:
    """Run both naive loops and ``method`` once, untimed, on a short answer to ``prompt`` (the
    ids of `WARM_UP_REQUEST`, not the timed prompt; ``options``: the sampling and stop arguments
    both take), so that one-time setup (the kernel table, the int8 weight copies, oneDNN's packed
    weights) is behind every timed run and a DyTC policy has measured its costs. Returns the
    options the timed run of ``method`` passes on: for CAS-Spec, its policy, with what it
    learned (a server keeps it across requests)."""
    from casspec_ref.dytc import DyTC
    from casspec_ref.dytc_refinements import RefinedDyTC
    from casspec_ref.speculative import default_drafts, generate_speculative

    time_naive_loops(model, prompt, WARM_UP_TOKENS, **options)
    carried: dict[str, Any] = {}
    if method in ("cas-spec", "cas-spec:paper"):
        levels = [plan.name for plan in default_drafts(model)]
        carried["policy"] = DyTC(levels) if method == "cas-spec:paper" else RefinedDyTC(levels)
    if method != "ar":
        generate_speculative(model, prompt, WARM_UP_TOKENS, method=method, **options, **carried)
    return carried


def verify_costs(policy: DyTC, sizes: Sequence[int] = (2, 4, 8)) -> str:
    """What a verify forward costs against a one-token forward, from the timings `policy` took on
    this machine (the sizes it has timed): a step that verifies T tokens beats the naive loop
    only if it commits more tokens than its ratio, so these ratios bound the speedup."""
    curve = policy.verify_cost
    if 1 not in curve.seconds:
        return "verify costs: not timed yet"
    one = curve.seconds[1]
    ratios = [f"{t} tokens {curve.seconds[t] / one:.1f}x" for t in sizes if t in curve.seconds]
    return (
        f"verify costs on this machine (DyTC's timings), against one token's: {', '.join(ratios)}"
        "\n(a step that verifies T tokens pays only if it commits more tokens than T's ratio)"
    )
