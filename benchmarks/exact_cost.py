"""What exactness costs, at every dispatch level this CPU has: the target's shape-invariant
forward (tiled products, attention one token per call, `rowwise`) against the plain one, on
SmolLM2-135M.

For each level (torch, oneDNN and MKL pinned together, as tests/dispatch_levels.py does) and each
dtype, a process of its own loads the model as a user does (the level's kernel table and check),
then measures, interleaving the two forms in every repeat so a change of the machine's speed hits
both alike (median of ``--repeats``):

- one target forward over T = 1 (the naive loop's) and T = 16 (a verify forward's) new tokens
  after 128 cached, exact and plain;
- the naive loop itself: ``generate_ar`` of ``--tokens`` tokens on the first held-out question,
  exact and plain, and whether their tokens are the same.

The tiles the check chose are kept beside the figures. One JSON record for all levels:

    python benchmarks/exact_cost.py --json docs/bench/cpu_exact_cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from dispatch_levels import LEVELS, cpu_flags, environment  # noqa: E402

DTYPES = ("float32", "bfloat16")


def measure(dtype_name: str, repeats: int, tokens: int) -> dict[str, Any]:
    """The figures of this process's level for one dtype (see the module docstring)."""
    import torch

    from casspec_ref.accel import invariance, kernel_table
    from casspec_ref.io.weights import load_model
    from casspec_ref.kv_cache import KVCache
    from casspec_ref.tools.bench import default_questions_path, load_questions
    from casspec_ref.tools.naive import time_naive_loops

    dtype = getattr(torch, dtype_name)
    model, tokenizer = load_model(dtype=dtype)
    cache = KVCache(model.config, 512, dtype)
    model(torch.randint(0, 1000, (1, 128)), cache=cache)

    def forward_ms(invariant: bool, rows: int) -> float:
        model.shape_invariant = invariant
        new = torch.randint(0, 1000, (1, rows))
        start = time.perf_counter()
        model(new, cache=cache)
        cache.truncate(128)
        return (time.perf_counter() - start) * 1e3

    figures: dict[str, Any] = {"dtype": dtype_name, **kernel_table.dispatch_levels()}
    for rows in (1, 16):
        for _ in range(3):  # warm-up: packing, first calls
            forward_ms(True, rows), forward_ms(False, rows)
        pairs = [(forward_ms(True, rows), forward_ms(False, rows)) for _ in range(repeats)]
        figures[f"forward_ms_T{rows}"] = {
            "exact": statistics.median(p[0] for p in pairs),
            "plain": statistics.median(p[1] for p in pairs),
        }
    model.shape_invariant = True
    question = load_questions(default_questions_path("prompts_heldout"))[0]
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": question.turns[0]}])
    time_naive_loops(model, prompt, 8, stop_ids=tokenizer.stop_ids)  # warm-up
    runs = time_naive_loops(model, prompt, tokens, stop_ids=tokenizer.stop_ids)
    figures["naive_tok_s"] = {r.form: r.tokens_per_s for r in runs}
    figures["naive_same_tokens"] = runs[0].tokens == runs[1].tokens
    figures["exact_over_plain"] = runs[0].tokens_per_s / runs[1].tokens_per_s
    figures["shape_invariance"] = invariance.reports()
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--json", type=Path, help="write the record here")
    parser.add_argument("--child", nargs=1, metavar="DTYPE", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(measure(args.child[0], args.repeats, args.tokens)))
        return 0
    from casspec_ref.tools.bench import environment as bench_environment

    rows, missing = [], []
    for level, (_, flag, _, _) in LEVELS.items():
        if flag is not None and flag not in cpu_flags():
            missing.append(f"{level}: this CPU lacks {flag}")
            continue
        env = environment(level)
        env.pop("CASSPEC_KERNELS", None)  # the level's own timed table, as a user gets it
        for dtype in DTYPES:
            cmd = [sys.executable, __file__, "--child", dtype]
            cmd += ["--repeats", str(args.repeats), "--tokens", str(args.tokens)]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
            row = {"level": level, **json.loads(done.stdout.strip().splitlines()[-1])}
            rows.append(row)
            t1, naive = row["forward_ms_T1"], row["naive_tok_s"]
            print(
                f"{level:8} {dtype:9} forward T=1 exact {t1['exact']:.1f} ms, plain "
                f"{t1['plain']:.1f} ms; naive loop exact {naive['exact']:.1f} tok/s, plain "
                f"{naive['plain']:.1f} (x{row['exact_over_plain']:.2f}), same tokens "
                f"{row['naive_same_tokens']}",
                flush=True,
            )
    command = "python benchmarks/exact_cost.py" + (f" --json {args.json}" if args.json else "")
    record = {
        "benchmark": "exact_cost",
        "environment": bench_environment("cpu", "float32,bfloat16", command),
        "levels_not_run": missing,
        "rows": rows,
    }
    if args.json:
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
