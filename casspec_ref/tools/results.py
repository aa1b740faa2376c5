"""Write docs/results.md from the records in docs/bench/: the one page that holds run figures.

``python -m casspec_ref.tools.results [--records DIR] [--out FILE] [--check]`` (``make results``).

Every figure on the page is read from a JSON record in ``--records`` and printed beside the
record's command, commit and machine (its ``environment`` block), so that a figure can always be
traced to the run that produced it and reproduced. The page is a pure function of the records
(`render`): ``tests/test_results.py`` checks that the committed page is exactly what the
committed records give, so the page cannot drift from them.

Records, by the shape of their content rather than a fixed list of names:

- a bench record (``settings`` and ``records``: what ``bench --record FILE`` writes): every method
  it holds, overall and per group, the paired comparisons, divergences and what DyTC learned;
- ``cpu_verify_curve.json`` (``benchmarks/verify_curve.py --json``): the verify cost curve;
- ``dsia_table.json`` (``benchmarks/dsia_table.py``): alpha and c of every DSIA draft;
- ``gpu_forward*.json`` (``benchmarks/cuda_forward.py --json``): where a GPU forward's time goes;
- ``cpu_dytc_replay.json`` (``benchmarks/dytc_replay.py replay --json``: ``"benchmark":
  "dytc_replay"``): DyTC's presets and each refinement alone, on recorded acceptances;
  ``cpu_dytc_replay_plain.json``: the same answers on costs measured in the plain forms;
- ``busy_machine.json`` (``benchmarks/busy_machine.py``: ``"benchmark": "busy_machine"``): speed
  per condition and thread setting, speedups, the policy's quiet cost and switches;
- a record whose stem ends in a `KIND_SUFFIXES` suffix (``cpu_exact_cost_avx512.json``): the
  same benchmark on another kind of CPU, shown after its namesake, the kind in its title;
- any other JSON record: its environment and every scalar it holds, so that a new record appears
  on the page without a change here.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from casspec_ref.tools.bench import base_label, plain_line

RECORDS = Path("docs/bench")
PAGE = Path("docs/results.md")

# The order of the page's sections; records not named here follow in name order.
ORDER = (
    "cpu_heldout_greedy",
    "cpu_heldout_bf16",
    "cpu_exact_cost",
    "cpu_dispatch_kernels",
    "cpu_bundled_greedy",
    "cpu_heldout_sampling",
    "cpu_verify_curve",
    "dsia_table",
    "busy_machine",
    "cpu_dytc_replay",
    "cpu_dytc_replay_plain",
    "gpu_bundled_greedy",
    "gpu_bundled_bf16",
    "gpu_forward",
    "gpu_forward_bf16",
)
TITLES = {
    "cpu_heldout_greedy": "CPU, held-out prompt set, greedy",
    "cpu_heldout_bf16": "CPU, held-out prompt set, greedy, bfloat16",
    "cpu_exact_cost": "CPU, what exactness costs at each dispatch level",
    "cpu_dispatch_kernels": "CPU, what each dispatch level does to the plain kernels",
    "cpu_bundled_greedy": "CPU, bundled prompt set, greedy",
    "cpu_heldout_sampling": "CPU, held-out prompt set, sampling",
    "cpu_verify_curve": "CPU, the verify cost curve",
    "dsia_table": "DSIA drafts: alpha and c",
    "busy_machine": "A busy machine",
    "cpu_dytc_replay": "CPU, DyTC's refinements replayed on recorded acceptances",
    "cpu_dytc_replay_plain": "CPU, DyTC replayed on the plain forms' costs",
    "gpu_bundled_greedy": "GPU, bundled prompt set, greedy, float32",
    "gpu_bundled_bf16": "GPU, bundled prompt set, greedy, bfloat16",
    "gpu_forward": "GPU, where a forward's time goes",
    "gpu_forward_bf16": "GPU, where a forward's time goes, bfloat16",
}
#: A record of the same benchmark run on another kind of CPU: its stem is the first kind's with
#: this suffix, and its section follows that record's under the same title, the kind added.
KIND_SUFFIXES = {"_avx512": "AVX-512 machine"}
GENERIC_ROWS = 80  # the most scalars shown for a record of unknown shape


def load_records(folder: Path) -> dict[str, dict[str, Any]]:
    """Every ``*.json`` record in ``folder``, by file stem, in the page's order."""
    if not folder.is_dir():
        raise FileNotFoundError(f"records folder {folder} does not exist")
    found = {p.stem: json.loads(p.read_text()) for p in sorted(folder.glob("*.json"))}
    return dict(sorted(found.items(), key=lambda kv: _rank(kv[0])))


def _rank(stem: str) -> tuple[int, str]:
    base, _ = _kind(stem)
    return (ORDER.index(base) if base in ORDER else len(ORDER), stem)


def _kind(stem: str) -> tuple[str, str]:
    """(the first kind's stem, the kind of CPU) of a record's stem ("" for the first kind)."""
    for suffix, kind in KIND_SUFFIXES.items():
        if stem.endswith(suffix) and stem.removesuffix(suffix) in TITLES:
            return stem.removesuffix(suffix), kind
    return stem, ""


def title(stem: str) -> str:
    """A record's section title: its benchmark's, with the kind of CPU of a second kind's run."""
    base, kind = _kind(stem)
    name = TITLES.get(base, base.replace("_", " "))
    return f"{name} ({kind})" if kind else name


# ----------------------------------------------------------------------------------------------
# Formatting
# ----------------------------------------------------------------------------------------------


def num(value: Any, digits: int = 3) -> str:
    """A figure as the page prints it: fixed decimals, "-" where the record has none."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def source(name: str, record: dict[str, Any]) -> list[str]:
    """The provenance every section opens with: file, command, commit, machine, software."""
    env = record.get("environment", {})
    commit = f"`{env['git_commit']}`" if env.get("git_commit") else "not recorded"
    if env.get("commit_source"):
        commit += f" ({env['commit_source']})"
    software = ", ".join(
        f"{key} {env[key]}" for key in ("torch", "python", "dtype", "threads") if key in env
    )
    machine = env.get("machine") or env.get("device_name") or "not recorded"
    lines = [
        f"- Record: [`docs/bench/{name}.json`](bench/{name}.json)",
        f"- Command: `{env.get('command', 'not recorded')}`",
        f"- Commit: {commit}",
        f"- Machine: {machine}" + (f"; {software}" if software else ""),
    ]
    if env.get("time"):
        lines.append(f"- Run at: {env['time']}")
    if env.get("notes"):
        lines.append(f"- Notes: {env['notes']}")
    return lines


# ----------------------------------------------------------------------------------------------
# Sections
# ----------------------------------------------------------------------------------------------


def bench_section(record: dict[str, Any]) -> list[str]:
    """A bench record: overall figures, paired comparisons, groups, divergences, DyTC."""
    settings = record["settings"]
    rows = record["records"]
    methods = list(dict.fromkeys(r["method"] for r in rows))
    groups = [g for g in dict.fromkeys(r["group"] for r in rows) if g != "overall"]
    by = {(r["method"], r["group"]): r for r in rows}
    draws = (
        "greedy"
        if not settings.get("temperature", 0.0)
        else (
            f"temperature {settings['temperature']}, top-k {settings.get('top_k', 0)}, "
            f"top-p {settings.get('top_p', 1.0)}"
        )
    )
    lines = [
        f"Settings: {settings.get('n_questions')} questions "
        f"(`{Path(str(settings.get('questions'))).name}`), "
        f"{settings.get('max_new_tokens')} new tokens, {settings.get('runs')} run(s), {draws}, "
        f"{settings.get('device')} {settings.get('dtype')}.",
        "",
    ]
    lines += table(
        ["method", "base", "speedup [95% interval]", "decode", "total", "MAT", "tok/s"]
        + ["= naive loop"],
        [_overall_row(m, by[(m, "overall")]) for m in methods],
    )
    paired = (record.get("paired") or {}).get("against") or {}
    if paired:
        target = record["paired"]["target"]
        lines += ["", f"`{target}` over each method (ratio of speedups, paired 95% interval):", ""]
        lines += table(
            ["method", "ratio", "interval"],
            [[f"`{m}`", num(p["ratio"]), _interval(p["interval"])] for m, p in paired.items()],
        )
    lines += ["", "Per group, speedup (MAT):", ""]
    lines += table(
        ["method", *groups],
        [
            [f"`{m}`"]
            + [f"{num(by[(m, g)]['speedup'])} ({num(by[(m, g)]['mat'], 2)})" for g in groups]
            for m in methods
        ],
    )
    sampled = settings.get("temperature", 0.0) != 0.0
    lines += divergence_lines(
        record.get("divergences") or [], sampled, record.get("plain_divergences")
    )
    curve = record.get("verify_curve_ms") or {}
    if curve:
        lines += [
            "",
            "The target's forward over T new tokens after 256 cached, ms (`--verify-curve`):",
        ]
        lines += [""] + table(["T", *curve], [["ms", *(num(v, 1) for v in curve.values())]])
    for method, learned in (record.get("dytc") or {}).items():
        lines += dytc_lines(method, learned)
    return lines


def _overall_row(method: str, r: dict[str, Any]) -> list[str]:
    speedup = num(r["speedup"])
    if r.get("speedup_std"):
        speedup += f" +-{num(r['speedup_std'])}"
    if r.get("speedup_interval") and method != "ar":
        speedup += " " + _interval(r["speedup_interval"])
    return [
        f"`{method}`",
        base_label(r),
        speedup,
        num(r.get("speedup_decode")),
        num(r.get("speedup_total")),
        num(r.get("mat"), 2),
        num(r.get("tokens_per_s"), 1),
        num(r.get("equal_to_ar")),
    ]


def _interval(bounds: Sequence[float]) -> str:
    return f"[{num(bounds[0])}, {num(bounds[1])}]"


def divergence_lines(
    divergences: Sequence[Any], sampled: bool, plain: dict[str, Any] | None = None
) -> list[str]:
    """How many generations differ from the naive loop's, and the first few; then, for each
    method that ran in the plain forms (``plain``: its report by method), how many of its
    generations differ from ``ar``'s (a lesson in rounding, no failure)."""
    if sampled:
        return [
            "",
            "Sampled: outputs are not compared token for token (the law tests prove it), and "
            "every speedup is against `ar`.",
        ]
    plain_lines = [
        line
        for method, report in (plain or {}).items()
        for line in ("", plain_line(method, report) + " (its kernels round by shape).")
    ]
    if not divergences:
        others = " of the other methods" if plain else ""
        return ["", f"Every output{others} equals the naive loop's token for token.", *plain_lines]
    lines = ["", f"Divergences from the naive loop: {len(divergences)}.", ""]
    for d in divergences[:10]:
        lines.append(f"- {json.dumps(d, sort_keys=True)}")
    return lines + plain_lines


def dytc_lines(method: str, learned: dict[str, Any]) -> list[str]:
    """What DyTC learned in a run: its verify cost per tree size, and alpha and c per draft."""
    verify = learned.get("verify_ms") or {}
    lines = ["", f"What `{method}`'s DyTC learned: verify cost per tree size, ms", ""]
    if verify:
        sizes = list(verify)
        lines += table(["nodes", *sizes], [["ms", *(num(verify[s], 1) for s in sizes)]])
    drafts = learned.get("drafts") or {}
    if drafts:
        lines += ["", "Per draft (and per estimate key): alpha, outcomes observed, c.", ""]
        lines += table(
            ["estimate", "alpha", "outcomes", "c"],
            [
                [f"`{k}`", num(d.get("alpha")), num(d.get("observations")), num(d.get("c"))]
                for k, d in drafts.items()
            ],
        )
    return lines


def verify_curve_section(record: dict[str, Any]) -> list[str]:
    """One forward after 256 cached tokens, over T new tokens: before and with the kernel table."""
    curve = record["curve_ms"]
    forms = list(curve)
    sizes = [t for t in curve[forms[-1]] if int(t) > 0]
    one = {form: curve[form].get("1") for form in forms}
    lines = table(
        ["T", *sizes],
        [[f"{form}, ms", *(num(curve[form].get(t), 1) for t in sizes)] for form in forms]
        + [
            [f"{form}, x T = 1", *(num(curve[form][t] / one[form], 2) for t in sizes)]
            for form in forms
            if one[form]
        ],
    )
    lines += [
        "",
        f"Weight bytes {record.get('weight_bytes')}; read bandwidth "
        f"{num(record.get('bandwidth_bytes_per_s', 0) / 1e9, 1)} GB/s; the weight-reading floor "
        f"{num(record.get('floor_ms'), 1)} ms.",
    ]
    naive = record.get("generate_ar") or {}
    if naive:
        lines += ["", "The naive loop with each form:", ""]
        lines += table(
            ["form", "tok/s", "same tokens"],
            [
                [form, num(v.get("tokens_per_s"), 1), num(v.get("same_tokens_as_first"), 2)]
                for form, v in naive.items()
            ],
        )
    return lines


def dsia_section(record: dict[str, Any]) -> list[str]:
    """Every DSIA draft's acceptance (greedy and at temperature 0.7) and cost, and the plot."""
    lines = table(
        ["draft", "kind", "alpha (greedy)", "alpha (1 - TV, T 0.7)", "c", "layers skipped"],
        [
            [
                f"`{r['name']}`",
                str(r.get("kind", "")),
                num(r.get("alpha_greedy")),
                num(r.get("alpha_tv")),
                num(r.get("c")),
                num(r.get("sparsity"), 2),
            ]
            for r in record["rows"]
        ],
    )
    return [*lines, "", "![alpha against c for every DSIA draft](bench/dsia_alpha_c.png)"]


def gpu_forward_section(record: dict[str, Any]) -> list[str]:
    """A GPU forward's wall time against the host's time to issue it, per dtype."""
    lines: list[str] = []
    for dtype, d in record.items():
        if dtype == "environment" or not isinstance(d, dict) or "gpu_ms" not in d:
            continue
        sizes = list(d["gpu_ms"])
        lines += [f"{dtype}:", ""]
        lines += table(
            ["T", *sizes],
            [
                ["forward, ms", *(num(d["gpu_ms"][t], 1) for t in sizes)],
                ["issue, ms", *(num(d["issue_ms"][t], 1) for t in sizes)],
            ],
        )
        lines += [
            "",
            f"Kernels per forward {num(d.get('kernels_per_forward'), 0)}; GPU busy "
            f"{num(d.get('gpu_busy_ms_per_forward'), 1)} ms a forward; host-device syncs per 16 "
            f"tokens {num(d.get('syncs_per_16_tokens'))}; naive loop "
            f"{num(d.get('ar_tok_s'), 1)} tok/s.",
            "",
        ]
    return lines[:-1] if lines else lines


def busy_machine_section(record: dict[str, Any]) -> list[str]:
    """``benchmarks/busy_machine.py``'s record: speed per condition under each thread setting,
    CAS-Spec's speedup per condition, the policy's quiet cost, its switches, token equality."""
    settings, rates = record["settings"], record["rates"]
    by = {(r["setting"], r["method"], r["condition"]): r for r in rates}
    conditions = list(dict.fromkeys(r["condition"] for r in rates))
    rows = list(dict.fromkeys((r["setting"], r["method"]) for r in rates))
    lines = [
        f"Settings: {settings['max_new_tokens']} new tokens per decode (greedy, one chat "
        f"prompt), {settings['repeats']} repeat(s), each cell a fresh process, conditions in "
        f"turn; `competitor-mid` starts the busy loop {num(settings['mid_run_fraction'], 2)} of "
        "the quiet decode time into the timed decode. Every ratio is the median over repeats of "
        "the ratio within one repeat.",
        "",
        "Tokens per second, median over repeats (over the quiet figure):",
        "",
    ]

    def rate(s: str, m: str, c: str) -> str:
        r = by.get((s, m, c))
        if r is None:
            return ""
        shown = num(r["tokens_per_s"], 1)
        return shown if c == "quiet" else f"{shown} ({num(r['over_quiet'])})"

    lines += table(
        ["setting", "method", *conditions],
        [[f"`{s}`", f"`{m}`", *(rate(s, m, c) for c in conditions)] for s, m in rows],
    )
    speedups = record.get("speedups") or []
    if speedups:
        sp = {(r["setting"], r["condition"]): r for r in speedups}
        lines += ["", "CAS-Spec over the naive loop (over the quiet speedup):", ""]
        lines += table(
            ["setting", *conditions],
            [
                [f"`{s}`"] + [_busy_speedup(sp.get((s, c)), c) for c in conditions]
                for s in dict.fromkeys(r["setting"] for r in speedups)
            ],
        )
    lines += _busy_cost_lines(record) + _busy_target_lines(record)
    return lines + _busy_switch_lines(record)


def _busy_speedup(r: dict[str, Any] | None, condition: str) -> str:
    if r is None:
        return ""
    if condition == "quiet":
        return num(r["speedup"])
    return f"{num(r['speedup'])} ({num(r['over_quiet_speedup'])})"


def _busy_cost_lines(record: dict[str, Any]) -> list[str]:
    """The quiet cost of the policy: quiet tokens per second of one setting over another's."""
    cost = record.get("quiet_cost") or []
    if not cost:
        return []
    pairs = [k for k in cost[0] if k != "method" and not k.endswith("_interval")]
    lines = ["", "Quiet, one setting's tokens per second over another's:", ""]
    header = [k.replace("_over_", " / ").replace("_", " ") for k in pairs]
    lines += table(
        ["method", *header],
        [[f"`{c['method']}`", *(_with_interval(c, k) for k in pairs)] for c in cost],
    )
    return lines + _busy_paired_lines(record.get("paired") or [])


def _busy_paired_lines(paired: list[dict[str, Any]]) -> list[str]:
    """How the paired figure was measured: its pairs, whether they did the same work, switches."""
    if not paired:
        return []
    shown = []
    for m in dict.fromkeys(p["method"] for p in paired):
        rows = [p for p in paired if p["method"] == m and p.get("pair_ratios")]
        same = [p.get("same_work") for p in rows]
        shown.append(
            [
                f"`{m}`",
                str(sum(len(p["pair_ratios"]) for p in rows)),
                "-" if not rows else "not recorded" if None in same else num(all(same)),
                str(sum(p.get("switches_in_pairs") or 0 for p in rows)),
            ]
        )
    head = ["method", "pairs", "same work in every decode", "switches during the pairs"]
    lines = ["", "The paired decodes (`policy / unwatched`, 95% bootstrap interval):", ""]
    return lines + table(head, shown)


def _with_interval(row: dict[str, Any], key: str) -> str:
    """``row[key]``, followed by its interval where the row has one (``<key>_interval``)."""
    bounds = row.get(f"{key}_interval")
    return num(row[key]) + (f" {_interval(bounds)}" if bounds else "")


#: The busy-machine targets (docs/benchmarks.md): under the policy, one competing process
#: costs at most 2x tokens per second; the quiet machine loses at most 3% to the policy; and
#: CAS-Spec's speedup beside a competing process stays within 10% of its quiet speedup.
COMPETITOR_FLOOR = 0.5
QUIET_FLOOR = 0.97
SPEEDUP_BAND = (0.9, 1.1)


def _busy_target_lines(record: dict[str, Any]) -> list[str]:
    """Each target of the policy beside its figure in this record, and whether it is met."""
    by = {(r["setting"], r["method"], r["condition"]): r for r in record["rates"]}
    costs = record.get("quiet_cost") or []
    paired = any(c.get("policy_over_unwatched") is not None for c in costs)
    key = "policy_over_unwatched" if paired else "policy_over_inherited"
    versus = "its run-time part off (paired)" if paired else "`inherited`"
    cost = {c["method"]: c.get(key) for c in costs}
    drift = {r["condition"]: r for r in record.get("speedups") or [] if r["setting"] == "policy"}
    checks: list[tuple[str, float | None, float, float | None]] = []
    for m in ("ar", "cas-spec"):
        kept = (by.get(("policy", m, "competitor")) or {}).get("over_quiet")
        checks.append((f"`{m}` beside a competitor, over quiet", kept, COMPETITOR_FLOOR, None))
        checks.append((f"`{m}` quiet, `policy` over {versus}", cost.get(m), QUIET_FLOOR, None))
    moved = (drift.get("competitor") or {}).get("over_quiet_speedup")
    checks.append(("speedup beside a competitor, over the quiet speedup", moved, *SPEEDUP_BAND))
    shown = []
    for name, figure, low, high in checks:
        if figure is not None:
            met = figure >= low and (high is None or figure <= high)
            bound = f">= {low}" if high is None else f"{low} to {high}"
            shown.append([name, bound, num(figure), num(met)])
    if not shown:
        return []
    return ["", "The policy's targets:", "", *table(["figure", "target", "value", "met"], shown)]


def _busy_switch_lines(record: dict[str, Any]) -> list[str]:
    """Whether the policy switched its count during the timed decodes; token equality; errors."""
    policy = [r for r in record["rates"] if r["setting"] == "policy"]
    cells = record.get("cells") or []
    lines = []
    if policy:
        most: dict[tuple[str, str], float] = {}
        for c in cells:
            if c["setting"] == "policy" and c.get("most_others_seen") is not None:
                key = (c["method"], c["condition"])
                most[key] = max(most.get(key, 0.0), c["most_others_seen"])
        lines += ["", "The policy's thread count during the timed decodes:", ""]
        lines += table(
            ["method", "condition", "switching allowed", "switched mid-run", "most other cores"],
            [
                [
                    f"`{r['method']}`",
                    f"`{r['condition']}`",
                    num(r["switching"]),
                    f"{r['switched_cells']} of {r['repeats']}",
                    num(most.get((r["method"], r["condition"])), 2),
                ]
                for r in policy
            ],
        )
        notes = sorted({c["switching_note"] for c in cells if c["setting"] == "policy"} - {None})
        lines += ["", *(f"Switching: {note}." for note in notes)] if notes else []
    differences = record.get("differences") or []
    if not differences:
        lines += ["", "Every generation equals the quiet naive loop's token for token."]
    else:
        count = len(differences)
        lines += ["", f"Generations that differ from the quiet naive loop's: {count}.", ""]
        lines += [f"- {_busy_cell(d)}: first at token {d['first_difference']}" for d in differences]
    failed = [c for c in cells if c.get("error")]
    if failed:
        lines += ["", f"Failed cells: {len(failed)}.", ""]
        lines += [f"- {_busy_cell(c)}: {c['error']}" for c in failed]
    return lines


def _busy_cell(c: dict[str, Any]) -> str:
    return f"repeat {c['repeat']}, `{c['setting']}`, `{c['method']}`, `{c['condition']}`"


def exact_cost_section(record: dict[str, Any]) -> list[str]:
    """benchmarks/exact_cost.py: per dispatch level and dtype, the exact and plain forward at
    T = 1 and 16, the naive loop in both forms, and the tiles the check chose."""
    header = ["level", "dtype", "T=1 exact / plain ms", "T=16 exact / plain ms"]
    header += ["naive loop exact / plain tok/s", "exact / plain", "same tokens", "tiles"]
    rows = []
    for r in record["rows"]:
        one, many, naive = r["forward_ms_T1"], r["forward_ms_T16"], r["naive_tok_s"]
        reports = [x for x in r.get("shape_invariance", []) if x.get("dtype") == r["dtype"]]
        tiles = sorted({t or "row by row" for x in reports for t in x.get("forms", {}).values()})
        rows.append(
            [
                f"{r['level']} ({r['capability']})",
                r["dtype"],
                f"{num(one['exact'], 1)} / {num(one['plain'], 1)}",
                f"{num(many['exact'], 1)} / {num(many['plain'], 1)}",
                f"{num(naive['exact'], 1)} / {num(naive['plain'], 1)}",
                num(r["exact_over_plain"]),
                "yes" if r["naive_same_tokens"] else "no",
                ", ".join(tiles) or "-",
            ]
        )
    lines = table(header, rows)
    for missing in record.get("levels_not_run", []):
        lines.append(f"- not run: {missing}")
    return lines


def dispatch_kernels_section(record: dict[str, Any]) -> list[str]:
    """benchmarks/dispatch_kernels.py: what the plain kernels do to a row's bits, one column per
    dispatch level (a level the record did not run: every cell marked), one row per count; the
    table docs/floating_point.md shows."""
    by_level: dict[str, dict[str, dict[str, Any]]] = {}
    for r in record["rows"]:
        by_level.setdefault(r["level"], {})[r["dtype"]] = r
    header = ["what"] + [_level_heading(next(iter(rows.values()))) for rows in by_level.values()]
    not_run = [m.partition(": ") for m in record.get("levels_not_run", [])]
    header += [f"{level}: not run ({why})" for level, _, why in not_run]
    rows = []
    for what, cell in _dispatch_cells(record):
        row = [what] + [cell(dtypes) for dtypes in by_level.values()]
        rows.append(row + ["not run"] * len(not_run))
    return table(header, rows)


def _level_heading(r: dict[str, Any]) -> str:
    caps = [f"oneDNN {r.get('onednn_max_cpu_isa') or 'uncapped'}"]
    caps.append(f"MKL {r.get('mkl_enable_instructions') or 'uncapped'}")
    return f"{r['level']} ({r['capability']}; {', '.join(caps)})"


def _dispatch_cells(record: dict[str, Any]) -> list[tuple[str, Any]]:
    """(row label, cell of a level's rows by dtype) for each row of the dispatch table."""
    first = record["rows"][0]
    widths = " / ".join(first["silu_rows_differ"])
    shapes = " / ".join(first["linear_prefixes_differ"])
    threads = " and ".join(str(n) for n in first["threads"])

    def counts(key: str, dtype: str) -> Any:
        return lambda d: " / ".join(str(v) for v in d[dtype][key].values()) if dtype in d else "-"

    cells = []
    for dtype in ("float32", "bfloat16"):
        cells += [
            (
                f"torch's `silu`, {dtype}: rows of 1-40-row calls that differ from one-row "
                f"calls, widths {widths}",
                counts("silu_rows_differ", dtype),
            ),
            (f"`rowwise(silu)`, {dtype}, same widths", counts("rowwise_silu_rows_differ", dtype)),
            (
                f"`F.linear` untiled, {dtype}: of the 1..32-row prefixes of a 32-row product, "
                f"those with a row that differs; weights {shapes}",
                counts("linear_prefixes_differ", dtype),
            ),
            (
                f"tiles that fail the machine check, {dtype} (at {threads} threads)",
                lambda d, dtype=dtype: _failed_tiles(d[dtype]) if dtype in d else "-",
            ),
        ]
    cells.append(
        (
            f"one token's fused attention keeps its bits at {threads} threads: float32 / bfloat16",
            lambda d: " / ".join(
                num(d[t]["attention_threads_agree"]) if t in d else "-"
                for t in ("float32", "bfloat16")
            ),
        )
    )
    return cells


def _failed_tiles(r: dict[str, Any]) -> str:
    """The tiles that failed, with their weights; "none of N" when every tile passed."""
    verdicts = r["tiles_pass"]
    failed: dict[str, list[str]] = {}
    for weight, tiles in verdicts.items():
        for tile, passed in tiles.items():
            if not passed:
                failed.setdefault(tile, []).append(weight)
    if not failed:
        tried = sorted({t for tiles in verdicts.values() for t in tiles})
        return f"none of {len(tried)} (`{'`, `'.join(tried)}`)"
    return "; ".join(f"`{t}` ({', '.join(w)})" for t, w in failed.items())


def dytc_replay_section(record: dict[str, Any]) -> list[str]:
    """DyTC's two presets and each refinement alone, replayed on recorded acceptances and
    costs (no forward timed again): overall speedup over the naive loop, in the recorded
    question order and over the orders replayed; then the best fixed schedule's and the
    hindsight bound."""
    speedup, orders = record["speedup"], record.get("orders", {})
    measured_by = f" by `{record['costs_command']}`" if record.get("costs_command") else ""
    lines = [
        f"{record['answers']} answers ({record['questions']}; recorded by "
        f"`{record.get('record_command', '')}`), costs measured in the "
        f"{record.get('costs_forms', 'exact')} forms {record['costs_measured']}{measured_by}; "
        f"overheads{_how_overheads(record)}: {_overheads(record['overheads_s'])}. A variant "
        "`cas-spec@SWITCH=0` is the default without one refinement, `cas-spec:paper@SWITCH=1` "
        "the paper's policy with it alone (docs/method.md §4.2).",
        "",
    ]
    rows = []
    median = {n: o["median"] for n, o in orders.items()}
    for name in _dytc_variants(speedup):
        o = orders.get(name, {})
        spread = f"{num(o['min'])}-{num(o['max'])} ({o['n']})" if o else ""
        rows.append([f"`{name}`", num(speedup[name]), num(median.get(name)), spread])
        rows[-1].append(_refinement_effect(name, median))
    best = record["best_fixed"]
    rows.append([f"`{best}` (best fixed)", num(speedup[best]), "", "", ""])
    if bound := record.get("hindsight"):
        rows.append(["hindsight (knows the answer)", num(bound["speedup"]), "", "", ""])
    header = ["variant", "speedup, recorded order", "median over orders", "range (orders)"]
    return [
        *lines,
        *table([*header, "the refinement's effect"], rows),
        *_replay_costs(record),
        *_replay_kinds(record),
    ]


def _overheads(seconds: dict[str, float]) -> str:
    """A replay's overheads in words: a draft call's and a step's (ms), and, where measured, a
    prompt lookup's and a recycled-token walk's (us)."""
    draft, step = num(seconds["draft"] * 1e3), num(seconds["step"] * 1e3)
    words = [f"{draft} ms per draft call", f"{step} ms per step"]
    for name, what in (("lookup", "per prompt lookup"), ("recycle", "per recycled-token walk")):
        if name in seconds:
            words.append(f"{seconds[name] * 1e6:.1f} us {what}")
    return ", ".join(words)


def _how_overheads(record: dict[str, Any]) -> str:
    """Whether a replay's overheads were measured with its costs or given (older records: "")."""
    measured = record.get("overheads_measured")
    if not measured:
        return ""
    if all(measured.values()):
        return " (measured with the costs)"
    if not any(measured.values()):
        return " (given)"
    parts = [f"{name} {'measured' if was else 'given'}" for name, was in measured.items()]
    return f" ({', '.join(parts)})"


def _replay_kinds(record: dict[str, Any]) -> list[str]:
    """Where each DyTC preset's time went in the recorded order: its steps by what drafted them
    (`casspec_ref.tools.replay.ReplayDrafter.kind`), against the naive loop on the same tokens,
    the kind that lost most first."""
    ledgers = record.get("steps_by_kind")
    if not ledgers:
        return []
    rows = [
        [
            f"`{name}`",
            f"`{kind}`",
            str(k["steps"]),
            str(k["tokens"]),
            f"{k['ms']:.0f}",
            f"{k['overhead_ms']:.0f}",
            f"{k['naive_ms']:.0f}",
            f"{k['naive_ms'] - k['ms']:+.0f}",
        ]
        for name, kinds in ledgers.items()
        for kind, k in sorted(kinds.items(), key=lambda kv: kv[1]["naive_ms"] - kv[1]["ms"])
    ]
    header = ["preset", "step drafted by", "steps", "tokens", "ms", "of which overhead, ms"]
    header += ["naive loop, ms", "gained, ms"]
    return [
        "",
        "Where each preset's time went, in the recorded order: its steps by what drafted the tree "
        "(`plain`: the root alone, a plain step; a lookup with the length of the context match "
        "it copied from), the tokens they committed, their milliseconds, of which overhead (the "
        "overheads above, and DyTC's own decisions), the naive loop's milliseconds for the same "
        "tokens (one forward each, no overhead), and the difference (negative: lost). A preset's "
        "rows (the most lost first) add up to the naive loop's time less its own.",
        "",
        *table(header, rows),
    ]


def _size(item: tuple[str, float]) -> int:
    """A cost's verify size, read from its JSON key (so that T=2 sorts before T=16)."""
    return int(item[0])


def _replay_costs(record: dict[str, Any]) -> list[str]:
    """What the replay's figures stand on: the hindsight bound's meaning and the measured
    costs (a target forward by the tokens it verifies, one call of each draft level)."""
    costs = record.get("costs_ms")
    if not costs or "hindsight" not in record:
        return []
    verify = ", ".join(f"T={t} {ms:.1f}" for t, ms in sorted(costs["verify"].items(), key=_size))
    drafts = ", ".join(f"`{name}` {ms:.1f}" for name, ms in costs["draft"].items())
    return [
        "",
        "Hindsight is the least time any schedule of chains of these drafts could take on these "
        "answers, knowing them (`casspec_ref.tools.replay.hindsight`): no policy replayed on "
        f"these costs can beat it. Costs replayed (ms): a target forward verifying T tokens "
        f"after 256 cached, {verify}; one call of a draft level, {drafts}.",
    ]


def _refinement_effect(name: str, median: dict[str, float]) -> str:
    """What one switch is worth, from the medians over question orders: the default over the
    default without it (``cas-spec@X=0``), the paper with it alone over the paper
    (``cas-spec:paper@X=1``); positive: the refinement pays."""
    base, _, change = name.partition("@")
    if not change or base not in median or name not in median:
        return ""
    with_it, without = (
        (median[base], median[name]) if base == "cas-spec" else (median[name], median[base])
    )
    return f"{100 * (with_it / without - 1):+.1f}%"


def _dytc_variants(speedup: dict[str, float]) -> list[str]:
    """The DyTC variants of a replay record: both presets, then per switch (the window, then
    `REFINEMENTS` in order) the default without it and the paper's policy with it alone."""
    from casspec_ref.dytc_config import REFINEMENTS

    names = [n for n in speedup if n.startswith("cas-spec")]
    switches = ["window", *REFINEMENTS]

    def rank(name: str) -> tuple[int, int, str]:
        base, _, change = name.partition("@")
        switch = change.partition("=")[0]
        group = switches.index(switch) + 1 if switch in switches else len(switches) + 1
        return (group if change else 0, base != "cas-spec", name)

    return sorted(names, key=rank)


def generic_section(record: dict[str, Any]) -> list[str]:
    """A record of no known shape: every scalar it holds, by its path in the JSON."""
    flat = [(path, value) for path, value in _scalars(record) if not path.startswith("environment")]
    lines = table(["quantity", "value"], [[f"`{p}`", num(v, 4)] for p, v in flat[:GENERIC_ROWS]])
    if len(flat) > GENERIC_ROWS:
        lines += ["", f"({len(flat) - GENERIC_ROWS} more in the record.)"]
    return lines


def _scalars(value: Any, path: str = "") -> Iterable[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, inner in value.items():
            yield from _scalars(inner, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _scalars(inner, f"{path}[{index}]")
    else:
        yield path, value


def section(name: str, record: dict[str, Any]) -> list[str]:
    """One record's section: title, provenance, then the figures for its shape."""
    if "settings" in record and "records" in record:
        body = bench_section(record)
    elif "curve_ms" in record:
        body = verify_curve_section(record)
    elif name.startswith("dsia") and "rows" in record:
        body = dsia_section(record)
    elif any(isinstance(v, dict) and "gpu_ms" in v for v in record.values()):
        body = gpu_forward_section(record)
    elif record.get("benchmark") == "busy_machine" and "rates" in record:
        body = busy_machine_section(record)
    elif record.get("benchmark") == "exact_cost" and "rows" in record:
        body = exact_cost_section(record)
    elif record.get("benchmark") == "dispatch_kernels" and "rows" in record:
        body = dispatch_kernels_section(record)
    elif record.get("benchmark") == "dytc_replay" and "speedup" in record:
        body = dytc_replay_section(record)
    else:
        body = generic_section(record)
    return [f"## {title(name)}", "", *source(name, record), "", *body, ""]


HEADER = """# Results

This page is generated: `make results` (`python -m casspec_ref.tools.results`) writes it from
the records in [`docs/bench/`](bench/), and a test fails when it differs from what those records
give. Each section names the record, the command that produced it, the commit it ran and the
machine. How the bench measures and what each column means: [benchmarks.md](benchmarks.md).

Columns of the bench tables: *speedup* is Spec-Bench's (the mean over questions of tokens/s,
over the same mean for the naive loop) with its 95% bootstrap interval over the questions;
*decode* leaves each turn's prompt forward and first token out for both methods; *total* is
total tokens over total time; *MAT* is the mean tokens per target forward, bonus token included;
*tok/s* is the mean over questions; *= naive loop* says whether every greedy output equals the
naive loop's token for token (sampled runs are not compared token for token); *base* is the
naive loop a speedup is taken against: of `ar` and `ar-plain`, the faster one whose outputs the
method equals (`ar` for sampled runs, and for a method that equals neither).
"""


def render(records: dict[str, dict[str, Any]]) -> str:
    """The whole page from the records, in the page's order."""
    lines = [HEADER]
    lines += ["| record | section |", "|---|---|"]
    lines += [f"| [`{name}.json`](bench/{name}.json) | {title(name)} |" for name in records]
    lines.append("")
    for name, record in records.items():
        lines += section(name, record)
    return "\n".join(lines).rstrip("\n") + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m casspec_ref.tools.results",
        description="Write docs/results.md from the records in docs/bench/.",
    )
    parser.add_argument("--records", type=Path, default=RECORDS, help="folder of JSON records")
    parser.add_argument("--out", type=Path, default=PAGE, help="the page to write")
    parser.add_argument(
        "--check", action="store_true", help="write nothing; exit 1 if the page is out of date"
    )
    args = parser.parse_args(argv)
    try:
        page = render(load_records(args.records))
    except (OSError, ValueError, KeyError) as error:
        print(f"error: cannot read the records in {args.records}: {error!r}", file=sys.stderr)
        return 2
    if args.check:
        current = args.out.read_text() if args.out.exists() else ""
        if current != page:
            print(f"{args.out} is out of date: run `make results`", file=sys.stderr)
            return 1
        return 0
    args.out.write_text(page)
    print(f"wrote {args.out} from the records in {args.records}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
