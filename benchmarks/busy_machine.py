"""Decoding speed beside other work, under the library's thread policy and under torch's defaults.

Each cell is one fresh process (the thread policy is chosen when a process starts): it loads
SmolLM2-135M-Instruct, decodes ``--max-new-tokens`` greedy tokens after one chat prompt (no stop
token, so every decode has that length) ``--warmups`` times to warm up (CAS-Spec's DyTC
estimates learn over them) and ``--timed-runs`` times timed, and prints the median of the timed
decodes' tokens per second, its tokens and its thread record (`Policy.as_dict`, the ``threads``
record that ``generate --json`` prints). The first warm-up and the first timed decode always
run; the others only while the cell has spent less than ``--cell-budget-s`` decoding, so that
a cell that decodes at a few tokens per second stays short. A cell is one of:

- a thread setting: ``policy``, the library's (`casspec_ref.accel.threads`,
  ``CASSPEC_THREADS=auto``); ``inherited``, torch's defaults (``CASSPEC_THREADS=inherit``);
  ``one-thread`` (``CASSPEC_THREADS=1``, quiet only: with the other two it gives the quiet cost
  of the policy). ``OMP_NUM_THREADS`` is removed from the children's environment (it would
  override every setting);
- a method: the naive loop (``ar``), CAS-Spec (``cas-spec``, its DyTC estimates carried from the
  warm-up decode to the timed one, as the bench does) and, when transformers is installed,
  transformers' ``generate`` on the same weights (``hf``);
- a condition: ``quiet`` (nothing else started); ``competitor`` (a pure-Python busy loop, one
  CPU-bound process, started before the cell); ``decoder`` (a second process decoding with the
  naive loop under the same setting, started before the cell); ``competitor-mid`` (the busy
  loop starts once the timed decode has run ``--mid-run-fraction`` of the same cell's quiet
  decode time in this repeat: the load arrives during the decode, where only the policy's
  `Monitor` can follow it; one timed decode, the one the load arrives in).

The quiet cost of the policy is also measured within one process (``paired``): in the quiet
condition, a child under the policy decodes with its run-time part on and off in turn
(`casspec_ref.accel.threads.watch` / `unwatch`: the hooks that read the load and the prompt in
checked pieces; on a quiet machine the count chosen at start is torch's own), ``--pairs`` pairs
in alternating order, and reports the median of the pairs' ratios. Every one of those decodes
is the same work: CAS-Spec's starts from a copy of the DyTC state its warm-ups left and replays
the clock readings of one recorded decode (DyTC learns the forwards' costs from the clock:
carried on, or timed afresh, the state builds other trees from one decode to the next, and the
work timed changes with them). The record pools every repeat's pairs: their median and its 95%
bootstrap interval.
Fresh processes of one setting differ by more than the few percent in question (CAS-Spec's
adaptive choices above all); decodes of one process, side by side, do not.

Each of ``--repeats`` repeats runs every cell once, conditions in turn (quiet first, so that
the mid-run delay can be taken from it), so that a drift of the machine's speed hits every
condition alike; torch's defaults beside a load (decoding at well under a tenth of quiet speed,
far from any target) run in the first ``--inherited-repeats`` repeats only. Every ratio below
is the median over repeats of the ratio within one repeat.
Every generation's tokens are compared with the quiet naive loop's (the first repeat's, under
the first thread setting); a difference is listed in ``differences``.

Competitors run in their own process group, stop by themselves after ``--competitor-s``
seconds (by default longer than a cell may take, ``--child-timeout``), and are killed when their
cell ends (or the script exits), whatever happens. A cell whose competitor ended before it did
did not measure what its condition says (a slow load, torch's defaults stalling in the shape
check beside a busy core, can outlast a short-lived competitor): it is recorded as failed. Each
child has a timeout (``--child-timeout``). With the defaults the script runs for about an hour
on a 2-core CPU, most of it in torch's defaults beside a load.

Output: one JSON record, printed and written to ``<out>/busy_machine.json`` with ``--out``:

    {
      "benchmark": "busy_machine",
      "settings": {"max_new_tokens", "repeats", "prompt", "methods", "thread_settings",
                   "conditions", "warmups", "timed_runs", "cell_budget_s", "pairs",
                   "inherited_repeats", "mid_run_fraction", "competitor_s", "child_timeout_s"},
      "environment": {"command", "machine", "cpus", "torch", "python", "platform",
                      "git_commit", "time", "load": {"start", "end", "changed"}},
      "cells": [  # one per (repeat, setting, method, condition), in the order they ran
        {"repeat", "setting", "method", "condition",
         "tokens_per_s", "seconds", "new_tokens",  # null: the child failed ("error" says why)
         "runs_s",               # every timed decode's seconds (the figures are their median)
         "runs_equal",           # whether every timed decode gave the same tokens
         "competitor_after_s",   # competitor-mid: seconds into the timed decode it started
         "competitor_in_decode", # competitor-mid: whether that was before the decode ended
         "threads_mode", "max_threads", "threads_at_start", "threads_at_end",
         "switching",            # whether the policy may switch the count mid-run
         "switching_note", "switches",  # every switch of the process: [seconds, count]
         "switches_in_decode",   # switches during the timed decode
         "start_others", "most_others_seen",  # other processes' cores at start, most seen
         "equal_to_quiet_ar",    # the timed decodes' tokens all equal the reference's
         "first_difference", "error"}
      ],
      "paired": [  # the policy's run-time part on and off in one quiet process
        {"repeat", "setting", "method", "condition",  # "policy", "paired"
         "pairs", "watched_tokens_per_s", "unwatched_tokens_per_s",
         "ratio",                 # median over pairs of watched / unwatched tokens per second
         "pair_ratios",           # each pair's ratio, in the order they ran
         "threads_at_end", "switches_in_pairs", "most_others_seen", "runs_equal",
         "same_work",             # every decode replayed the recorded decode's clock readings
         "equal_to_quiet_ar", "first_difference", "error"}
      ],
      "rates": [  # per setting, method and condition
        {"setting", "method", "condition", "tokens_per_s",  # median over repeats
         "repeats",               # cells that gave a figure
         "over_quiet",            # tokens per second over the quiet cell's (null for quiet)
         "switched_cells", "switching"}
      ],
      "speedups": [  # cas-spec over ar, per setting and condition
        {"setting", "condition", "speedup", "over_quiet_speedup"}
      ],
      "quiet_cost": [  # quiet tokens per second of one setting over another's, per method
        {"method", "policy_over_unwatched",  # paired: median of every repeat's pairs
         "policy_over_unwatched_interval",   # its 95% bootstrap interval over those pairs
         "policy_over_inherited", "policy_over_one_thread", "inherited_over_one_thread"}
      ],
      "reference": {"setting", "repeat", "tokens"},  # the quiet naive loop's generation
      "differences": [{"repeat", "setting", "method", "condition", "first_difference",
                       "tokens"}]
    }

``environment.load`` is the other processes' load before and after the whole script
(`casspec_ref.accel.threads.load_record`); ``changed`` true means the quiet figures may not be.

    python benchmarks/busy_machine.py --out docs/bench
"""

from __future__ import annotations

import argparse
import atexit
import copy
import json
import os
import platform
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable
from functools import partial
from pathlib import Path
from typing import Any

PROMPT = "Explain step by step how a refrigerator keeps food cold."
SETTINGS = {"policy": "auto", "inherited": "inherit", "one-thread": "1"}
QUIET_ONLY = ("one-thread",)  # settings run in the quiet condition only
CONDITIONS = ("quiet", "competitor", "decoder", "competitor-mid")
METHODS = ("ar", "cas-spec", "hf")
TIMED = "timed decode starts"  # the line a child prints just before its timed decode
MID_RUN_FALLBACK_S = 4.0  # competitor-mid's quiet decode time when its quiet cell failed
_LIVE: list[subprocess.Popen] = []


# ----------------------------------------------------------------------------- processes
def _stop(proc: subprocess.Popen) -> None:
    """End a competitor and everything it started (its process group), then reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def _stop_all() -> None:
    while _LIVE:
        _stop(_LIVE.pop())


def child_env(setting: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["CASSPEC_THREADS"] = SETTINGS[setting]
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    return env


def start_competitor(kind: str, setting: str, seconds: float) -> None:
    """A competing process: a pure-Python busy loop, or a second decoder (``kind`` "decoder")
    under ``setting``; it exits by itself after ``seconds`` and is stopped with its cell."""
    if kind == "decoder":
        cmd = [sys.executable, __file__, "--compete", str(seconds)]
    else:
        code = (
            f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
        )
        cmd = [sys.executable, "-c", code]
    quiet = subprocess.DEVNULL
    _LIVE.append(
        subprocess.Popen(
            cmd, env=child_env(setting), start_new_session=True, stdout=quiet, stderr=quiet
        )
    )


def run_cell_process(
    cmd: list[str], setting: str, args: argparse.Namespace, on_timed: Callable[[], None] | None
) -> dict[str, Any]:
    """One child process running this script with the arguments ``cmd``; ``on_timed`` is
    called when its first timed decode starts. Returns the child's record, or
    ``{"error": ...}``."""
    cmd = [sys.executable, __file__, *cmd, "--max-new-tokens", str(args.max_new_tokens)]
    cmd += ["--warmups", str(args.warmups), "--cell-budget-s", str(args.cell_budget_s)]
    expired: list[bool] = []
    with tempfile.TemporaryFile("w+") as err:
        proc = subprocess.Popen(
            cmd, env=child_env(setting), stdout=subprocess.PIPE, stderr=err, text=True
        )

        def expire() -> None:
            expired.append(True)
            proc.kill()

        killer = threading.Timer(args.child_timeout, expire)
        killer.start()
        try:
            assert proc.stdout is not None
            lines = []
            for line in proc.stdout:
                if line.strip() == TIMED and on_timed is not None:
                    on_timed()
                lines.append(line)
            proc.wait()
        finally:
            killer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        tail = (err.read().strip().splitlines() or ["no output"])[-1]
    records = [line for line in lines if line.startswith("{")]
    if expired:
        return {"error": f"timed out after {args.child_timeout} s"}
    if proc.returncode != 0 or not records:
        return {"error": f"exit status {proc.returncode}: {tail[:300]}"}
    return json.loads(records[-1])


def measure(
    method: str, setting: str, condition: str, args: argparse.Namespace, quiet_s: float | None
) -> tuple[dict[str, Any], float | None]:
    """One cell under ``condition``: the child's record and, for ``competitor-mid``, how many
    seconds into the timed decode the competitor started."""
    after = round(args.mid_run_fraction * (quiet_s or MID_RUN_FALLBACK_S), 3)

    def start_mid_run() -> None:
        time.sleep(after)
        start_competitor("competitor", setting, args.competitor_s)

    cmd = ["--child", method, "--timed-runs", str(args.timed_runs)]
    try:
        if condition in ("competitor", "decoder"):
            start_competitor(condition, setting, args.competitor_s)
            time.sleep(1.0 if condition == "competitor" else 5.0)  # a decoder loads its model
        if condition != "competitor-mid":
            record, when = run_cell_process(cmd, setting, args, None), None
        else:
            cmd[-1] = "1"  # the decode the load arrives in
            record, when = run_cell_process(cmd, setting, args, start_mid_run), after
        if any(p.poll() is not None for p in _LIVE) and "error" not in record:
            record = {"error": f"its competitor ended before it did ({args.competitor_s} s)"}
        return record, when
    finally:
        _stop_all()


# ----------------------------------------------------------------------------- the children
def _load() -> tuple[Any, list[int]]:
    from casspec_ref.io.weights import load_model

    model, tokenizer = load_model()
    assert tokenizer is not None
    return model, tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}])


def _dytc(method: str, model: Any) -> Any:
    """CAS-Spec's DyTC state, learning over every decode it is given to (None for the other
    methods: they keep no state between decodes)."""
    if method != "cas-spec":
        return None
    from casspec_ref.dytc_config import DyTCConfig
    from casspec_ref.dytc_refinements import RefinedDyTC
    from casspec_ref.speculative import default_drafts

    return RefinedDyTC([plan.name for plan in default_drafts(model)], DyTCConfig())


def _runner(
    method: str, model: Any, dytc: Any = None, clock: Callable[[], float] | None = None
) -> Callable[[list[int], int], list[int]]:
    """One decode of ``method``: ``(prompt, new tokens) -> tokens``; CAS-Spec's with the DyTC
    state ``dytc`` (a fresh one if None), timing its forwards with ``clock`` if given."""
    from casspec_ref.generate import generate_ar
    from casspec_ref.speculative import generate_speculative

    if method == "ar":
        return lambda prompt, n: list(generate_ar(model, prompt, n).tokens)
    if method == "cas-spec":
        policy = _dytc(method, model) if dytc is None else dytc
        options = {"policy": policy} if clock is None else {"policy": policy, "clock": clock}
        return lambda prompt, n: list(
            generate_speculative(model, prompt, n, method="cas-spec", **options).tokens
        )
    from casspec_ref.tools.bench import make_hf_runner

    hf = make_hf_runner("hf", model, ())
    return lambda prompt, n: hf(prompt, n)[0]


def decodes(
    decode: Callable[[], list[int]], count: int, spent: list[float], budget_s: float
) -> list[tuple[float, list[int]]]:
    """Up to ``count`` timed calls of ``decode`` (seconds, tokens): the first always, the
    others while the seconds in ``spent`` (this cell's decodes so far, added to) are under
    ``budget_s``."""
    out: list[tuple[float, list[int]]] = []
    while len(out) < count and (not out or sum(spent) < budget_s):
        start = time.perf_counter()
        tokens = decode()
        out.append((time.perf_counter() - start, tokens))
        spent.append(out[-1][0])
    return out


def run_child(args: argparse.Namespace) -> int:
    """Warm up, then the timed decodes (`decodes`); print the `TIMED` line before the first
    timed decode, then ``{"tokens_per_s", "seconds", "runs_s", "tokens", "runs_equal",
    "threads", "threads_at_start", "switches_in_decode"}`` (medians over the timed decodes)."""
    from casspec_ref.accel import threads

    model, prompt = _load()
    decode = partial(_runner(args.child, model), prompt, args.max_new_tokens)
    spent: list[float] = []
    decodes(decode, args.warmups, spent, args.cell_budget_s / 2)
    policy = threads.apply()
    at_start, switches = policy.threads, len(policy.switches)
    print(TIMED, flush=True)
    spent.clear()
    timed = decodes(decode, args.timed_runs, spent, args.cell_budget_s / 2)
    runs_s = [seconds for seconds, _ in timed]
    tokens = timed[0][1]
    record = {
        "tokens_per_s": statistics.median(len(t) / s for s, t in timed),
        "seconds": statistics.median(runs_s),
        "runs_s": [round(s, 4) for s in runs_s],
        "tokens": tokens,
        "runs_equal": all(t == tokens for _, t in timed),
        "threads": policy.as_dict(),
        "threads_at_start": at_start,
        "switches_in_decode": len(policy.switches) - switches,
    }
    print(json.dumps(record))
    return 0


class RecordedClock:
    """A seconds counter (`time.perf_counter`) that keeps every reading it gives."""

    def __init__(self) -> None:
        self.readings: list[float] = []

    def __call__(self) -> float:
        self.readings.append(time.perf_counter())
        return self.readings[-1]


class ReplayedClock:
    """A recorded decode's clock readings, given again in order. DyTC learns the forwards'
    costs from the clock, so two decodes from one state build different trees when their
    timings differ; fed the same readings, they build the same trees. ``done``: every reading
    was given (a decode that read fewer did other work; one that asks for more is stopped)."""

    def __init__(self, readings: list[float]) -> None:
        self.readings, self.given = readings, 0

    def __call__(self) -> float:
        if self.given == len(self.readings):
            raise RuntimeError(
                f"a replayed decode asked for more than the {len(self.readings)} clock readings "
                "its recorded decode took: it did other work"
            )
        self.given += 1
        return self.readings[self.given - 1]

    @property
    def done(self) -> bool:
        return self.given == len(self.readings)


def run_paired(args: argparse.Namespace) -> int:
    """The policy's quiet cost within one process: warm up, record one decode's clock readings,
    then ``--pairs`` pairs of decodes with its run-time part on (`threads.watch`) and off
    (`threads.unwatch`), the pair's order alternating, every one of them the same work as the
    recorded decode: CAS-Spec's starts from a copy of the DyTC state the warm-ups left and
    replays the recorded readings (`ReplayedClock`). Print ``{"watched_tokens_per_s",
    "unwatched_tokens_per_s", "ratio", "pair_ratios", "pairs", "tokens", "runs_equal",
    "same_work", "threads", "switches_in_pairs"}`` (medians over the pairs; ``pair_ratios``
    each pair's unwatched seconds over its watched seconds; ``same_work`` whether every decode
    replayed every recorded reading; ``switches_in_pairs`` the count's switches during them, a
    false alarm's cost)."""
    from casspec_ref.accel import threads

    model, prompt = _load()
    learned = _dytc(args.paired, model)
    warm_up = partial(_runner(args.paired, model, learned), prompt, args.max_new_tokens)
    decodes(warm_up, args.warmups, [], args.cell_budget_s)
    policy = threads.apply()
    recorded = RecordedClock()
    _runner(args.paired, model, copy.deepcopy(learned), recorded)(prompt, args.max_new_tokens)
    switches = len(policy.switches)
    on: list[tuple[float, list[int]]] = []
    off: list[tuple[float, list[int]]] = []
    replays: list[ReplayedClock] = []
    for i in range(args.pairs):
        for watched in (False, True) if i % 2 == 0 else (True, False):
            replays.append(ReplayedClock(recorded.readings))
            state = copy.deepcopy(learned)  # copied before the clock starts
            decode = partial(
                _runner(args.paired, model, state, replays[-1]), prompt, args.max_new_tokens
            )
            (threads.watch if watched else threads.unwatch)(model)
            (on if watched else off).extend(decodes(decode, 1, [], 0))
    threads.watch(model)
    tokens = on[0][1]
    ratios = [off_s / on_s for (on_s, _), (off_s, _) in zip(on, off, strict=True)]
    record = {
        "watched_tokens_per_s": statistics.median(len(t) / s for s, t in on),
        "unwatched_tokens_per_s": statistics.median(len(t) / s for s, t in off),
        "ratio": statistics.median(ratios),
        "pair_ratios": [round(r, 4) for r in ratios],
        "pairs": args.pairs,
        "tokens": tokens,
        "runs_equal": all(t == tokens for _, t in on + off),
        "same_work": all(replay.done for replay in replays),
        "threads": policy.as_dict(),
        "switches_in_pairs": len(policy.switches) - switches,
    }
    print(json.dumps(record))
    return 0


def run_competitor(seconds: float) -> int:
    """A second decoder: the naive loop, over and over, until ``seconds`` have passed."""
    from casspec_ref.generate import generate_ar

    end = time.monotonic() + seconds
    model, prompt = _load()
    while time.monotonic() < end:
        generate_ar(model, prompt, 16)
    return 0


# ----------------------------------------------------------------------------- the record
def cell_record(
    key: tuple[int, str, str, str], child: dict[str, Any], after: float | None
) -> dict[str, Any]:
    """One flat row of ``cells`` from the child's record (its tokens are kept aside)."""
    t = child.get("threads") or {}
    tokens, seconds = child.get("tokens"), child.get("seconds")
    return {
        **dict(zip(("repeat", "setting", "method", "condition"), key, strict=True)),
        "tokens_per_s": child.get("tokens_per_s"),
        "seconds": seconds,
        "new_tokens": None if tokens is None else len(tokens),
        "runs_s": child.get("runs_s"),
        "runs_equal": child.get("runs_equal"),
        "competitor_after_s": after,
        "competitor_in_decode": None if after is None or not seconds else after < seconds,
        "threads_mode": t.get("mode"),
        "max_threads": t.get("max_threads"),
        "threads_at_start": child.get("threads_at_start"),
        "threads_at_end": t.get("threads"),
        "switching": t.get("switching"),
        "switching_note": t.get("switching_note"),
        "switches": t.get("switches"),
        "switches_in_decode": child.get("switches_in_decode"),
        "start_others": t.get("start_others"),
        "most_others_seen": t.get("most_others_seen"),
        "equal_to_quiet_ar": None,
        "first_difference": None,
        "error": child.get("error"),
    }


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where two generations differ (a shorter one differs at its end)."""
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def compare_tokens(
    cells: list[dict[str, Any]], tokens: list[list[int] | None], settings: list[str]
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """Mark every cell equal or not to the quiet naive loop's generation (the first one that
    ran, preferring the first setting's); return that reference and the cells that differ."""
    quiet_ar = [
        i
        for i, c in enumerate(cells)
        if c["method"] == "ar" and c["condition"] == "quiet" and tokens[i] is not None
    ]
    if not quiet_ar:
        return None, []
    ref = min(quiet_ar, key=lambda i: (settings.index(cells[i]["setting"]), cells[i]["repeat"]))
    reference = tokens[ref]
    assert reference is not None
    differences = []
    for cell, got in zip(cells, tokens, strict=True):
        if got is None:
            continue
        cell["first_difference"] = first_difference(got, reference)
        cell["equal_to_quiet_ar"] = (
            cell["first_difference"] is None and cell["runs_equal"] is not False
        )
        if not cell["equal_to_quiet_ar"]:
            where = {k: cell[k] for k in ("repeat", "setting", "method", "condition")}
            differences.append(
                {**where, "first_difference": cell["first_difference"], "tokens": got}
            )
    head = {k: cells[ref][k] for k in ("setting", "repeat")}
    return {**head, "tokens": reference}, differences


def median_ratio(pairs: Iterable[tuple[float | None, float | None]]) -> float | None:
    """The median of a / b over the pairs (repeats) where both are there."""
    ratios = [a / b for a, b in pairs if a is not None and b]
    return round(statistics.median(ratios), 4) if ratios else None


def summarize(
    cells: list[dict[str, Any]], repeats: int, paired: list[dict[str, Any]] | None = None
) -> dict[str, list[dict[str, Any]]]:
    """``rates``, ``speedups`` and ``quiet_cost`` from the cells and the paired quiet costs
    (see the module docstring)."""
    rate = {
        (c["repeat"], c["setting"], c["method"], c["condition"]): c["tokens_per_s"] for c in cells
    }
    keys = list(dict.fromkeys((s, m, c) for _, s, m, c in rate))
    reps = range(repeats)

    def r(rep: int, s: str, m: str, c: str) -> float | None:
        return rate.get((rep, s, m, c))

    rates = []
    for s, m, c in keys:
        mine = [x for x in cells if (x["setting"], x["method"], x["condition"]) == (s, m, c)]
        figures = [x["tokens_per_s"] for x in mine if x["tokens_per_s"] is not None]
        allowed = [x["switching"] for x in mine if x["switching"] is not None]
        rates.append(
            {
                "setting": s,
                "method": m,
                "condition": c,
                "tokens_per_s": round(statistics.median(figures), 3) if figures else None,
                "repeats": len(figures),
                "over_quiet": None
                if c == "quiet"
                else median_ratio((r(i, s, m, c), r(i, s, m, "quiet")) for i in reps),
                "switched_cells": sum(1 for x in mine if (x["switches_in_decode"] or 0) > 0),
                "switching": all(allowed) if allowed else None,
            }
        )
    out = {"rates": rates, **_speedups_and_cost(r, keys, reps)}
    for row in out["quiet_cost"]:
        row.update(paired_cost([p for p in paired or [] if p["method"] == row["method"]]))
    return out


def paired_cost(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One method's paired quiet cost over every repeat: ``policy_over_unwatched``, the median
    of all the pairs' ratios (of each row's median where a row lists none), and its 95%
    bootstrap interval over those pairs, ``policy_over_unwatched_interval`` (None with fewer
    than two pairs)."""
    from casspec_ref.tools.bench import bootstrap_interval

    ratios = [r for p in rows for r in p.get("pair_ratios") or [p["ratio"]] if r]
    median = round(statistics.median(ratios), 4) if ratios else None
    interval = None
    if len(ratios) >= 2:
        low, high = bootstrap_interval(
            lambda ix: statistics.median(ratios[i] for i in ix), len(ratios)
        )
        interval = [round(low, 4), round(high, 4)]
    return {"policy_over_unwatched": median, "policy_over_unwatched_interval": interval}


def _speedups_and_cost(
    r: Callable[[int, str, str, str], float | None],
    keys: list[tuple[str, str, str]],
    reps: range,
) -> dict[str, list[dict[str, Any]]]:
    def speedup(i: int, s: str, c: str) -> float | None:
        a, b = r(i, s, "cas-spec", c), r(i, s, "ar", c)
        return None if a is None or not b else a / b

    speedups = [
        {
            "setting": s,
            "condition": c,
            "speedup": median_ratio((r(i, s, "cas-spec", c), r(i, s, "ar", c)) for i in reps),
            "over_quiet_speedup": median_ratio(
                (speedup(i, s, c), speedup(i, s, "quiet")) for i in reps
            ),
        }
        for s, m, c in keys
        if m == "cas-spec"
    ]
    pairs = (("policy", "inherited"), ("policy", "one-thread"), ("inherited", "one-thread"))
    methods = list(dict.fromkeys(m for _, m, c in keys if c == "quiet"))
    quiet_cost = [
        {"method": m}
        | {
            f"{a}_over_{b}".replace("-", "_"): median_ratio(
                (r(i, a, m, "quiet"), r(i, b, m, "quiet")) for i in reps
            )
            for a, b in pairs
        }
        for m in methods
    ]
    return {"speedups": speedups, "quiet_cost": quiet_cost}


# ----------------------------------------------------------------------------- the run
def plan(
    settings: list[str], methods: list[str], conditions: list[str], slow: bool = True
) -> list[tuple]:
    """One repeat's cells, (setting, method, condition), conditions in turn, quiet first;
    without torch's defaults beside a load unless ``slow``."""
    order = sorted(conditions, key=CONDITIONS.index)
    return [
        (s, m, c)
        for c in order
        for s in settings
        if c == "quiet" or (s not in QUIET_ONLY and (slow or s != "inherited"))
        for m in methods
    ]


def measure_paired(method: str, repeat: int, args: argparse.Namespace) -> dict[str, Any]:
    """The policy's paired quiet cost for ``method`` (`run_paired`), as a row of ``paired``
    (its tokens under ``tokens``, kept aside by the caller)."""
    child = run_cell_process(["--paired", method, "--pairs", str(args.pairs)], "policy", args, None)
    t = child.get("threads") or {}
    return {
        "repeat": repeat,
        "setting": "policy",
        "method": method,
        "condition": "paired",
        **{k: child.get(k) for k in ("pairs", "watched_tokens_per_s", "unwatched_tokens_per_s")},
        "ratio": None if child.get("ratio") is None else round(child["ratio"], 4),
        "pair_ratios": child.get("pair_ratios"),
        "threads_at_end": t.get("threads"),
        "switches_in_pairs": child.get("switches_in_pairs"),
        "most_others_seen": t.get("most_others_seen"),
        "runs_equal": child.get("runs_equal"),
        "same_work": child.get("same_work"),
        "equal_to_quiet_ar": None,
        "first_difference": None,
        "error": child.get("error"),
        "tokens": child.get("tokens"),
    }


def run_all(
    args: argparse.Namespace, settings: list[str], methods: list[str], conditions: list[str]
) -> tuple[list[dict[str, Any]], list[list[int] | None], list[dict[str, Any]]]:
    """Every cell of every repeat, in order: the flat cells, each cell's tokens, and the paired
    quiet costs (`measure_paired`, first in each repeat; their tokens under ``tokens``)."""
    cells: list[dict[str, Any]] = []
    tokens: list[list[int] | None] = []
    paired: list[dict[str, Any]] = []
    for repeat in range(args.repeats):
        paired_methods = [m for m in methods if m != "hf"] if "policy" in settings else []
        for method in paired_methods if args.pairs else []:
            paired.append(measure_paired(method, repeat, args))
            shown = paired[-1]["ratio"]
            print(
                f"{repeat} {'policy':10s} {'paired':14s} {method:8s} "
                + (f"{shown:6.3f} on/off" if shown else f"failed: {paired[-1]['error']}"),
                file=sys.stderr,
            )
        quiet_s: dict[tuple[str, str], float] = {}
        slow = repeat < args.inherited_repeats
        for setting, method, condition in plan(settings, methods, conditions, slow):
            child, after = measure(method, setting, condition, args, quiet_s.get((setting, method)))
            if condition == "quiet" and child.get("seconds"):
                quiet_s[setting, method] = child["seconds"]
            cell = cell_record((repeat, setting, method, condition), child, after)
            cells.append(cell)
            tokens.append(child.get("tokens"))
            shown = cell["tokens_per_s"]
            print(
                f"{repeat} {setting:10s} {condition:14s} {method:8s} "
                + (f"{shown:6.1f} tok/s" if shown else f"failed: {cell['error']}"),
                file=sys.stderr,
            )
    return cells, tokens, paired


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--max-new-tokens", type=int, default=128, help="tokens per decode")
    parser.add_argument("--repeats", type=int, default=3, help="runs of every cell")
    parser.add_argument("--methods", default=",".join(METHODS), help="among ar,cas-spec,hf")
    parser.add_argument("--settings", default=",".join(SETTINGS), help=", ".join(SETTINGS))
    parser.add_argument("--conditions", default=",".join(CONDITIONS), help=",".join(CONDITIONS))
    parser.add_argument("--warmups", type=int, default=2, help="warm-up decodes per cell")
    parser.add_argument("--timed-runs", type=int, default=3, help="timed decodes per cell")
    parser.add_argument(
        "--cell-budget-s",
        type=float,
        default=60.0,
        help="seconds of decoding after which a cell runs no further warm-up or timed decode",
    )
    parser.add_argument("--pairs", type=int, default=16, help="paired quiet cost: pairs (0: none)")
    parser.add_argument(
        "--inherited-repeats",
        type=int,
        default=1,
        help="repeats that run torch's defaults beside a load",
    )
    parser.add_argument(
        "--mid-run-fraction",
        type=float,
        default=0.25,
        help="competitor-mid: the share of the quiet decode time after which the loop starts",
    )
    parser.add_argument(
        "--competitor-s", type=float, default=1200.0, help="a competitor's life (outlives a cell)"
    )
    parser.add_argument("--child-timeout", type=float, default=900.0, help="seconds per cell")
    parser.add_argument("--out", type=Path, help="write busy_machine.json into this folder")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--compete", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--paired", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child or args.paired or args.compete is not None:
        return args
    args.methods = [m for m in args.methods.split(",") if m]
    args.settings = [s for s in args.settings.split(",") if s]
    args.conditions = [c for c in args.conditions.split(",") if c]
    for flag, given, allowed in (
        ("--methods", args.methods, METHODS),
        ("--settings", args.settings, tuple(SETTINGS)),
        ("--conditions", args.conditions, CONDITIONS),
    ):
        if not given or set(given) - set(allowed):
            parser.error(f"{flag}={','.join(given)}: allowed are {', '.join(allowed)}")
    if "quiet" not in args.conditions:
        parser.error("--conditions must include quiet: the ratios are taken against it")
    if min(args.max_new_tokens, args.repeats, args.warmups, args.timed_runs) < 1:
        parser.error("--max-new-tokens, --repeats, --warmups and --timed-runs must be >= 1")
    if min(args.pairs, args.inherited_repeats) < 0 or args.cell_budget_s <= 0:
        parser.error("--pairs and --inherited-repeats must be >= 0, --cell-budget-s > 0")
    if not 0 <= args.mid_run_fraction < 1:
        parser.error(f"--mid-run-fraction={args.mid_run_fraction}: must be in [0, 1)")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        return run_child(args)
    if args.paired:
        return run_paired(args)
    if args.compete is not None:
        return run_competitor(args.compete)
    methods = args.methods
    try:
        import transformers  # noqa: F401
    except ImportError:
        methods = [m for m in methods if m != "hf"]
    atexit.register(_stop_all)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # atexit then stops the competitors
    from casspec_ref.accel import threads

    load_start = threads.machine_load()
    cells, tokens, paired = run_all(args, args.settings, methods, args.conditions)
    paired_tokens = [row.pop("tokens") for row in paired]
    reference, differences = compare_tokens(cells + paired, tokens + paired_tokens, args.settings)
    record = {
        "benchmark": "busy_machine",
        "settings": {
            "max_new_tokens": args.max_new_tokens,
            "repeats": args.repeats,
            "prompt": PROMPT,
            "methods": methods,
            "thread_settings": args.settings,
            "conditions": args.conditions,
            **{
                k: getattr(args, k)
                for k in ("warmups", "timed_runs", "cell_budget_s", "pairs", "inherited_repeats")
            },
            "mid_run_fraction": args.mid_run_fraction,
            "competitor_s": args.competitor_s,
            "child_timeout_s": args.child_timeout,
        },
        "environment": _environment(
            threads.load_record(load_start, threads.machine_load()),
            shlex.join(["python", "benchmarks/busy_machine.py", *sys.argv[1:]]),
        ),
        "cells": cells,
        "paired": paired,
        **summarize(cells, args.repeats, paired),
        "reference": reference,
        "differences": differences,
    }
    text = json.dumps(record, indent=1)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "busy_machine.json").write_text(text + "\n")
    return 0


def _environment(load: dict[str, Any], command: str) -> dict[str, Any]:
    import torch

    from casspec_ref.tools.bench import git_commit, machine_name

    return {
        "command": command,
        "machine": machine_name("cpu"),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": git_commit(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load": load,
    }


if __name__ == "__main__":
    raise SystemExit(main())
