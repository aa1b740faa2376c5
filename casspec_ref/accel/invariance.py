"""Shape invariance, checked on the machine: which product form gives a row the same bits at
every row count, row position and thread count.

The naive loop computes each token's logits in a forward over one row; a verify forward computes
them among the tree's other rows. Greedy decoding is lossless bit for bit only if both give the
same bits (docs/floating_point.md). No BLAS or oneDNN promises that, and which form has it
depends on the CPU and the library build: the model's target forwards ask for one form per
weight shape (`casspec_ref.base.kernels.exact_linear` with ``shape_invariant``), and this module
checks them here. Attention needs no check of its shapes: each token's is the naive loop's own
call (`casspec_ref.base.exact_attention`), the same shapes and layout at any row count. What a
call cannot fix is the thread count, which the thread policy may switch during a run: the calls
run on one thread whatever the policy's count, and the check confirms that the model's attention
keeps its bits across the policy's counts (`attention_threads_agree`).

The target's products run tiled (`casspec_ref.base.kernels.tiled_linear`): every library call
has one shape, ``(R, in) x (in, out)``, so the library's choice of kernel and order of additions
cannot depend on the forward's row count. What is left to check is a row's place inside its tile
and the thread count. The check (`rows_agree`) covers both end to end: a block of `FULL_ROWS`
random rows (`HEAD_ROWS` for the LM head's weight) is computed whole; then windows of every size
up to the block's, each at a random offset (so at every place in a tile), are computed alone, at
every thread count the thread policy may use; the tile passes if every window's rows equal the
whole block's bit for bit. A kernel's order of additions is chosen from the shapes and the thread
count, never from the values, so one random sample of each shape decides. Tiles are tried in
`ranked_tiles` order (the one-row constructions, `kernels.one_row_tiles`, first in float32 and
wherever they are the naive loop's cheapest product, `rows_first`: for `kernels.ROWS` the same
check then confirms that the library keeps each problem of a batched call to itself, for a
one-row tile that its one-row call keeps its bits across thread counts; then the naive loop's
cost first) and
the first that passes is the shape's tile; a shape where none passes runs row by row
(`kernels.ROW_BY_ROW`), invariant without a check, and the report says so.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial

import torch
import torch.nn.functional as F

from casspec_ref.base.exact_attention import each_token, threads_at
from casspec_ref.base.kernels import (
    ROWS,
    TILE_ROWS,
    Form,
    base_forms,
    one_row_tiles,
    tiled_linear,
)

#: The row counts checked: every count up to `FULL_ROWS`, from the naive loop's one row to a
#: prompt's piece while the thread policy may switch counts (`threads.PROMPT_ROWS`). The LM
#: head's weight, which a prompt's forward applies to its last row only, is checked up to
#: `HEAD_ROWS`: DyTC's largest tree, whose verify forward computes every row's logits
#: (`threads.SWITCHED_ROWS`). The head is the largest product, so checking it to 64 rows would
#: cost most of the check's time for rows no forward computes.
FULL_ROWS = 64
HEAD_ROWS = 32
#: Attention is checked at these numbers of keys (around the fused kernel's block sizes), with
#: one, two and three query heads per KV head (SmolLM2: three) and the shipped head size.
ATTENTION_KEYS = (1, 63, 64, 65, 300, 512, 513, 1100)
ATTENTION_GROUPS = (1, 2, 3)
HEAD_DIM = 64

Rows = Callable[[torch.Tensor], torch.Tensor]


def rows_agree(rows_of: Rows, x: torch.Tensor, levels: Iterable[int], gen: torch.Generator) -> bool:
    """Whether ``rows_of`` (rows in, rows out, row ``i`` from input row ``i`` only) gives every
    window of ``x``'s rows, of every size up to ``len(x)``, at a random offset, the same bits as
    the whole of ``x``, at every thread count of ``levels``."""
    levels = sorted(set(levels))
    with threads_at(levels[0]):
        whole = rows_of(x)
    for n in levels:
        with threads_at(n):
            for size in range(1, len(x) + 1):
                start = int(torch.randint(0, len(x) - size + 1, (1,), generator=gen))
                if not torch.equal(rows_of(x[start : start + size]), whole[start : start + size]):
                    return False
    return True


def invariant_form(
    shape: tuple[int, int],
    dtype: torch.dtype,
    levels: Iterable[int],
    ranked: list[Form],
    rows: int = FULL_ROWS,
    known: dict[str, bool] | None = None,
) -> Form | None:
    """The first tile of ``ranked`` whose rows agree (`rows_agree`, a block of ``rows`` rows,
    computed by `tiled_linear`) for a weight of ``shape`` ``(out, in)`` in ``dtype``; None if
    none does. ``known``: verdicts by tile (``str(tile)``) reached before on this machine, used
    instead of checking again; the new ones are added to it."""
    known = {} if known is None else known
    gen = torch.Generator().manual_seed(0)
    out_f, in_f = shape
    weight = torch.randn(out_f, in_f, generator=gen).to(dtype)
    x = torch.randn(rows, in_f, generator=gen).to(dtype)
    for tile in ranked:
        if tile.base == "split" and out_f % 2:
            continue
        if str(tile) not in known:
            rows_of = partial(tiled_linear, tile, weight=weight, bias=None)
            known[str(tile)] = rows_agree(rows_of, x, levels, gen)
        if known[str(tile)]:
            return tile
    return None


#: Tiles whose one call costs at most this much more than the cheapest are near-ties: the larger
#: tile goes first (a verify forward's rows then take fewer calls).
NEAR_TIE = 0.05
#: The order of tiles where nothing was timed: four rows first, then eight, then two.
UNTIMED_ROWS = (4, 8, 2)
#: Outside float32, the most the one-row products may cost a verify forward, against the
#: cheapest tile, for the naive loop's saving to be taken (`rows_first`).
ROWS_VERIFY_BOUND = 2.0


def ranked_tiles(
    dtype: torch.dtype,
    timings_us: Mapping[int, Mapping[str, float]] | None = None,
    head: bool = False,
) -> list[Form]:
    """Every tile ``base@R`` (R in `TILE_ROWS`, base in `base_forms`), in the order the check
    tries them. ``timings_us``: microseconds per call of each base form at R rows (the kernel
    table's timings, R = 1 too), i.e. what one product of the naive loop costs in that tile. The
    cheapest first; tiles within `NEAR_TIE` of the cheapest go first, largest R first. Untimed
    tiles follow in `UNTIMED_ROWS` order. Where `rows_first` says so, the one-row constructions
    (`kernels.one_row_tiles`: `kernels.ROWS` and the one-row tiles), the naive loop's cheapest
    first, come before every tile. ``head``: the LM head's weight, which does not stay in the
    cache between a verify forward's rows: there the one-row constructions must pass
    `rows_first`'s bound in every dtype, float32 included."""
    timed = timings_us or {}
    tiles = [Form(f.base, r) for r in UNTIMED_ROWS for f in base_forms(dtype) if r in TILE_ROWS]
    cost = {t: timed.get(t.pad_to, {}).get(t.base, float("inf")) for t in tiles}
    best = min(tiles, key=lambda t: cost[t])
    near = [t for t in tiles if cost[t] <= (1 + NEAR_TIE) * cost[best] < float("inf")]
    rest = [t for t in tiles if t not in near]
    near.sort(key=lambda t: (-t.pad_to, cost[t]))
    rest.sort(key=lambda t: cost[t])  # stable: the untimed keep their order
    ones = one_row_tiles(dtype)
    one_cost = {
        t: timed.get(1, {}).get("split" if t == ROWS else t.base, float("inf")) for t in ones
    }
    ones.sort(key=lambda t: one_cost[t])  # stable: `ROWS` first where untimed
    first = rows_first(dtype, one_cost[ones[0]], best.pad_to, cost[best], head)
    return (ones if first else []) + near + rest


def rows_first(
    dtype: torch.dtype, one_row_us: float, tile_rows: int, tile_us: float, head: bool = False
) -> bool:
    """Whether the one-row constructions (`kernels.one_row_tiles`) are tried before every tile.
    In float32, always, except for the LM head: the fastest one-row kernel is a matrix-vector
    product, which no tile of R > 1 rows matches (results.md, "CPU, what exactness costs at each
    dispatch level"). Otherwise, where the cheapest one-row product the kernel table timed
    (``one_row_us``) is below the cheapest tile's call (``tile_us``, ``tile_rows`` rows: the
    naive loop gains), while ``tile_rows`` such products cost at most `ROWS_VERIFY_BOUND` times
    that call (a verify forward loses at most that much): as on a CPU without bfloat16
    instructions, where a bfloat16 product costs in proportion to its rows. Where a tile of a few
    rows costs about what one row does (bfloat16 instructions), the tiles stay first."""
    if dtype == torch.float32 and not head:
        return True
    return one_row_us < tile_us and tile_rows * one_row_us <= ROWS_VERIFY_BOUND * tile_us


def attention_threads_agree(dtype: torch.dtype, levels: Iterable[int], raw: bool = False) -> bool:
    """Whether one token's attention call (its G query heads over S keys, `ATTENTION_GROUPS` x
    `ATTENTION_KEYS`, three KV heads) gives the same bits at every thread count of ``levels``:
    made as the model makes it (`exact_attention.each_token`, on its own thread count), or with
    ``raw`` the fused kernel alone, on the caller's count."""
    levels = sorted(set(levels))
    if len(levels) < 2:
        return True  # one thread count: nothing to switch between
    gen = torch.Generator().manual_seed(0)
    cases = [
        tuple(torch.randn(1, 3, n, HEAD_DIM, generator=gen).to(dtype) for n in (group, s, s))
        for group in ATTENTION_GROUPS
        for s in ATTENTION_KEYS
    ]
    outs = []
    for n in levels:
        with threads_at(n):
            outs.append([_one_token(q, k, v, raw) for q, k, v in cases])
    return all(torch.equal(a, b) for other in outs[1:] for a, b in zip(outs[0], other, strict=True))


def _one_token(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, raw: bool) -> torch.Tensor:
    """One token's attention, ``q (1, Hkv, G, Dh)`` over ``k, v (1, Hkv, S, Dh)``."""
    if raw:
        return F.scaled_dot_product_attention(q, k, v)
    return each_token(q, 1, lambda _, query: F.scaled_dot_product_attention(query, k, v))


@dataclass
class Report:
    """What the check found for one dtype: each weight shape's tile (None: none
    passed) and whether attention keeps its bits across the thread counts ``levels``."""

    dtype: torch.dtype
    levels: tuple[int, ...]
    forms: dict[tuple[int, int], Form | None] = field(default_factory=dict)
    attention: bool = False

    @property
    def complete(self) -> bool:
        """Every shape has a checked tile and attention passed: the target's rows are the
        same bits at every checked row count and thread count."""
        return self.attention and all(f is not None for f in self.forms.values())

    @property
    def gaps(self) -> str:
        """What did not pass, in words ("" when the report is complete)."""
        missing = [f"{o}x{i}" for (o, i), f in self.forms.items() if f is None]
        words = [f"no tile passed for {', '.join(missing)}: row by row"] if missing else []
        words += [] if self.attention else ["attention rounds by thread count"]
        return "; ".join(words)

    def as_dict(self) -> dict[str, object]:
        """The report as plain data (the bench's environment, ``generate --json``)."""
        return {
            "dtype": str(self.dtype).removeprefix("torch."),
            "threads": list(self.levels),
            "complete": self.complete,
            "attention": self.attention,
            "forms": {
                f"{o}x{i}": None if f is None else str(f) for (o, i), f in self.forms.items()
            },
        }


#: The reports of this process, by dtype (`kernel_table.prepare` fills them).
REPORTS: dict[torch.dtype, Report] = {}


def reports() -> list[dict[str, object]]:
    """Every dtype's report in this process, as plain data."""
    return [r.as_dict() for r in REPORTS.values()]
