"""The per-machine kernel table: measured once per machine, cached, installed at model load.

`casspec_ref.base.kernels` defines the exact forms of a matmul and the `KernelTable` that picks
one per (weight shape, dtype, rows). This module decides what goes into that table on this
machine.

The table is measured, not assumed (`calibrate`): for each weight shape, at the row counts
`FIRST_ROWS` (the row counts between them pad to the next: exact, and the very product timed)
and at each class of larger row counts (`ROW_CLASSES`, at its own size), the base forms are
timed in interleaved repeats (so a burst of load hits every form alike), cycling through enough
copies of the weight that each call reads it from memory as a real forward does; the median
call decides (robust to calls another process preempted), and a non-default form must beat the
default by a margin. A row count whose cheapest base cost is beaten by a larger row count's is
then timed padded to that count, and keeps the padding only if it wins by the margin too
(re-timed if it costs far more than the row count it pads to did: a stall, not a cost). Each
candidate form for 1..16 rows is also run at 1 thread and at the thread policy's most
(`casspec_ref.accel.threads`): a form whose bits differ between them is not chosen.

The table chooses per row count, for speed. The target's own forwards need more: one form per
shape whose rows are the same bits at every row count and thread count. `prepare` checks that on
the machine (`casspec_ref.accel.invariance`, `check_invariance`) and installs the forms that pass
as the table's ``invariant`` entries; the thread policy may switch counts during a run only when
every shape passed.

Timings taken under contention are not cached (`contention_reasons`: repeated timings of one
form that disagree by more than `CONTENTION_FACTOR`, or other processes busy during the
measurement); such a table serves its process only and is measured again on a later start. A
start with other processes busy (`BUSY_CORES`) measures nothing and uses the default forms. The
first measurement says on stderr what it measures and for about how long (`estimate_seconds`).

A trusted table is cached as JSON under ``~/.cache/casspec_ref/`` (or ``$XDG_CACHE_HOME``), one
file per (torch version, CPU model, thread count, ...: `machine_key`), so a machine calibrates
once. The environment variable ``CASSPEC_KERNELS`` selects the behaviour of `prepare`: ``auto``
(default: the cached table, calibrating missing shapes), ``calibrate`` (re-measure and
overwrite), ``default`` (never measure; the built-in default forms; the test suite uses this).
Print the table with ``python -m casspec_ref.accel.kernel_table`` (``--calibrate`` measures the
SmolLM2-135M shapes first, even on a busy machine, and caches them only if uncontended).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from casspec_ref.accel import invariance, threads
from casspec_ref.base.kernels import (
    BASE_FORMS,
    MAX_ROWS,
    ROW_CLASSES,
    TILE_ROWS,
    Form,
    KernelTable,
    Key,
    active_table,
    apply_form,
    base_forms,
    default_form,
)

#: A non-default form must be at least this much faster (relative) than the one it replaces.
DEFAULT_MARGIN = 0.10
#: The way tables are measured; part of the cache key, so a table measured another way is
#: measured again.
CALIBRATION = "6"
#: The row counts timed one by one (`timed_rows`); the others pad to the next (`fill_rows`).
FIRST_ROWS = (1, 2, 3, 4, 6, 8, 12, 16)
#: A class of larger row counts is timed only if one call costs at most this many flops (above,
#: a product is compute-bound and the default form keeps it); each timed pass stops at
#: `CLASS_SWEEP_FLOP` of work.
CLASS_MAX_FLOP = 2e9
CLASS_SWEEP_FLOP = 1e9
#: Contention (`contention_reasons`): repeated timings of one form further apart than this
#: factor, in more than this share of the timed forms; or other processes using more cores
#: than `BUSY_CORES` during calibration (which is also the load at start that defers it).
CONTENTION_FACTOR = 2.0
CONTENDED_SHARE = 0.1
BUSY_CORES = 0.5
#: Accepted values of the ``CASSPEC_KERNELS`` environment variable.
MODES = ("auto", "calibrate", "default")
ENV_VAR = "CASSPEC_KERNELS"


@dataclass
class MeasuredTable(KernelTable):
    """A `KernelTable` with the costs (microseconds per call and form) behind each choice."""

    timings_us: dict[Key, dict[str, float]] = field(default_factory=dict)
    #: Thread counts at which every entry for 1..16 rows was seen to give the same bits; () if
    #: that was not shown.
    checked_threads: tuple[int, ...] = ()
    #: Why the timings cannot be trusted (`contention_reasons`); a table with any is not cached.
    contention: list[str] = field(default_factory=list)

    def update(self, other: MeasuredTable) -> None:
        common = set(other.checked_threads) & set(self.checked_threads)
        self.checked_threads = other.checked_threads if not self.forms else tuple(sorted(common))
        self.forms.update(other.forms)
        self.timings_us.update(other.timings_us)
        self.contention.extend(other.contention)

    def shapes(self) -> set[tuple[int, int, torch.dtype]]:
        return {(o, i, d) for o, i, d, _ in self.forms}

    def to_json(self) -> list[dict[str, object]]:
        return table_to_json(self)

    @staticmethod
    def from_json(
        entries: Iterable[Mapping[str, object]], checked_threads: Iterable[int] = ()
    ) -> MeasuredTable:
        table = MeasuredTable(checked_threads=tuple(sorted(int(t) for t in checked_threads)))
        for e in entries:
            dtype = getattr(torch, str(e["dtype"]), None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"kernel table entry has an unknown dtype {e['dtype']!r}")
            key = (int(str(e["out"])), int(str(e["in"])), dtype, int(str(e["rows"])))
            table.forms[key] = Form.parse(str(e["form"]))
            timings = e.get("cost_us")
            if isinstance(timings, Mapping) and timings:
                table.timings_us[key] = {str(k): float(str(v)) for k, v in timings.items()}
        return table


def table_to_json(table: KernelTable) -> list[dict[str, object]]:
    """One JSON entry per (shape, dtype, rows): the chosen form, and the measured costs behind it
    when ``table`` is a `MeasuredTable` (a core `KernelTable` has none)."""
    timings = table.timings_us if isinstance(table, MeasuredTable) else {}
    return [
        {
            "out": o,
            "in": i,
            "dtype": str(d).removeprefix("torch."),
            "rows": r,
            "form": str(form),
            "cost_us": timings.get((o, i, d, r), {}),
        }
        for (o, i, d, r), form in sorted(table.forms.items(), key=lambda kv: _sort_key(kv[0]))
    ]


def _sort_key(key: Key) -> tuple[str, int, int, int]:
    o, i, d, r = key
    return (str(d), o, i, r)


def format_table(table: KernelTable) -> str:
    """One line per weight shape: the form chosen for each row count (``·`` = default); a
    column ``<=N`` is a class of larger row counts (`ROW_CLASSES`)."""
    lines = []
    shapes = {(o, i, d) for o, i, d, _ in table.forms}
    columns = [*range(1, MAX_ROWS + 1), *ROW_CLASSES]
    for o, i, d in sorted(shapes, key=lambda s: (str(s[2]), s[0], s[1])):
        cells = []
        for r in columns:
            form = table.form_for(o, i, d, r)
            cells.append("·" if form == default_form(d, r) else str(form))
        name = str(d).removeprefix("torch.")
        lines.append(f"{o:>6}x{i:<5} {name:<8} " + " ".join(f"{c:>8}" for c in cells))
    labels = [str(r) if r <= MAX_ROWS else f"<={r}" for r in columns]
    header = f"{'shape':<12} {'dtype':<8} " + " ".join(f"{r:>8}" for r in labels)
    return "\n".join([header, *lines])


# ----------------------------------------------------------------------------- calibration
def choose_forms(
    costs: Mapping[int, Mapping[str, float]], dtype: torch.dtype, margin: float = DEFAULT_MARGIN
) -> dict[int, Form]:
    """Pick a base form per row count from measured costs (row count -> base form -> time).

    The default form is kept unless another is faster by more than ``margin`` (relative).
    Returns the choice per row count; padding is decided separately (`padding_candidates`).
    """
    chosen = {}
    for rows, times in costs.items():
        default = default_form(dtype, rows).base
        best = min(times, key=lambda f: times[f])
        keep_default = default in times and times[best] >= (1 - margin) * times[default]
        chosen[rows] = Form(default if keep_default else best)
    return chosen


def padding_candidates(cost: Mapping[int, float], margin: float = DEFAULT_MARGIN) -> dict[int, int]:
    """For each row count ``n``, the larger row count ``k`` whose cost is lowest, if it beats
    ``n``'s own cost by more than ``margin``; the padded form is then timed to confirm."""
    out = {}
    for n in sorted(cost):
        larger = [k for k in cost if k > n]
        if not larger:
            continue
        k = min(larger, key=lambda r: (cost[r], r))
        if cost[k] < (1 - margin) * cost[n]:
            out[n] = k
    return out


def _time_forms(
    forms: list[Form],
    weights: list[torch.Tensor],
    x: torch.Tensor,
    repeats: int,
    spreads: list[float] | None = None,
) -> dict[str, float]:
    """Microseconds per call of each form: the median of all its timed calls, over ``repeats``
    interleaved passes through the weight copies. A call that another process preempted is one
    outlier among many; a form that stalls on most calls (e.g. a multi-threaded kernel waiting
    for a descheduled partner thread on a busy machine) is slow, and is measured as slow.
    ``spreads`` receives, per form, its slowest pass's median over its fastest's
    (`contention_reasons`)."""
    samples: dict[str, list[list[float]]] = {str(f): [] for f in forms}
    for f in forms:  # warm-up: first calls allocate, pick code paths and pack the weight copies
        for w in weights if f.base == "packed" else weights[:1]:
            apply_form(f, x, w, None)
    for rep in range(repeats):
        order = forms[rep % len(forms) :] + forms[: rep % len(forms)]
        for f in order:
            calls = []
            for w in weights:
                start = time.perf_counter()
                apply_form(f, x, w, None)
                calls.append((time.perf_counter() - start) * 1e6)
            samples[str(f)].append(calls)
    if spreads is not None:
        for passes in samples.values():
            medians = [statistics.median(p) for p in passes]
            spreads.append(max(medians) / max(min(medians), 1e-9))
    return {name: statistics.median(t for p in s for t in p) for name, s in samples.items()}


def thread_variant(
    forms: Iterable[Form], weight: torch.Tensor, x: torch.Tensor, levels: Iterable[int]
) -> set[str]:
    """The forms whose product of ``x`` and ``weight`` is not the same bits at every thread
    count of ``levels`` (some BLAS kernels split a product's work by the team size). The
    caller's thread count is restored."""
    levels = sorted(set(levels))
    if len(levels) < 2:
        return set()
    variant = set()
    for f in forms:
        outs = []
        for n in levels:
            with invariance.threads_at(n):
                outs.append(apply_form(f, x, weight, None))
        if any(not torch.equal(outs[0], o) for o in outs[1:]):
            variant.add(str(f))
    return variant


def contention_reasons(
    spreads: Iterable[float],
    others: float | None,
    factor: float = CONTENTION_FACTOR,
    share: float = CONTENDED_SHARE,
    busy: float = BUSY_CORES,
) -> list[str]:
    """Why a calibration's timings show contention (empty: they do not).

    ``spreads``: per timed form, its slowest pass's median call over its fastest's; on a quiet
    machine the passes agree within tens of percent, so more than ``share`` of them disagreeing
    by over ``factor`` means other work came and went during the measurement. ``others``: the
    cores other processes used meanwhile (`casspec_ref.accel.threads.Load`), None if unknown.
    """
    spreads = list(spreads)
    reasons = []
    wide = sum(1 for s in spreads if s > factor)
    if spreads and wide > share * len(spreads):
        reasons.append(
            f"{wide} of {len(spreads)} repeated timings disagree by more than {factor:g}x"
        )
    if others is not None and others > busy:
        reasons.append(f"other processes used {others:.2f} cores during the measurement")
    return reasons


def implausible(costs: Mapping[int, Mapping[str, float]], factor: float = 8.0) -> list[int]:
    """Row counts whose cheapest form costs over ``factor`` times one row's cheapest form.

    Up to 16 rows cost at most a few times one row (the weight is read once either way), so
    such a figure means the machine stalled during that measurement, not that the rows are slow.
    """
    if 1 not in costs:
        return []
    one = min(costs[1].values())
    return [r for r, c in costs.items() if min(c.values()) > factor * one]


def timed_rows(max_rows: int = MAX_ROWS) -> list[int]:
    """The row counts up to ``max_rows`` that calibration times (`FIRST_ROWS`, and ``max_rows``):
    the others pad to the next of them (`fill_rows`)."""
    return sorted({r for r in FIRST_ROWS if r <= max_rows} | {max_rows})


def fill_rows(chosen: Mapping[int, Form], max_rows: int) -> dict[int, Form]:
    """A form for every row count 1..``max_rows``: a timed count keeps its own; any other pads
    to the next timed count and uses that count's form (padding is exact: `base.kernels`), so it
    runs the very product that was timed there."""
    out = {}
    for n in range(1, max_rows + 1):
        if n in chosen:
            out[n] = chosen[n]
            continue
        k = min(r for r in chosen if r > n)
        out[n] = Form(chosen[k].base, max(k, chosen[k].pad_to))
    return out


def calibrate(
    shapes: Iterable[tuple[int, int]],
    dtype: torch.dtype = torch.float32,
    *,
    max_rows: int = MAX_ROWS,
    classes: Iterable[int] = ROW_CLASSES,
    repeats: int = 3,
    margin: float = DEFAULT_MARGIN,
    stream_bytes: int | None = None,
    max_copies: int = 1024,
    retries: int = 2,
    thread_levels: Iterable[int] = (),
) -> MeasuredTable:
    """Time the exact forms for each ``(out, in)`` weight shape at the row counts `timed_rows`
    (the others pad to the next: `fill_rows`) and at each row count of ``classes``
    (`ROW_CLASSES`: the entries of larger products; base forms only, no padding; a class whose
    one call exceeds `CLASS_MAX_FLOP` keeps the default form, untimed).

    ``stream_bytes``: the weight is replicated until the copies total at least this much (at
    most ``max_copies``), and each timed sample runs once over all copies, so the weight comes
    from memory (as in a real forward over hundreds of MB of weights) rather than from cache.
    None: three times this machine's last-level cache (`stream_bytes_default`); a small weight
    (the k/v projections, 442 KB in SmolLM2) timed from a cache-resident set of copies was
    measured at the cache's speed, and its form chosen for the wrong reason. A class (32 rows
    and up: compute-bound) uses as many copies as `CLASS_SWEEP_FLOP` of work allows.
    ``retries``: how often row counts with `implausible` costs are measured again.
    ``thread_levels``: thread counts at which each candidate form for 1..``max_rows`` rows is
    run once more; a form whose bits differ between them is not chosen there
    (`thread_variant`), and the table's ``checked_threads`` says which counts it holds for
    (the classes are not checked: larger forwards never switch counts). The table's
    ``contention`` says whether its timings can be trusted (`contention_reasons`, from the
    repeated timings alone; the caller adds the machine's load).
    """
    if stream_bytes is None:
        stream_bytes = stream_bytes_default()
    if not 1 <= max_rows <= MAX_ROWS:
        raise ValueError(f"max_rows must be in 1..{MAX_ROWS}, got {max_rows}")
    classes = sorted(set(classes))
    if any(c not in ROW_CLASSES for c in classes):
        raise ValueError(f"classes must be among ROW_CLASSES {ROW_CLASSES}, got {classes}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if not 0 <= margin < 1:
        raise ValueError(f"margin must be in [0, 1), got {margin}")
    levels = tuple(sorted(set(thread_levels) | {torch.get_num_threads()}))
    table = MeasuredTable(checked_threads=levels)
    spreads: list[float] = []
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for out_f, in_f in sorted(set(shapes)):
            one = torch.randn(out_f, in_f, generator=gen).to(dtype)
            size = one.numel() * one.element_size()
            copies = min(max_copies, max(1, -(-stream_bytes // size)))
            weights = [one] + [one.clone() for _ in range(copies - 1)]
            run = _ShapeRun(weights, dtype, repeats, margin, retries, levels, spreads, gen)
            chosen, timings = run.rows(max_rows)
            for c in classes:
                flop = 2 * c * out_f * in_f
                if flop > CLASS_MAX_FLOP:  # untimed: the default form
                    continue
                n = max(1, min(len(weights), int(CLASS_SWEEP_FLOP // flop)))
                chosen[c], timings[c] = run.one_class(c, n)
            for r, form in chosen.items():
                key = (out_f, in_f, dtype, r)
                table.forms[key] = form
                table.timings_us[key] = {f: round(t, 1) for f, t in timings.get(r, {}).items()}
            if run.unchecked:
                table.checked_threads = ()
            del weights, run
    table.contention = contention_reasons(spreads, None)
    return table


class _ShapeRun:
    """The measurements of one weight shape (`calibrate`'s steps, kept apart to be read)."""

    def __init__(
        self,
        weights: list[torch.Tensor],
        dtype: torch.dtype,
        repeats: int,
        margin: float,
        retries: int,
        levels: tuple[int, ...],
        spreads: list[float],
        gen: torch.Generator,
    ) -> None:
        self.weights, self.dtype, self.repeats, self.margin = weights, dtype, repeats, margin
        self.retries, self.levels, self.spreads, self.gen = retries, levels, spreads, gen
        self.in_f = weights[0].shape[1]
        self.unchecked = False  # a row count where every candidate form was thread-variant

    def x(self, rows: int) -> torch.Tensor:
        return torch.randn(rows, self.in_f, generator=self.gen).to(self.dtype)

    def variant(self, forms: list[Form], rows: int) -> set[str]:
        return thread_variant(forms, self.weights[0], self.x(rows), self.levels)

    def candidates(self, rows: int) -> list[Form]:
        forms = base_forms(self.dtype)
        bad = self.variant(forms, rows)
        kept = [f for f in forms if str(f) not in bad]
        if not kept:
            self.unchecked = True
        return kept or forms

    def time(self, forms: list[Form], x: torch.Tensor, repeats: int) -> dict[str, float]:
        return _time_forms(forms, self.weights, x, repeats, self.spreads)

    def rows(self, max_rows: int) -> tuple[dict[int, Form], dict[int, dict[str, float]]]:
        """The timed row counts' forms (padding included where it wins), filled to 1..max_rows."""
        xs = {r: self.x(r) for r in timed_rows(max_rows)}
        forms = {r: self.candidates(r) for r in xs}
        measured = {r: self.time(forms[r], xs[r], self.repeats) for r in xs}
        for _ in range(self.retries):  # a row count measured while the machine stalled: again
            for r in implausible(measured):
                again = self.time(forms[r], xs[r], self.repeats)
                if min(again.values()) < min(measured[r].values()):
                    measured[r] = again
        chosen = choose_forms(measured, self.dtype, self.margin)
        cost = {r: measured[r][str(chosen[r])] for r in chosen}
        timings = {r: dict(measured[r]) for r in measured}
        for n, k in padding_candidates(cost, self.margin).items():
            padded = Form(chosen[k].base, k)
            check = self.time([chosen[n], padded], xs[n], self.repeats)
            for _ in range(self.retries):  # padded to k rows costs about k rows, unless it stalled
                if check[str(padded)] <= 2 * cost[k]:
                    break
                again = self.time([chosen[n], padded], xs[n], self.repeats)
                check = {f: min(t, again[f]) for f, t in check.items()}
            timings[n].update({f"{padded}": check[str(padded)]})
            if check[str(padded)] < (1 - self.margin) * check[str(chosen[n])]:
                chosen[n] = padded
        return fill_rows(chosen, max_rows), timings

    def one_class(self, rows: int, copies: int) -> tuple[Form, dict[str, float]]:
        """A class's form, timed on ``copies`` weight copies (larger products: longer calls,
        steadier; half the repeats). Not checked at each thread count: the per-row-count forms
        serve the drafts and the plain forward, whose bits no output depends on."""
        forms = base_forms(self.dtype)
        x, repeats = self.x(rows), max(1, self.repeats // 2)
        timed = _time_forms(forms, self.weights[:copies], x, repeats, self.spreads)
        return choose_forms({rows: timed}, self.dtype, self.margin)[rows], timed


def stream_bytes_default(
    fallback: int = 96 << 20, root: Path = Path("/sys/devices/system/cpu/cpu0/cache")
) -> int:
    """Three times the largest CPU cache Linux reports for CPU 0 (``fallback`` if it reports
    none): weight copies totalling this much cannot stay in the cache between their calls."""
    sizes = []
    for path in root.glob("index*/size"):
        try:
            text = path.read_text().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(text[-1:], 1)
        digits = text.rstrip("KM")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return 3 * max(sizes) if sizes else fallback


# ----------------------------------------------------------------------------- per-machine cache
def machine_key() -> dict[str, str]:
    """What a table depends on: torch version, CPU model, the thread count it is timed at (the
    thread policy's most, `casspec_ref.accel.threads.Policy.max_threads`), architecture, the forms
    there are to choose from and the way they are measured (a table measured before a form
    existed, or measured another way, is measured again)."""
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "torch": torch.__version__,
        "cpu": cpu,
        **dispatch_levels(),
        "arch": platform.machine(),
        "threads": str(threads.apply().max_threads),
        "forms": ",".join(BASE_FORMS),
        "calibration": CALIBRATION,
    }


#: The variables that cap the instructions torch's, oneDNN's and MKL's kernels may use.
DISPATCH_VARIABLES = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def dispatch_levels() -> dict[str, str]:
    """The vector level torch's kernels run at here (``torch.backends.cpu.get_cpu_capability``)
    and the caps set for oneDNN and MKL: kernels, and with them a row's rounding, change with
    each, so a table or a check is kept per combination."""
    levels = {"capability": torch.backends.cpu.get_cpu_capability()}
    for name in DISPATCH_VARIABLES[1:]:
        levels[name.lower()] = os.environ.get(name, "")
    return levels


def cache_path(key: Mapping[str, str] | None = None) -> Path:
    """``$XDG_CACHE_HOME/casspec_ref/kernels-<hash of the machine key>.json``."""
    key = machine_key() if key is None else key
    digest = hashlib.sha256(json.dumps(dict(key), sort_keys=True).encode()).hexdigest()[:16]
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return root / "casspec_ref" / f"kernels-{digest}.json"


def load_cached(path: Path | None = None) -> MeasuredTable:
    """The table cached for this machine (empty if none, or if the file is for another key)."""
    path = cache_path() if path is None else path
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return MeasuredTable()
    if not isinstance(data, dict) or data.get("key") != machine_key():
        return MeasuredTable()
    try:
        return MeasuredTable.from_json(data.get("entries", []), data.get("checked_threads", ()))
    except (ValueError, KeyError, TypeError):
        return MeasuredTable()  # a damaged cache is re-measured, never trusted


def _write_whole(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` whole: written first to a file of this process's own, so
    that two processes saving at once (two loads, two test workers) never write the same file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(path)


def save_cached(table: MeasuredTable, path: Path | None = None) -> Path:
    path = cache_path() if path is None else path
    if table.contention:
        raise ValueError(f"a table measured under contention is not cached: {table.contention}")
    data = {"key": machine_key(), "checked_threads": list(table.checked_threads)}
    _write_whole(path, json.dumps({**data, "entries": table.to_json()}, indent=1))
    return path


def kernel_mode() -> str:
    """The ``CASSPEC_KERNELS`` setting (default ``auto``); `ValueError` for an unknown value."""
    mode = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"{ENV_VAR}={mode!r} is not one of {MODES}")
    return mode


#: Tables measured under contention: used by this process, never cached (`prepare`).
_PROCESS_ONLY = MeasuredTable()


def prepare(
    shapes: Iterable[tuple[int, int]],
    dtype: torch.dtype,
    device: torch.device | str = "cpu",
    head_only: Iterable[tuple[int, int]] = (),
) -> KernelTable:
    """Make the active table cover ``shapes`` in ``dtype``, as ``CASSPEC_KERNELS`` says, then
    check which forms keep a target row's bits independent of its forward's shape (``head_only``:
    the shapes only the LM head has, checked to `invariance.HEAD_ROWS` rows; `head_only_shapes`).

    ``default``: nothing is timed (the per-row forms are the defaults). ``auto``: the cached
    table is installed and missing shapes are calibrated (`measure`) and cached, unless the
    timings show contention: then the table serves this process only and is measured again on
    a later start. ``calibrate``: the shapes are measured again. In every mode the shapes'
    tiles are then checked (`check_invariance`; nothing is timed,
    so a busy machine cannot mislead it). Only CPU tables are prepared; other devices keep the
    defaults. The thread policy may switch counts during a run only if the check passed at each
    count it switches between (`casspec_ref.accel.threads.allow_switching`). A process that
    started on fewer threads than its most (other processes were busy) checks at its own count
    only and holds it: a check on every thread would stall beside the busy cores as a forward
    does. Returns the active table.
    """
    mode = kernel_mode()
    policy = threads.apply()
    if torch.device(device).type != "cpu":
        threads.allow_switching(False, "the shape-invariant forms are checked on CPUs only")
        return active_table()
    wanted = set(shapes)
    table = _install_measured(wanted, dtype, mode) if mode != "default" else MeasuredTable()
    busy_start = policy.mode == "auto" and policy.threads < policy.max_threads
    levels = (policy.threads,) if busy_start else tuple(sorted({1, policy.max_threads}))
    report = check_invariance(wanted, dtype, levels, table, frozenset(head_only), verdicts_path())
    if not report.complete:
        print(f"casspec_ref: {str(dtype).removeprefix('torch.')}: {report.gaps}", file=sys.stderr)
    if busy_start:
        note = f"started beside busy cores: checked at {policy.threads} thread only; it holds"
        threads.allow_switching(False, note)
    elif report.complete:
        threads.allow_switching(True, f"the target's rows checked invariant at {levels} threads")
    else:
        threads.allow_switching(False, f"the target's rows are not invariant here: {report.gaps}")
    return active_table()


def _install_measured(wanted: set[tuple[int, int]], dtype: torch.dtype, mode: str) -> MeasuredTable:
    """The cached (``auto``) or freshly measured table for ``wanted``, installed; see `prepare`."""
    table = load_cached() if mode == "auto" else MeasuredTable()
    table.update(_process_only(wanted, dtype, table))
    missing = {(o, i) for o, i in wanted if (o, i, dtype) not in table.shapes()}
    if missing:
        measured = measure(missing, dtype, force=mode == "calibrate")
        if measured is None:
            pass  # the machine is busy: the default forms for the missing shapes, this time
        elif measured.contention:
            _PROCESS_ONLY.update(measured)
        else:
            merged = load_cached()  # keep entries other processes or dtypes cached meanwhile
            merged.update(measured)
            save_cached(merged)
        if measured is not None:
            table.update(measured)
    active_table().forms.update(table.forms)
    return table


#: Checked tiles of this process: (out, in, dtype, thread counts, rows) -> tile, None = row by row.
_INVARIANT: dict[tuple[int, int, torch.dtype, tuple[int, ...], int], Form | None] = {}


def check_invariance(
    wanted: set[tuple[int, int]],
    dtype: torch.dtype,
    levels: tuple[int, ...],
    table: MeasuredTable | None = None,
    head_only: Collection[tuple[int, int]] = frozenset(),
    cache: Path | None = None,
) -> invariance.Report:
    """Each shape's tile (in `invariance.ranked_tiles` order by ``table``'s timings; to
    `invariance.HEAD_ROWS` rows for the shapes of ``head_only``, `invariance.FULL_ROWS` for the
    others), installed in the active table, and whether attention keeps its bits across the
    thread counts; the report is kept in `invariance.REPORTS`. Each tile's verdict is reached
    once per machine (`machine_key`, dispatch levels included) and kept in ``cache`` (a file of
    `verdicts_path`'s; None: this process only); the order the tiles are tried in comes from
    this run's timings."""
    timings = {} if table is None else table.timings_us
    verdicts = _load_verdicts(cache)
    report = invariance.Report(dtype, levels)
    for o, i in sorted(wanted):
        rows = invariance.HEAD_ROWS if (o, i) in head_only else invariance.FULL_ROWS
        key = (o, i, dtype, levels, rows)
        if key not in _INVARIANT:
            tile_timings = {r: timings.get((o, i, dtype, r), {}) for r in (1, *TILE_ROWS)}
            ranked = invariance.ranked_tiles(dtype, tile_timings, head=(o, i) in head_only)
            known = verdicts.get(_verdict_key(key))
            if not isinstance(known, dict):  # none yet, or a file's entry of the wrong kind
                known = verdicts[_verdict_key(key)] = {}
            _INVARIANT[key] = invariance.invariant_form((o, i), dtype, levels, ranked, rows, known)
        form = _INVARIANT[key]
        report.forms[(o, i)] = form
        if form is not None:
            active_table().invariant[(o, i, dtype)] = form
    report.attention = invariance.attention_threads_agree(dtype, levels)  # milliseconds
    _save_verdicts(cache, verdicts)
    invariance.REPORTS[dtype] = report
    return report


#: Bumped when the check or the constructions it checks change: older verdicts are not reused.
CHECK_VERSION = "tiles-4"


def verdicts_path(key: Mapping[str, str] | None = None) -> Path:
    """``kernels-<hash>.json``'s sibling for the shape-invariance check's verdicts."""
    path = cache_path(key)
    return path.with_name(path.name.replace("kernels-", "invariance-", 1))


def _verdict_key(key: tuple) -> str:
    return repr(tuple(str(k).removeprefix("torch.") for k in key))


def _load_verdicts(path: Path | None) -> dict[str, object]:
    """The verdicts cached at ``path`` for this machine and check (empty if none or damaged:
    a verdict is only trusted from a file this code wrote for this machine)."""
    if path is None:
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    key = {**machine_key(), "check": CHECK_VERSION}
    if not isinstance(data, dict) or data.get("key") != key:
        return {}
    found = data.get("verdicts")
    if not isinstance(found, dict):
        return {}
    return {k: v for k, v in found.items() if isinstance(k, str) and _well_formed(v)}


def _well_formed(verdict: object) -> bool:
    """A shape's verdicts by tile (tile name -> bool)."""
    return isinstance(verdict, dict) and all(
        isinstance(k, str) and isinstance(v, bool) for k, v in verdict.items()
    )


def _save_verdicts(path: Path | None, verdicts: dict[str, object]) -> None:
    if path is None:
        return
    try:
        key = {**machine_key(), "check": CHECK_VERSION}
        _write_whole(path, json.dumps({"key": key, "verdicts": verdicts}, indent=1, sort_keys=True))
    except OSError:
        pass  # a read-only cache: the check runs again next time


def _process_only(
    wanted: set[tuple[int, int]], dtype: torch.dtype, cached: MeasuredTable
) -> MeasuredTable:
    """This process's uncached measurements of the shapes ``cached`` lacks."""
    out = MeasuredTable(checked_threads=_PROCESS_ONLY.checked_threads)
    have = cached.shapes()
    for key, form in _PROCESS_ONLY.forms.items():
        if (key[0], key[1]) in wanted and key[:3] not in have:
            out.forms[key] = form
    return out


def measure(
    shapes: set[tuple[int, int]], dtype: torch.dtype, *, force: bool = False
) -> MeasuredTable | None:
    """Calibrate ``shapes`` at the thread policy's largest count, saying on stderr what is
    measured and for about how long; None (nothing measured) when other processes keep more
    than `BUSY_CORES` busy at start, unless ``force``. The table's ``contention`` lists why
    its timings cannot be trusted (the repeated timings, and the load during the run)."""
    policy = threads.apply()
    load = threads.sample_load()
    if load is not None and load.others > BUSY_CORES and not force:
        print(
            f"casspec_ref: other processes keep {load.others:.1f} of {load.cpus} cores busy: "
            "the default matmul forms this time; this machine's table is measured on a quieter "
            f"start (or now: python -m casspec_ref.accel.kernel_table --calibrate)",
            file=sys.stderr,
        )
        return None
    with invariance.threads_at(policy.max_threads):
        seconds = estimate_seconds(shapes, dtype)
        print(
            f"casspec_ref: measuring this machine's fastest exact matmul forms for "
            f"{len(shapes)} weight shapes ({str(dtype).removeprefix('torch.')}, "
            f"{policy.max_threads} thread(s)), about {seconds:.0f} s; done once per machine "
            f"(cached in {cache_path().parent})",
            file=sys.stderr,
        )
        start, before = time.perf_counter(), threads.read_cpu_times()
        table = calibrate(shapes, dtype, thread_levels=(1, policy.max_threads))
        after = threads.read_cpu_times()
    others = None if before is None or after is None else threads.load_between(before, after)
    if others is not None:  # the timings' own reasons are already there (`calibrate`)
        table.contention += contention_reasons([], others.others)
    done = f"casspec_ref: measured in {time.perf_counter() - start:.1f} s"
    if table.contention:
        done += f"; not cached ({'; '.join(table.contention)}): measured again on a later start"
    print(done, file=sys.stderr)
    return table


def estimate_seconds(shapes: Iterable[tuple[int, int]], dtype: torch.dtype) -> float:
    """Roughly how long `calibrate` takes for ``shapes``: its calls' weight bytes and flops, at
    a memory bandwidth and arithmetic rate read from two short products here."""
    stream = stream_bytes_default()
    element = torch.tensor([], dtype=dtype).element_size()
    n_forms = len(base_forms(dtype))
    passes = 3 + 1  # `calibrate`'s default repeats and a warm-up; padding checks add a quarter
    moved = flop = 0.0
    for o, i in set(shapes):
        size = o * i * element
        sweep = max(size, min(1024 * size, stream))
        moved += sweep * passes * n_forms * len(timed_rows()) * 1.25
        for c in ROW_CLASSES:
            if 2 * c * o * i <= CLASS_MAX_FLOP:
                flop += max(2 * c * o * i, CLASS_SWEEP_FLOP) * 2 * n_forms  # 1 pass, warm-up
    bandwidth, rate = _rates(dtype)
    return 1.2 * (moved / bandwidth + flop / rate)


def _rates(dtype: torch.dtype) -> tuple[float, float]:
    """Bytes per second of a one-row product streaming weights from memory, and flops per
    second of a 256-row product (each the faster of three calls)."""
    gen = torch.Generator().manual_seed(0)
    weights = [torch.randn(1024, 1024, generator=gen).to(dtype) for _ in range(32)]
    x1 = torch.randn(1, 1024, generator=gen).to(dtype)
    x256 = torch.randn(256, 1024, generator=gen).to(dtype)
    best = [float("inf"), float("inf")]
    for _ in range(3):
        start = time.perf_counter()
        for w in weights:
            torch.nn.functional.linear(x1, w)
        best[0] = min(best[0], time.perf_counter() - start)
        start = time.perf_counter()
        torch.nn.functional.linear(x256, weights[0])
        best[1] = min(best[1], time.perf_counter() - start)
    size = sum(w.numel() * w.element_size() for w in weights)
    return size / max(best[0], 1e-9), 2 * 256 * 1024 * 1024 / max(best[1], 1e-9)


#: The weights the LM head may be: its own, or the token embedding when they are tied.
HEAD_WEIGHTS = ("head.weight", "tok_emb.weight")


def _product_weights(model: torch.nn.Module) -> dict[str, tuple[int, int]]:
    """The ``(out, in)`` shape of each 2-D weight a product uses, by name (the LM head is the
    embedding if tied; the other embeddings are tables looked up, not products)."""
    return {
        n: (int(p.shape[0]), int(p.shape[1]))
        for n, p in model.named_parameters()
        if p.dim() == 2 and (not n.endswith("emb.weight") or n == "tok_emb.weight")
    }


def model_shapes(model: torch.nn.Module) -> set[tuple[int, int]]:
    """The ``(out, in)`` shapes of a model's 2-D weights (the LM head is the embedding if tied)."""
    return set(_product_weights(model).values())


def head_only_shapes(model: torch.nn.Module) -> set[tuple[int, int]]:
    """The shapes of `model_shapes` that only the LM head has (`HEAD_WEIGHTS`): no forward
    applies them to more rows than its logits need."""
    weights = _product_weights(model)
    body = {s for n, s in weights.items() if n not in HEAD_WEIGHTS}
    return {s for n, s in weights.items() if n in HEAD_WEIGHTS} - body


def main(argv: list[str] | None = None) -> int:
    """Print this machine's cached table (``--calibrate``: measure the SmolLM2 shapes first)."""
    import argparse

    parser = argparse.ArgumentParser(
        prog="python -m casspec_ref.accel.kernel_table", description=main.__doc__
    )
    parser.add_argument("--calibrate", action="store_true", help="measure SmolLM2-135M's shapes")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float64"))
    args = parser.parse_args(argv)
    dtype = getattr(torch, args.dtype)
    if args.calibrate:
        from casspec_ref.config import smollm2_135m

        c = smollm2_135m()
        kv = c.n_kv_heads * c.head_dim
        shapes = {(c.d_model, c.d_model), (kv, c.d_model), (c.d_ff, c.d_model)}
        shapes |= {(c.d_model, c.d_ff), (c.vocab_size, c.d_model)}
        measured = measure(shapes, dtype, force=True)
        if measured is not None and not measured.contention:
            merged = load_cached()
            merged.update(measured)
            save_cached(merged)
    table = load_cached()
    print(f"machine: {machine_key()}")
    print(f"cache:   {cache_path()}")
    print(format_table(table) if table.forms else "(no table cached for this machine)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
