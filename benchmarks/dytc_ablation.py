"""DyTC against prompt lookup, taken apart: where a CAS-Spec step's time goes, and what each
part of the policy costs.

Scope: `python -m casspec_ref bench` reports speedups per Spec-Bench group; this script explains
them. On the first turn of each question of a prompt set it runs, interleaved question by
question in one process (so that a change of load hits every variant alike):

- ``ar``: the naive loop (`generate_ar`), the baseline of every ratio;
- ``pld:3``: prompt lookup proposing at most 3 tokens;
- ``pld-or-chain``: prompt lookup's proposal when it has one, else a chain of the int8 draft (the
  best fixed schedule on the 2-core CPU);
- ``cas-spec``: DyTC with the model's draft levels, prompt lookup and recycled tokens;
- ``cas-spec:paper``: the same with the paper's policy alone (`DyTCConfig.paper()`);
- ``dytc-free``: DyTC with prompt lookup and recycled tokens only (``drafts=()``);
- any ``--variant NAME@FIELD=VALUE,...``: NAME (``cas-spec``, ``cas-spec:paper`` or
  ``dytc-free``) with those `DyTCConfig` fields changed, e.g. ``cas-spec@margin_bins=0``.

Each DyTC variant keeps one policy across questions, as the bench does. Under greedy decoding
every output must equal the naive loop's (checked). Per variant it prints tokens/s and the ratio
to ``ar``, tokens per step, milliseconds per step (drafting, planning, verification), the tree
sizes and, per draft, proposed and accepted nodes.
Run: ``OMP_NUM_THREADS=2 python benchmarks/dytc_ablation.py --questions heldout``.
"""

from __future__ import annotations

import argparse
import collections
import time
from typing import Any

from casspec_ref.dytc_config import DyTCConfig
from casspec_ref.dytc_refinements import RefinedDyTC
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import default_drafts, generate_speculative
from casspec_ref.tools.bench import Runner, _make_runner, default_questions_path, load_questions

SETS = {"bundled": "prompts", "heldout": "prompts_heldout"}


def parse_variant(text: str) -> tuple[str, DyTCConfig]:
    """``"dytc-free@explore_fraction=0.05,window=60"`` -> ("dytc-free", the config); the base
    ``cas-spec:paper`` changes `DyTCConfig.paper()` (its runs use the ``cas-spec`` schedule)."""
    base, _, spec = text.partition("@")
    if base not in ("cas-spec", "cas-spec:paper", "dytc-free"):
        raise SystemExit(f"--variant {text!r}: the base is cas-spec, cas-spec:paper or dytc-free")
    fields: dict[str, Any] = {}
    for item in filter(None, spec.split(",")):
        name, _, value = item.partition("=")
        fields[name] = float(value) if "." in value else int(value)
    if base == "cas-spec:paper":
        return "cas-spec", DyTCConfig.paper(**fields)
    return base, DyTCConfig(**fields)


def make_runners(model: Any, variants: list[str]) -> dict[str, Runner]:
    """One bench runner per variant: (prompt ids, new tokens) -> (tokens, stats). ar, pld:3,
    pld-or-chain, cas-spec and cas-spec:paper are the bench's own; the DyTC variants keep one
    policy each across questions."""
    fixed = ("ar", "pld:3", "pld-or-chain", "cas-spec", "cas-spec:paper")
    runners = {name: _make_runner(name, model, stop_ids=()) for name in fixed}
    levels = [plan.name for plan in default_drafts(model)]
    for name in ["dytc-free", *variants]:
        base, config = parse_variant(name) if "@" in name else (name, DyTCConfig())
        free = base == "dytc-free"
        policy = RefinedDyTC([] if free else levels, config)
        options: dict[str, Any] = {"drafts": ()} if free else {}

        def run(
            prompt: list[int], n: int, policy: RefinedDyTC = policy, options: dict = options
        ) -> tuple[list[int], dict[str, Any]]:
            result = generate_speculative(
                model, prompt, n, method="cas-spec", policy=policy, **options
            )
            return list(result.tokens), dict(result.stats)

        runners[name] = run
    return runners


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--questions", choices=sorted(SETS), default="heldout")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--limit", type=int, default=0, help="the first N questions (0 = all)")
    parser.add_argument("--variant", action="append", default=[], help="NAME@FIELD=VALUE,...")
    args = parser.parse_args()

    model, tokenizer = load_model()  # also makes the per-machine kernel table cover the model
    assert tokenizer is not None
    questions = load_questions(default_questions_path(SETS[args.questions]))
    if args.limit:
        questions = questions[: args.limit]
    runners = make_runners(model, args.variant)

    seconds: collections.Counter[str] = collections.Counter()
    tokens: collections.Counter[str] = collections.Counter()
    stats: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    sizes: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for q in questions:
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": q.turns[0]}])
        reference = None
        for name, run in runners.items():
            start = time.perf_counter()
            out, result_stats = run(prompt, args.max_new_tokens)
            seconds[name] += time.perf_counter() - start
            tokens[name] += len(out)
            reference = out if reference is None else reference
            if out != reference:
                raise SystemExit(f"{name} differs from the naive loop on question {q.question_id}")
            for key in ("steps", "time_draft_s", "time_plan_s", "time_verify_s"):
                stats[name][key] += result_stats.get(key, 0)
            for source, count in result_stats.get("proposed", {}).items():
                stats[name][f"proposed {source}"] += count
            for source, count in result_stats.get("accepted", {}).items():
                stats[name][f"accepted {source}"] += count
            sizes[name].update(result_stats.get("tree_sizes", []))

    base = tokens["ar"] / seconds["ar"]
    print(
        f"{len(questions)} questions ({args.questions}), {args.max_new_tokens} new tokens, greedy"
    )
    for name in runners:
        rate, s = tokens[name] / seconds[name], stats[name]
        line = f"{name:34s} {rate:6.1f} tok/s  x{rate / base:.3f}"
        if s["steps"]:
            steps = s["steps"]
            line += (
                f"  {tokens[name] / steps:.2f} tok/step  ms/step: draft "
                f"{1e3 * s['time_draft_s'] / steps:.2f} (plan {1e3 * s['time_plan_s'] / steps:.2f})"
                f" verify {1e3 * s['time_verify_s'] / steps:.2f}"
            )
        print(line)
        if s["steps"]:
            drafts = sorted({k.split(" ", 1)[1] for k in s if k.startswith("proposed ")})
            nodes = ", ".join(f"{d} {s['accepted ' + d]}/{s['proposed ' + d]}" for d in drafts)
            print(f"{'':34s} accepted/proposed: {nodes}")
            print(f"{'':34s} tree sizes: {dict(sorted(sizes[name].items()))}")


if __name__ == "__main__":
    main()
