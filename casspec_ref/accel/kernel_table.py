"""The per-machine kernel table: measured once per machine, cached, installed at model load.

`casspec_ref.base.kernels` defines the exact forms of a matmul and the `KernelTable` that picks
one per (weight shape, dtype, rows). This module decides what goes into that table on this
machine.

The table is measured, not assumed (`calibrate`): for each weight shape and row count 1..16
(and each class of larger row counts, `ROW_CLASSES`, at its own size), the base forms are timed
in interleaved repeats (so a burst of load on a shared machine hits every form alike), cycling
through enough copies of the weight that each call reads it from memory as a real forward does;
the median call decides (robust to calls another process preempted), and a non-default form
must beat the default by a margin. A row count whose cheapest base cost is beaten by a larger
row count's is then timed padded to that count, and keeps the padding only if it wins by the
margin too (re-timed if it costs far more than the row count it pads to did: a stall, not a
cost).

The result is cached as JSON under ``~/.cache/casspec_ref/`` (or ``$XDG_CACHE_HOME``), one file
per (torch version, CPU model, thread count), so a machine calibrates once. The environment
variable ``CASSPEC_KERNELS`` selects the behaviour of `prepare`: ``auto`` (default: the cached
table, calibrating missing shapes), ``calibrate`` (re-measure and overwrite), ``default`` (never
measure; the built-in default forms; the test suite uses this). Print the table with
``python -m casspec_ref.accel.kernel_table`` (``--calibrate`` measures the SmolLM2-135M shapes
first).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import statistics
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch

from casspec_ref.base.kernels import (
    BASE_FORMS,
    MAX_ROWS,
    ROW_CLASSES,
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
#: The way tables are measured; part of the cache key, so a table measured an older way is
#: measured again (2: weight copies stream past the last-level cache, `stream_bytes_default`;
#: 3: row counts above 16 are measured by class, `ROW_CLASSES`; 4: forms are timed through
#: `apply_form`, as decoding calls them; 5: `apply_form` runs a packed product directly).
CALIBRATION = "5"
#: Accepted values of the ``CASSPEC_KERNELS`` environment variable.
MODES = ("auto", "calibrate", "default")
ENV_VAR = "CASSPEC_KERNELS"


@dataclass
class MeasuredTable(KernelTable):
    """A `KernelTable` with the costs (microseconds per call and form) behind each choice."""

    timings_us: dict[Key, dict[str, float]] = field(default_factory=dict)

    def update(self, other: MeasuredTable) -> None:
        self.forms.update(other.forms)
        self.timings_us.update(other.timings_us)

    def shapes(self) -> set[tuple[int, int, torch.dtype]]:
        return {(o, i, d) for o, i, d, _ in self.forms}

    def to_json(self) -> list[dict[str, object]]:
        return table_to_json(self)

    @staticmethod
    def from_json(entries: Iterable[Mapping[str, object]]) -> MeasuredTable:
        table = MeasuredTable()
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
) -> dict[str, float]:
    """Microseconds per call of each form: the median of all its timed calls, over ``repeats``
    interleaved passes through the weight copies. A call that another process preempted is one
    outlier among many; a form that stalls on most calls (e.g. a multi-threaded kernel waiting
    for a descheduled partner thread on a busy machine) is slow, and is measured as slow."""
    samples: dict[str, list[float]] = {str(f): [] for f in forms}
    for f in forms:  # warm-up: first calls allocate, pick code paths and pack the weight copies
        for w in weights:
            apply_form(f, x, w, None)
    for rep in range(repeats):
        order = forms[rep % len(forms) :] + forms[: rep % len(forms)]
        for f in order:
            for w in weights:
                start = time.perf_counter()
                apply_form(f, x, w, None)
                samples[str(f)].append((time.perf_counter() - start) * 1e6)
    return {name: statistics.median(s) for name, s in samples.items()}


def implausible(costs: Mapping[int, Mapping[str, float]], factor: float = 8.0) -> list[int]:
    """Row counts whose cheapest form costs over ``factor`` times one row's cheapest form.

    Up to 16 rows cost at most a few times one row (the weight is read once either way), so
    such a figure means the machine stalled during that measurement, not that the rows are slow.
    """
    if 1 not in costs:
        return []
    one = min(costs[1].values())
    return [r for r, c in costs.items() if min(c.values()) > factor * one]


def calibrate(
    shapes: Iterable[tuple[int, int]],
    dtype: torch.dtype = torch.float32,
    *,
    max_rows: int = MAX_ROWS,
    classes: Iterable[int] = ROW_CLASSES,
    repeats: int = 7,
    margin: float = DEFAULT_MARGIN,
    stream_bytes: int | None = None,
    max_copies: int = 1024,
    retries: int = 2,
) -> MeasuredTable:
    """Time the exact forms for each ``(out, in)`` weight shape and rows 1..``max_rows``, and
    at each row count of ``classes`` (`ROW_CLASSES`: the entries of larger products; base forms
    only, no padding).

    ``stream_bytes``: the weight is replicated until the copies total at least this much (at
    most ``max_copies``), and each timed sample runs once over all copies, so the weight comes
    from memory (as in a real forward over hundreds of MB of weights) rather than from cache.
    None: three times this machine's last-level cache (`stream_bytes_default`); a small weight
    (the k/v projections, 442 KB in SmolLM2) timed from a cache-resident set of copies was
    measured at the cache's speed, and its form chosen for the wrong reason.
    ``retries``: how often row counts with `implausible` costs are measured again.
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
    gen = torch.Generator().manual_seed(0)
    table = MeasuredTable()
    forms = base_forms(dtype)
    with torch.no_grad():
        for out_f, in_f in sorted(set(shapes)):
            one = torch.randn(out_f, in_f, generator=gen).to(dtype)
            size = one.numel() * one.element_size()
            copies = min(max_copies, max(1, -(-stream_bytes // size)))
            weights = [one] + [one.clone() for _ in range(copies - 1)]
            xs = {r: torch.randn(r, in_f, generator=gen).to(dtype) for r in range(1, max_rows + 1)}
            measured = {r: _time_forms(forms, weights, xs[r], repeats) for r in xs}
            for _ in range(retries):  # a row count measured while the machine stalled: again
                for r in implausible(measured):
                    again = _time_forms(forms, weights, xs[r], repeats)
                    if min(again.values()) < min(measured[r].values()):
                        measured[r] = again
            chosen = choose_forms(measured, dtype, margin)
            cost = {r: measured[r][str(chosen[r])] for r in chosen}
            timings = {r: dict(measured[r]) for r in measured}
            for n, k in padding_candidates(cost, margin).items():
                padded = Form(chosen[k].base, k)
                check = _time_forms([chosen[n], padded], weights, xs[n], repeats)
                for _ in range(retries):  # padded to k rows costs about k rows, unless it stalled
                    if check[str(padded)] <= 2 * cost[k]:
                        break
                    again = _time_forms([chosen[n], padded], weights, xs[n], repeats)
                    check = {f: min(t, again[f]) for f, t in check.items()}
                timings[n].update({f"{padded}": check[str(padded)]})
                if check[str(padded)] < (1 - margin) * check[str(chosen[n])]:
                    chosen[n] = padded
            for c in classes:  # larger products: longer calls, steadier; half the repeats
                xc = torch.randn(c, in_f, generator=gen).to(dtype)
                timings[c] = _time_forms(forms, weights, xc, max(1, repeats // 2))
            chosen |= choose_forms({c: timings[c] for c in classes}, dtype, margin)
            for r, form in chosen.items():
                key = (out_f, in_f, dtype, r)
                table.forms[key] = form
                table.timings_us[key] = {f: round(t, 1) for f, t in timings[r].items()}
            del weights
    return table


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
    """What a table depends on: torch version, CPU model, thread count, architecture, the forms
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
        "arch": platform.machine(),
        "threads": str(torch.get_num_threads()),
        "forms": ",".join(BASE_FORMS),
        "calibration": CALIBRATION,
    }


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
        return MeasuredTable.from_json(data.get("entries", []))
    except (ValueError, KeyError, TypeError):
        return MeasuredTable()  # a damaged cache is re-measured, never trusted


def save_cached(table: MeasuredTable, path: Path | None = None) -> Path:
    path = cache_path() if path is None else path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": machine_key(), "entries": table.to_json()}, indent=1))
    tmp.replace(path)
    return path


def kernel_mode() -> str:
    """The ``CASSPEC_KERNELS`` setting (default ``auto``); `ValueError` for an unknown value."""
    mode = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if mode not in MODES:
        raise ValueError(f"{ENV_VAR}={mode!r} is not one of {MODES}")
    return mode


def prepare(
    shapes: Iterable[tuple[int, int]], dtype: torch.dtype, device: torch.device | str = "cpu"
) -> KernelTable:
    """Make the active table cover ``shapes`` in ``dtype``, as ``CASSPEC_KERNELS`` says.

    ``default``: nothing is measured (the active table is left as it is). ``auto``: the cached
    table is installed and missing shapes are calibrated and cached. ``calibrate``: the shapes
    are measured again. Only CPU tables are calibrated; other devices keep the defaults.
    Returns the active table.
    """
    mode = kernel_mode()
    if mode == "default" or torch.device(device).type != "cpu":
        return active_table()
    wanted = set(shapes)
    cached = load_cached() if mode == "auto" else MeasuredTable()
    missing = {(o, i) for o, i in wanted if (o, i, dtype) not in cached.shapes()}
    if missing:
        cached.update(calibrate(missing, dtype))
        merged = load_cached()  # keep entries other processes or dtypes cached meanwhile
        merged.update(cached)
        save_cached(merged)
    active_table().forms.update(cached.forms)
    return active_table()


def model_shapes(model: torch.nn.Module) -> set[tuple[int, int]]:
    """The ``(out, in)`` shapes of a model's 2-D weights (the LM head is the embedding if tied)."""
    return {
        (int(p.shape[0]), int(p.shape[1]))
        for n, p in model.named_parameters()
        if p.dim() == 2 and (not n.endswith("emb.weight") or n == "tok_emb.weight")
    }


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
        table = calibrate(shapes, dtype)
        merged = load_cached()
        merged.update(table)
        save_cached(merged)
    table = load_cached()
    print(f"machine: {machine_key()}")
    print(f"cache:   {cache_path()}")
    print(format_table(table) if table.forms else "(no table cached for this machine)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
