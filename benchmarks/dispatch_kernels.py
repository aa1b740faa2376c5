"""What each dispatch level does to the plain kernels' rounding, at every level this CPU has: the
table of docs/floating_point.md, "Every dispatch level", measured into one record.

Nothing is timed. For each level (torch, oneDNN and MKL pinned together, as
tests/dispatch_levels.py does), a process of its own counts, in float32 and bfloat16:

- **the scalar tail**: of the rows of every 1..40-row call of torch's ``silu`` on rows of a
  width, how many differ from the same row in a one-row call; the same count for `rowwise`
  (which leaves no scalar tail), at widths 13, 24 and 48 (the tiny test models' width) and
  SmolLM2-135M's 576 and 1536;
- **untiled products**: of the 1..32-row prefixes of a 32-row ``F.linear`` with each SmolLM2
  weight shape, how many have a row that differs from the whole product's;
- **tiles**: whether each tile the machine check may choose passes that check (`rows_agree`:
  64 rows, 32 for the LM head's weight, at the thread policy's counts) for each weight shape;
- **attention across thread counts**: whether one token's fused attention call, the kernel
  alone on the caller's threads, keeps its bits at the thread policy's counts
  (`attention_threads_agree` with ``raw``; the model runs the call on one thread, and the
  machine check checks that).

A level the CPU lacks is recorded as not run. One JSON record for all levels:

    python benchmarks/dispatch_kernels.py --json docs/bench/cpu_dispatch_kernels.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from dispatch_levels import LEVELS, cpu_flags, environment  # noqa: E402

DTYPES = ("float32", "bfloat16")
WIDTHS = (13, 24, 48, 576, 1536)
#: The row counts of the scalar-tail count (every count up to a prompt's piece of 40 rows).
TAIL_ROWS = 40
#: The prefixes of the untiled-product count: up to DyTC's largest tree.
PREFIX_ROWS = 32


def smollm2_shapes() -> dict[str, tuple[int, int]]:
    """SmolLM2-135M's weight shapes ``(out, in)``, by the products that use them."""
    from casspec_ref.config import smollm2_135m

    c = smollm2_135m()
    kv = c.n_kv_heads * (c.d_model // c.n_heads)
    return {
        "q, o": (c.d_model, c.d_model),
        "k, v": (kv, c.d_model),
        "gate, up": (c.d_ff, c.d_model),
        "down": (c.d_model, c.d_ff),
        "head": (c.vocab_size, c.d_model),
    }


def tail_rows_differ(fn: Any, width: int, dtype: Any, gen: Any) -> int:
    """Of the rows of ``fn`` on every 1..`TAIL_ROWS`-row call, those that differ from the same
    row computed alone."""
    import torch

    differ = 0
    for rows in range(1, TAIL_ROWS + 1):
        x = torch.randn(rows, width, generator=gen).to(dtype)
        whole = fn(x)
        differ += sum(not torch.equal(whole[i], fn(x[i : i + 1])[0]) for i in range(rows))
    return differ


def prefixes_differ(shape: tuple[int, int], dtype: Any, gen: Any) -> int:
    """Of the 1..`PREFIX_ROWS`-row prefixes of a `PREFIX_ROWS`-row untiled ``F.linear``, those
    with a row that differs from the whole product's."""
    import torch
    import torch.nn.functional as F

    weight = torch.randn(*shape, generator=gen).to(dtype)
    x = torch.randn(PREFIX_ROWS, shape[1], generator=gen).to(dtype)
    whole = F.linear(x, weight)
    return sum(
        not torch.equal(F.linear(x[:n], weight), whole[:n]) for n in range(1, PREFIX_ROWS + 1)
    )


def tiles_pass(shape: tuple[int, int], head: bool, dtype: Any, levels: tuple[int, ...]) -> dict:
    """Each tile the check may try for ``shape``: whether it passes (`rows_agree`)."""
    from functools import partial

    import torch

    from casspec_ref.accel import invariance
    from casspec_ref.base.kernels import ROWS, tiled_linear

    gen = torch.Generator().manual_seed(0)
    weight = torch.randn(*shape, generator=gen).to(dtype)
    rows = invariance.HEAD_ROWS if head else invariance.FULL_ROWS
    x = torch.randn(rows, shape[1], generator=gen).to(dtype)
    tiles = invariance.ranked_tiles(dtype, head=head)
    verdicts = {}
    for tile in sorted(tiles, key=lambda t: (t != ROWS, t.base, t.pad_to)):
        if tile.base == "split" and shape[0] % 2:
            continue
        rows_of = partial(tiled_linear, tile, weight=weight, bias=None)
        verdicts[str(tile)] = invariance.rows_agree(rows_of, x, levels, gen)
    return verdicts


def measure(dtype_name: str) -> dict[str, Any]:
    """This process's level, for one dtype (see the module docstring)."""
    import torch
    import torch.nn.functional as F

    from casspec_ref.accel import invariance, kernel_table, threads
    from casspec_ref.base.elementwise import rowwise

    dtype = getattr(torch, dtype_name)
    levels = tuple(sorted({1, threads.apply().max_threads}))
    gen = torch.Generator().manual_seed(0)
    shapes = smollm2_shapes()
    return {
        "dtype": dtype_name,
        **kernel_table.dispatch_levels(),
        "threads": list(levels),
        "silu_rows_differ": {w: tail_rows_differ(F.silu, w, dtype, gen) for w in WIDTHS},
        "rowwise_silu_rows_differ": {
            w: tail_rows_differ(lambda x: rowwise(F.silu, x), w, dtype, gen) for w in WIDTHS
        },
        "linear_prefixes_differ": {
            name: prefixes_differ(shape, dtype, gen) for name, shape in shapes.items()
        },
        "tiles_pass": {
            name: tiles_pass(shape, name == "head", dtype, levels) for name, shape in shapes.items()
        },
        "attention_threads_agree": invariance.attention_threads_agree(dtype, levels, raw=True),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, help="write the record here")
    parser.add_argument("--child", nargs=1, metavar="DTYPE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child[0])))
        return 0
    from casspec_ref.tools.bench import environment as bench_environment

    rows, missing = [], []
    for level, (_, flag, _, _) in LEVELS.items():
        if flag is not None and flag not in cpu_flags():
            missing.append(f"{level}: this CPU lacks {flag}")
            continue
        for dtype in DTYPES:
            cmd = [sys.executable, __file__, "--child", dtype]
            done = subprocess.run(
                cmd, env=environment(level), capture_output=True, text=True, check=True
            )
            row = {"level": level, **json.loads(done.stdout.strip().splitlines()[-1])}
            rows.append(row)
            print(f"{level:8} {dtype:9} {row['capability']}: measured", flush=True)
    command = "python benchmarks/dispatch_kernels.py" + (
        f" --json {args.json}" if args.json else ""
    )
    record = {
        "benchmark": "dispatch_kernels",
        "environment": bench_environment("cpu", "float32,bfloat16", command),
        "levels_not_run": missing,
        "rows": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
