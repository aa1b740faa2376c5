"""DyTC and the fixed schedules replayed on recorded acceptances (`casspec_ref.tools.replay`).

Scope: a bench run is one path of each adaptive policy, timing noise included; this script
compares policies on the same recorded truth, with no forward timed again. Three commands:

- ``record``: greedy answers of a prompt set's first turns (`generate_ar`), each draft level's
  and the target's top tokens along them, and this machine's costs (one target forward over
  T = 1..32 new tokens after 256 cached, each level's one-token forward; medians of 15 passes
  over all of them; and what a speculative step and a draft call add to their forwards and
  what a prompt lookup and a recycled-token walk take, timed in short decodes of two of the
  prompts: `measure_overheads`), to a JSON file;
- ``recost``: measures the costs again into a record (the answers stay), or into a copy
  (``--out``); ``--plain`` measures them in the plain forms, as ``M+plain`` decodes: the same
  answers replayed on what the exact forms cost and on what the plain ones cost. The ratios a
  replay prints move with the costs, so two records compared should carry costs measured alike;
- ``replay``: decodes every answer again with no model, for the naive loop, ``pld:K``,
  ``chain:K``, ``pld-or-chain:K`` and DyTC (``cas-spec``, and any ``--variant
  cas-spec@FIELD=VALUE,...`` of `DyTCConfig`), and prints each one's speedup over the naive loop,
  overall and per group, beside the hindsight bound (`casspec_ref.tools.replay.hindsight`: the
  least time of any schedule of chains that knew the answer), and where DyTC's time went: its
  steps by what drafted them, against the naive loop on the same tokens. The overheads decoding
  adds to the measured forwards are those measured with the costs, or options. DyTC carries
  one policy across the questions, so its figure is one path of its estimates: ``--orders N``
  replays it in N question orders (as recorded, then seeded shuffles) and prints the median and
  range of its overall speedup (the table shows the recorded order).

DyTC runs as ``cas-spec`` (this reference's policy, `DyTCConfig()`) and ``cas-spec:paper`` (the
paper's alone, `DyTCConfig.paper()`); a variant changes fields of either
(``cas-spec:paper@margin_bins=1``). ``--refinements`` adds, for each refinement of
`casspec_ref.dytc_config.REFINEMENTS` and the window, the default without it and the paper's
policy with it alone: what each one is worth, with no forward timed again.

Run: ``OMP_NUM_THREADS=2 python benchmarks/dytc_replay.py record --questions heldout --out
h.json`` (about 3 minutes), then ``python benchmarks/dytc_replay.py replay h.json --refinements
--orders 8`` (about 10 seconds per DyTC variant and order).
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import sys
import time
from typing import Any

import torch

from casspec_ref.baselines import ScheduleOptions
from casspec_ref.dsia.prompt_lookup import PromptLookupConfig
from casspec_ref.dytc_refinements import RefinedDyTC
from casspec_ref.schedules import SCHEDULES, ScheduleSpec
from casspec_ref.tools.replay import (
    Costs,
    Recorded,
    Replayed,
    hindsight,
    question_orders,
    record,
    replay,
)

SETS = {"bundled": "prompts", "heldout": "prompts_heldout"}
#: The verify sizes whose measured cost a replay record keeps (the whole curve is in the answers'
#: record).
SIZES = (1, 2, 3, 4, 8, 16, 32)
#: What decoding adds to the forwards, measured with the costs (`measure_overheads`).
OVERHEADS = ("draft", "step", "lookup", "recycle")


def measure_costs(
    model: Any,
    levels: list[Any],
    prompts: list[list[int]],
    cached: int = 256,
    repeats: int = 15,
    plain: bool = False,
) -> dict[str, Any]:
    """Median seconds of a target forward over T = 1..32 tokens and of each level's one-token
    forward, after `cached` tokens: every size and level once per pass, `repeats` passes (a burst
    of load then hits every size alike, not the few timed during it), after
    one untimed pass (one-time setup); then the overheads decoding adds to them, on ``prompts``
    (`measure_overheads`). ``plain``: in the plain forms (``model.shape_invariant`` off for the
    measurement), as ``M+plain`` decodes; else in the exact forms."""
    invariant = model.shape_invariant
    model.shape_invariant = not plain
    try:
        costs = _median_costs(model, levels, cached, repeats)
        costs["overheads"] = measure_overheads(model, prompts)
    finally:
        model.shape_invariant = invariant
    return {**costs, "forms": "plain" if plain else "exact"}


def measure_overheads(
    model: Any, prompts: list[list[int]], max_new_tokens: int = 64
) -> dict[str, float]:
    """Seconds decoding adds to the forwards on this machine, medians over the steps of two
    short decodes of ``prompts`` (each after an untimed warm-up), every forward and every prompt
    lookup timed apart: a speculative step's (``step``: prompt lookup's steps, a step's wall time
    less its forwards and its lookup: the verifier, the cache commit, the bookkeeping), one draft
    call's (``draft``: a one-token chain's steps, each one draft call, less a lookup step's), one
    prompt lookup's (``lookup``: `StepDrafter.lookup`, as decoding charges it to the lookup) and
    one recycled-token walk's (``recycle``: `time_recycle_walk`)."""
    from casspec_ref.baselines import ScheduleOptions
    from casspec_ref.draft import StepDrafter
    from casspec_ref.speculative import generate_speculative

    spent = [0.0]  # seconds in forwards and lookups since the last step ended
    lookups: list[float] = []  # seconds of each lookup in the timed decodes
    forward, lookup = model.forward, StepDrafter.lookup

    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return forward(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start

    def timed_lookup(drafter: StepDrafter, node: int, k: int) -> list[int]:
        start = time.perf_counter()
        try:
            return lookup(drafter, node, k)
        finally:
            lookups.append(time.perf_counter() - start)
            spent[0] += lookups[-1]

    def per_step(method: str, **options: Any) -> tuple[float, float]:
        rest: list[float] = []  # per step: its wall time less its forwards and lookups
        calls: list[int] = []  # per step: its draft calls
        last = [0.0]

        def on_step(trace: Any) -> None:
            now = time.perf_counter()
            if trace.step > 1:  # the first step's start is the prompt's forward
                rest.append(now - last[0] - spent[0])
                calls.append(trace.draft_forwards)
            last[0], spent[0] = now, 0.0

        for prompt in prompts:
            mark = len(lookups)
            generate_speculative(model, prompt, 16, method=method, **options)  # untimed
            del lookups[mark:]
            generate_speculative(
                model, prompt, max_new_tokens, method=method, on_step=on_step, **options
            )
        return statistics.median(rest), statistics.median(calls)

    own = model.__dict__.get("forward")  # a forward set on the instance (a wrapper), if any
    model.forward = timed
    StepDrafter.lookup = timed_lookup  # type: ignore[method-assign]
    try:
        step, _ = per_step("pld")
        looked = statistics.median(lookups)
        chain, calls = per_step("chain", schedule=ScheduleOptions(chain_k=1))
    finally:
        StepDrafter.lookup = lookup  # type: ignore[method-assign]
        if own is None:
            del model.forward  # the class's own again
        else:
            model.forward = own
    return {
        "step": step,
        "draft": max(chain - step, 0.0) / max(calls, 1.0),
        "lookup": looked,
        "recycle": time_recycle_walk(model, prompts[0]),
    }


def time_recycle_walk(model: Any, prompt: list[int], k: int = 4, width: int = 3) -> float:
    """Median seconds of one recycled-token draft as `StepDrafter` makes it (a token's top
    `width` successors, then a walk of `k` - 1 from the first), from each token of `prompt`,
    over a table filled by one target forward over `prompt` (its top successors)."""
    from casspec_ref.dsia.recycle import TokenRecycler

    recycler = TokenRecycler()
    with torch.no_grad():
        logits = model(torch.tensor([prompt]))  # (1, P, V)
    recycler.update(prompt, logits[0])
    times = []
    for token in prompt:
        start = time.perf_counter()
        first = recycler.alternatives(token, width)
        if first:
            recycler.chain(first[0][0], k - 1)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _median_costs(model: Any, levels: list[Any], cached: int, repeats: int) -> dict[str, Any]:
    """`measure_costs` in the forms the model is set to."""
    from casspec_ref.kv_cache import KVCache

    cfg = model.config
    cache = KVCache(cfg, cached + 40, next(model.parameters()).dtype, "cpu")
    jobs = [(t, None) for t in range(1, 33)] + [(1, plan) for plan in levels]
    times: dict[int, list[float]] = {j: [] for j in range(len(jobs))}
    with torch.no_grad():
        model.forward(torch.randint(0, cfg.vocab_size, (1, cached)), cache=cache)
        for rep in range(repeats + 1):
            for j, (tokens, plan) in enumerate(jobs):
                x = torch.randint(0, cfg.vocab_size, (1, tokens))
                start = time.perf_counter()
                model.forward(x, cache=cache, plan=plan)
                if rep:
                    times[j].append(time.perf_counter() - start)
                cache.truncate(cached)
    median = {j: statistics.median(t) for j, t in times.items()}
    verify = {t: median[j] for j, (t, plan) in enumerate(jobs) if plan is None}
    draft = {plan.name: median[j] for j, (_, plan) in enumerate(jobs) if plan is not None}
    measured = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return {"verify": verify, "draft": draft, "measured": measured}


def do_record(args: argparse.Namespace) -> None:
    from casspec_ref.generate import generate_ar
    from casspec_ref.io.weights import load_model
    from casspec_ref.speculative import default_drafts
    from casspec_ref.tools.bench import default_questions_path, load_questions

    model, tokenizer = load_model()
    assert tokenizer is not None
    levels = list(default_drafts(model))
    records = []
    for q in load_questions(default_questions_path(SETS[args.questions])):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": q.turns[0]}])
        answer = list(generate_ar(model, prompt, args.max_new_tokens).tokens)
        with torch.no_grad():
            records.append(record(model, prompt, answer, levels, q.category).to_json())
        print(f"recorded question {q.question_id} ({q.category})", flush=True)
    costs = measure_costs(model, levels, [r["prompt"] for r in records[:2]])
    with open(args.out, "w") as f:
        json.dump({"questions": args.questions, "records": records, "costs": costs}, f)
    print(f"wrote {args.out}")


def do_recost(args: argparse.Namespace) -> None:
    """Measure this machine's costs again into an existing record (answers untouched)."""
    from casspec_ref.io.weights import load_model
    from casspec_ref.speculative import default_drafts
    from casspec_ref.tools.bench import command_line

    model, _ = load_model()
    with open(args.record) as f:
        data = json.load(f)
    prompts = [r["prompt"] for r in data["records"][:2]]
    data["costs"] = measure_costs(model, list(default_drafts(model)), prompts, plain=args.plain)
    data["costs"]["command"] = command_line(sys.argv[1:], ("benchmarks/dytc_replay.py",))
    data.pop("note", None)  # a note written by hand described the costs replaced
    out = args.out or args.record
    if out != args.record:  # a copy: its answers were recorded into the original
        data["answers_from"] = data.get("answers_from", args.record)
    with open(out, "w") as f:
        json.dump(data, f)
    ms = {t: round(s * 1e3, 1) for t, s in data["costs"]["verify"].items() if t in (1, 2, 4, 8, 16)}
    print(f"wrote the costs of {out} ({data['costs']['measured']}): verify (ms) {ms}")


def parse_variant(text: str) -> Any:
    """``"cas-spec@warmup=10,window=60"`` -> `DyTCConfig(warmup=10, window=60)`; the base
    ``cas-spec:paper`` changes `DyTCConfig.paper()` instead (a switch is 0 or 1)."""
    from casspec_ref.dytc_config import DyTCConfig

    base, _, spec = text.partition("@")
    if base not in ("cas-spec", "cas-spec:paper"):
        raise SystemExit(f"--variant {text!r}: the base must be cas-spec or cas-spec:paper")
    fields: dict[str, float | int] = {}
    for item in filter(None, spec.split(",")):
        name, _, value = item.partition("=")
        fields[name] = float(value) if "." in value else int(value)
    return DyTCConfig.paper(**fields) if base == "cas-spec:paper" else DyTCConfig(**fields)


def refinement_variants() -> list[str]:
    """Each refinement taken out of the default, and put alone into the paper's policy."""
    from casspec_ref.dytc_config import REFINEMENTS, DyTCConfig

    best, paper = DyTCConfig().window, DyTCConfig.paper().window
    out = [f"cas-spec@window={paper}", f"cas-spec:paper@window={best}"]
    for name in REFINEMENTS:
        out += [f"cas-spec@{name}=0", f"cas-spec:paper@{name}=1"]
    return out


def replay_overheads(args: argparse.Namespace, raw: dict[str, Any]) -> dict[str, float]:
    """The overheads a replay adds (seconds), by `Costs` field: a draft call's and a step's, the
    options where given, else those measured with the costs (`measure_overheads`); a prompt
    lookup's and a recycled-token walk's, measured only."""
    measured = raw.get("overheads", {})
    given = {
        **dict.fromkeys(OVERHEADS),
        "draft": args.draft_overhead,
        "step": args.step_overhead,
    }
    missing = [name for name, value in given.items() if value is None and name not in measured]
    if missing:
        raise SystemExit(
            f"the costs replayed carry no measured {', '.join(missing)} overhead: recost the "
            "record (`recost`); --draft-overhead and --step-overhead (seconds) stand for the "
            "first two"
        )
    return {
        f"{name}_overhead": measured[name] if value is None else value
        for name, value in given.items()
    }


def do_replay(args: argparse.Namespace) -> None:
    with open(args.record) as f:
        data = json.load(f)
    records = [Recorded(**r) for r in data["records"]]
    raw = data["costs"]
    if args.costs_from:  # another record's costs: two records replayed on one machine state
        with open(args.costs_from) as f:
            raw = json.load(f)["costs"]
    data = {**data, "costs": raw}  # the record written names the costs replayed on
    overheads = replay_overheads(args, raw)
    costs = Costs.from_json(raw, **overheads)
    levels = list(records[0].drafts)

    def baseline(method: str, k: int) -> Any:  # the bench's schedule for ``method:k``
        options = ScheduleOptions(chain_k=k) if method != "pld" else None
        return SCHEDULES[method](ScheduleSpec(levels, 0, options=options))  # n_layers: unread

    runs: dict[str, Replayed] = {"ar": replay(records, costs)}
    for k in (2, 3, 4, 5, 6, 8):
        lookup = PromptLookupConfig(max_proposal=k)
        runs[f"pld:{k}"] = replay(records, costs, baseline("pld", k), lookup=lookup)
    for k in (2, 3, 4, 5, 6):
        for method in ("chain", "pld-or-chain"):
            runs[f"{method}:{k}"] = replay(records, costs, baseline(method, k))
    ar_seconds = sum(runs["ar"].seconds.values())
    orders: dict[str, list[float]] = {}  # DyTC's overall speedup per question order
    variants = ["cas-spec", "cas-spec:paper", *args.variant]
    variants += refinement_variants() if args.refinements else []
    for name in variants:
        config = parse_variant(name if "@" in name else name + "@")
        orders[name] = []
        for i, order in enumerate(question_orders(records, args.orders)):
            policy = RefinedDyTC(levels, config)
            run = replay(order, costs, policy=policy)
            orders[name].append(ar_seconds / sum(run.seconds.values()))
            if i == 0:  # the recorded order: the table's row and the estimates printed
                runs[name] = run
                est = policy.alpha.items()
                alphas = ", ".join(f"{d} {e.alpha:.2f} ({e.count})" for d, e in est)
                print(f"{name}: final estimates (outcomes): {alphas}")
    bound = Replayed({}, {})  # no policy: the least time of any schedule of chains, in hindsight
    kinds: dict[str, int] = {}
    for rec in records:
        seconds, steps = hindsight(rec, costs)
        bound.seconds[rec.category] = bound.seconds.get(rec.category, 0.0) + seconds
        for kind, count in steps.items():
            kinds[kind] = kinds.get(kind, 0) + count
    ar = runs["ar"]
    groups = list(ar.seconds)
    print(
        f"\n{data['questions']}: {len(records)} first turns, replayed; speedup over the naive loop"
    )
    print(f"{'method':36s} {'overall':>8s} " + " ".join(f"{g[:9]:>9s}" for g in groups))
    fixed = [n for n in runs if n != "ar" and not n.startswith("cas-spec")]
    best_fixed = min(fixed, key=lambda n: sum(runs[n].seconds.values()))
    for name, run in runs.items():
        overall = ar_seconds / sum(run.seconds.values())
        per = " ".join(f"{ar.seconds[g] / run.seconds[g]:9.3f}" for g in groups)
        mark = "  <- best fixed" if name == best_fixed else ""
        print(f"{name:36s} {overall:8.3f} {per}{mark}")
    overall = ar_seconds / sum(bound.seconds.values())
    per = " ".join(f"{ar.seconds[g] / bound.seconds[g]:9.3f}" for g in groups)
    print(f"{'hindsight (knows the answer)':36s} {overall:8.3f} {per}")
    print(f"hindsight's steps by kind: {dict(sorted(kinds.items(), key=lambda kv: -kv[1]))}")
    for name in ("cas-spec", "cas-spec:paper"):
        print_kinds(name, runs[name])
    if args.orders > 1:
        print(f"DyTC in {args.orders} question orders (as recorded, then shuffled), overall:")
        for name, speedups in orders.items():
            print(
                f"  {name:34s} median {statistics.median(speedups):.3f}, "
                f"range {min(speedups):.3f}-{max(speedups):.3f}"
            )
    if args.json:
        speedups = {n: ar_seconds / sum(r.seconds.values()) for n, r in runs.items() if n != "ar"}
        bound_speedup = ar_seconds / sum(bound.seconds.values())
        ledgers = {name: steps_by_kind(runs[name]) for name in ("cas-spec", "cas-spec:paper")}
        figures = (speedups, best_fixed, orders, bound_speedup, kinds, ledgers, overheads)
        write_record(args, data, len(records), *figures)
        print(f"wrote {args.json}")


def steps_by_kind(run: Replayed) -> dict[str, dict[str, float]]:
    """A replay's steps by kind (`Replayed.kinds`), as plain data in milliseconds (printed the kind
    that lost most first; the record keeps them by name)."""
    rows = sorted(run.kinds.items(), key=lambda kv: kv[1].gained)
    return {
        kind: {
            "steps": k.steps,
            "tokens": k.tokens,
            "ms": 1e3 * k.seconds,
            "overhead_ms": 1e3 * k.overhead_seconds,
            "naive_ms": 1e3 * k.naive_seconds,
        }
        for kind, k in rows
    }


def print_kinds(name: str, run: Replayed) -> None:
    """Where `name`'s time went, by kind of step, against the naive loop on the same tokens."""
    print(f"\n{name}, recorded order: steps by what drafted them (ms; gained = naive - spent)")
    columns = ("steps", "tokens", "spent", "overhead", "naive", "gained")
    print(f"  {'kind':42s} " + " ".join(f"{c:>9s}" for c in columns))
    for kind, k in steps_by_kind(run).items():
        gained = k["naive_ms"] - k["ms"]
        figures = (k["steps"], k["tokens"], k["ms"], k["overhead_ms"], k["naive_ms"])
        print(f"  {kind:42s} " + " ".join(f"{f:9.1f}" for f in figures) + f" {gained:+9.1f}")


def write_record(
    args: argparse.Namespace,
    data: dict[str, Any],
    answers: int,
    speedups: dict[str, float],
    best_fixed: str,
    orders: dict[str, list[float]],
    bound: float,
    bound_steps: dict[str, int],
    ledgers: dict[str, dict[str, dict[str, float]]],
    overheads: dict[str, float],
) -> None:
    """The replay's figures as a results record (docs/bench/, `casspec_ref.tools.results`):
    each method's overall speedup over the naive loop, DyTC's over the question orders, the
    hindsight bound (``bound``, its steps by kind), each preset's steps by kind in the recorded
    order (``ledgers``, `steps_by_kind`), the measured costs it was replayed on and the
    overheads added to them (``overheads``, `replay_overheads`)."""
    from casspec_ref.tools.bench import environment

    command = shlex.join(["python", "benchmarks/dytc_replay.py", *sys.argv[1:]])
    record = {
        "benchmark": "dytc_replay",
        "environment": environment("cpu", "float32", command),
        "questions": data["questions"],
        "record_command": "OMP_NUM_THREADS=2 python benchmarks/dytc_replay.py record "
        f"--questions {data['questions']} --out {data.get('answers_from', args.record)}",
        "answers": answers,
        "costs_measured": data["costs"].get("measured", ""),
        "costs_forms": data["costs"].get("forms", "exact"),
        "costs_command": data["costs"].get("command", ""),
        "overheads_s": {name: overheads[f"{name}_overhead"] for name in OVERHEADS},
        "overheads_measured": {
            "draft": args.draft_overhead is None,
            "step": args.step_overhead is None,
        },
        "speedup": speedups,
        "best_fixed": best_fixed,
        "hindsight": {"speedup": bound, "steps": bound_steps},
        "steps_by_kind": ledgers,
        "costs_ms": {
            "verify": {t: 1e3 * s for t, s in data["costs"]["verify"].items() if int(t) in SIZES},
            "draft": {name: 1e3 * s for name, s in data["costs"]["draft"].items()},
        },
        "orders": {
            name: {"median": statistics.median(v), "min": min(v), "max": max(v), "n": len(v)}
            for name, v in orders.items()
        },
    }
    with open(args.json, "w") as f:
        json.dump(record, f, indent=1, sort_keys=True)
        f.write("\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="record answers, predictions and costs")
    rec.add_argument("--questions", choices=sorted(SETS), default="heldout")
    rec.add_argument("--max-new-tokens", type=int, default=128)
    rec.add_argument("--out", required=True)
    cost = sub.add_parser("recost", help="measure this machine's costs again into a record")
    cost.add_argument("record")
    cost.add_argument("--plain", action="store_true", help="in the plain forms (M+plain's)")
    cost.add_argument("--out", default=None, help="write to this file (default: the record)")
    rep = sub.add_parser("replay", help="replay the schedules on a record")
    rep.add_argument("record")
    rep.add_argument("--costs-from", default=None, help="a record whose costs to replay with")
    rep.add_argument(
        "--variant", action="append", default=[], help="cas-spec[:paper]@FIELD=VALUE,..."
    )
    rep.add_argument(
        "--refinements",
        action="store_true",
        help="also each refinement out of the default and alone in the paper's policy",
    )
    rep.add_argument(
        "--draft-overhead",
        type=float,
        default=None,
        help="seconds per draft call (default: as measured with the costs)",
    )
    rep.add_argument(
        "--step-overhead",
        type=float,
        default=None,
        help="seconds per step (default: as measured with the costs)",
    )
    rep.add_argument("--json", default=None, help="also write the figures to this record")
    rep.add_argument(
        "--orders",
        type=int,
        default=1,
        help="replay DyTC in this many question orders (the recorded one, then seeded shuffles)",
    )
    args = parser.parse_args()
    {"record": do_record, "recost": do_recost, "replay": do_replay}[args.command](args)


if __name__ == "__main__":
    main()
