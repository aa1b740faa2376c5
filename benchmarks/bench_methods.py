"""Every decoding method side by side on SmolLM2-135M: speedup over the naive loop, per group.

Scope: issue 5's performance check (docs/method.md §7 protocol, reduced): float32 (default),
greedy, N new tokens, a mixed prompt set covering the six Spec-Bench groups
(`casspec_ref/data/prompts.jsonl`, first turn of each question). One warm-up generation per
method, then for each prompt every method runs once, in an order rotated per prompt so that slow
drifts of a shared CPU do not favour one method. Every method's greedy output is checked equal to
`generate_ar`'s before any speed is printed; a divergence is reported with its position.

Speedup is Spec-Bench's: mean over prompts of tokens/s, divided by the same mean for "ar"; per
group likewise. MAT is pooled (tokens / target forwards, bonus and prefill included).

DyTC keeps one `DyTCPolicy` across the prompts (``--fresh-policy`` to start each prompt afresh):
its online estimates are meant to persist, as in a server. At the end the script prints what
limits DyTC on this machine: alpha and c per level, and the verification cost per tree size.

    .venv/bin/python benchmarks/bench_methods.py --quick
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from typing import Any

import torch

from casspec_ref.dytc import DyTCPolicy
from casspec_ref.generate import generate_ar
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import METHODS, default_drafts, generate_speculative
from casspec_ref.tools.bench import GROUP_ORDER, default_questions_path, load_questions


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", default=",".join(METHODS))
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--per-group", type=int, default=3, help="prompts per Spec-Bench group")
    parser.add_argument("--quick", action="store_true", help="1 prompt per group, 64 tokens")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    parser.add_argument("--fresh-policy", action="store_true")
    parser.add_argument("--json", default=None, help="also write the results to this file")
    parser.add_argument(
        "--time-budget", type=float, default=480.0,
        help="seconds; no new prompt starts after this (the summary covers the prompts done)",
    )  # fmt: skip
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.quick:
        args.per_group, args.max_new_tokens = 1, 64
    methods = [m.strip() for m in args.methods.split(",") if m.strip()]
    bad = [m for m in methods if m not in METHODS]
    if bad:
        raise SystemExit(f"unknown methods {bad}: allowed are {', '.join(METHODS)}")
    if "ar" not in methods:
        methods.insert(0, "ar")
    torch.set_num_threads(args.threads)
    model, tokenizer = load_model(dtype=getattr(torch, args.dtype))
    drafts = default_drafts(model)
    policy = DyTCPolicy([p.name for p in drafts])

    questions = load_questions(default_questions_path())
    chosen: list[Any] = []
    per_group: dict[str, int] = defaultdict(int)
    for question in questions:
        if per_group[question.group] < args.per_group:
            per_group[question.group] += 1
            chosen.append(question)

    def run(method: str, prompt: list[int], n: int) -> tuple[list[int], float, dict[str, Any]]:
        start = time.perf_counter()
        if method == "ar":
            result = generate_ar(model, prompt, n)
        else:
            options: dict[str, Any] = {}
            if method == "cas-spec" and not args.fresh_policy:
                options["policy"] = policy
            result = generate_speculative(model, prompt, n, method=method, drafts=drafts, **options)
        return result.tokens, time.perf_counter() - start, result.stats

    warm = tokenizer.apply_chat_template([{"role": "user", "content": "Say hello."}])
    for method in methods:
        run(method, warm, 8)

    rows: dict[str, list[dict[str, Any]]] = defaultdict(list)
    began = time.perf_counter()
    for index, question in enumerate(chosen):
        if time.perf_counter() - began > args.time_budget:
            print(f"time budget spent: {index} of {len(chosen)} prompts measured")
            break
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": question.turns[0]}])
        order = methods[index % len(methods) :] + methods[: index % len(methods)]
        outputs: dict[str, list[int]] = {}
        for method in order:
            tokens, seconds, stats = run(method, prompt, args.max_new_tokens)
            outputs[method] = tokens
            rows[method].append(
                {
                    "group": question.group,
                    "tokens": len(tokens),
                    "seconds": seconds,
                    "tok_s": len(tokens) / seconds,
                    "forwards": stats.get("target_forwards", len(tokens)),
                    "stats": stats,
                }
            )
        for method, tokens in outputs.items():
            if tokens != outputs["ar"]:
                pos = next(
                    (
                        i
                        for i, (a, b) in enumerate(zip(tokens, outputs["ar"], strict=False))
                        if a != b
                    ),
                    min(len(tokens), len(outputs["ar"])),
                )
                print(f"DIVERGENCE {method} on question {question.question_id} at token {pos}")
                rows[method][-1]["diverged_at"] = pos
        print(
            f"[{index + 1}/{len(chosen)}] {question.group:15s} "
            + " ".join(f"{m}={rows[m][-1]['tok_s']:.1f}" for m in methods),
            flush=True,
        )

    ar_rate = statistics.mean(r["tok_s"] for r in rows["ar"])
    groups = [g for g in GROUP_ORDER if any(r["group"] == g for r in rows["ar"])]
    done = len(rows["ar"])
    print(f"\nSmolLM2-135M {args.dtype}, greedy, {args.max_new_tokens} new tokens, "
          f"{done} prompts, {args.threads} threads, torch {torch.__version__}")  # fmt: skip
    print(f"naive loop: {ar_rate:.2f} tok/s")
    header = f"{'method':12s} {'speedup':>8s} {'MAT':>5s} " + " ".join(
        f"{g[:9]:>9s}" for g in groups
    )
    print(header)
    summary: dict[str, Any] = {}
    for method in methods:
        rate = statistics.mean(r["tok_s"] for r in rows[method])
        mat = sum(r["tokens"] for r in rows[method]) / sum(r["forwards"] for r in rows[method])
        per = {}
        for group in groups:
            mine = [r["tok_s"] for r in rows[method] if r["group"] == group]
            base = [r["tok_s"] for r in rows["ar"] if r["group"] == group]
            per[group] = statistics.mean(mine) / statistics.mean(base)
        diverged = sum(1 for r in rows[method] if "diverged_at" in r)
        summary[method] = {
            "speedup": rate / ar_rate,
            "mat": mat,
            "groups": per,
            "diverged": diverged,
        }
        print(
            f"{method:12s} {rate / ar_rate:8.3f} {mat:5.2f} "
            + " ".join(f"{per[g]:9.3f}" for g in groups)
            + (f"  ({diverged} DIVERGED)" if diverged else "")
        )

    if "cas-spec" in methods:
        seq = 200
        step = policy.step_seconds(seq) if policy.ready() else float("nan")
        print("\nDyTC's view (the carried policy, at a context of 200 tokens):")
        for name, est in policy.alpha.items():
            cost = policy.cost(name, seq) if policy.ready() else float("nan")
            print(f"  {name:12s} alpha={est.alpha:.3f} (n={est.count})  c={cost:.3f}")
        if policy.ready():
            sizes = (1, 2, 4, 8, 16, 32)
            costs = " ".join(f"{n}:{policy.verify_seconds(seq, n) / step:.2f}" for n in sizes)
            print(f"  verify cost per tree size (in plain steps of {step * 1e3:.1f} ms): {costs}")
        summary["dytc"] = {
            name: {"alpha": est.alpha, "count": est.count} for name, est in policy.alpha.items()
        }
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump({"summary": summary, "rows": {m: rows[m] for m in methods}}, handle,
                      indent=1, default=str)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
