"""The thread policy: how many threads run a forward, chosen from the cores other processes leave.

torch runs each forward's many small parallel regions on an OpenMP team whose workers, by
libgomp's default, spin while they wait at a barrier. With every core free this is the fastest
way to wait. When another process takes a core, a worker that lost its core holds up every
barrier while its partners spin their time slices away, and a forward of a small model runs
several times slower than on one thread. A passive wait policy (``OMP_WAIT_POLICY=PASSIVE``)
avoids that, but puts a sleep and a wake-up into every barrier on a quiet machine too; and
OpenMP reads its wait policy once, when it starts, so it cannot follow the load. The thread count
can (`torch.set_num_threads`), and one thread has no barrier to wait at. So the policy keeps
OpenMP's default wait and chooses the count:

- all the threads torch would use (`Policy.max_threads`) while the other processes leave that
  many cores free, one thread otherwise (`choose_threads`);
- the load is the CPU time of the *other* processes: /proc/stat's busy time minus this process's
  own (/proc/self/stat), so it reads the same whatever this process is doing (`Load`);
- it is read when the policy is applied (`apply`: over `START_WINDOW_S`), and while a model
  decodes (`Monitor`, fed each forward's duration by the hooks `watch` puts on the model, which
  `casspec_ref.io.weights.load_model` calls: every call of the model, the naive loop's, the
  speculative loop's verify and the drafts' alike): every `SAMPLE_S`, and at once when forward
  times jump (`JumpDetector`). Going down takes one reading, going back up two in a row.

Switching threads between forwards is exact only where each forward gives the same bits at
every thread count the policy uses, and some kernels split their work by the team size (MKL's
float32 product of a few rows, torch's fused float32 attention for one new token, which the
model therefore runs on one thread: `casspec_ref.base.exact_attention`). So the count switches
during a run only if the target's shape-invariant forms (every weight shape's tile and the
attention) were checked to give the same bits at 1 and
`Policy.max_threads` threads (`casspec_ref.accel.invariance`, run by
`casspec_ref.accel.kernel_table.prepare`, then `allow_switching`), and only for forwards within
the row counts checked (`threads_for`: a larger forward runs on every thread): at most
`SWITCHED_ROWS` new tokens where every row's logits are computed (a verify forward; DyTC's
largest tree is no larger), at most `PROMPT_ROWS` where only the last row's are (a prompt's
forward, ``last_only``: the LM head, the largest product, sees one row). So that no forward of a
decode is larger, `watch` has the loops send a prompt in forwards of at most `PROMPT_ROWS` rows
(`Transformer.prompt_rows`, read by `casspec_ref.generate.run_prompt`; the same bits as one
forward, by the same shape invariance): a forward that ran on every thread beside a busy core
would wait at every barrier for the thread that lost its core. Each piece past the first is one
more pass over the weights, so a prompt of up to `PROMPT_ROWS` tokens costs nothing extra. A
draft's forwards may round differently after a switch; a draft only proposes tokens, so no
output changes.
A process that starts beside busy cores, on one thread, is checked at one thread only and holds
it (a check on every thread would stall there as a forward does). Otherwise too the count
chosen at start holds for the process; the `Monitor` still reads the load and reports the most
it saw (`Policy.most_others_seen`), so a run that met a load says so.

What wins over the policy: an explicit ``OMP_NUM_THREADS`` (the count torch took from it is kept
and never switched); an explicit ``OMP_WAIT_POLICY`` / ``GOMP_SPINCOUNT`` (reported as the wait
policy); ``CASSPEC_THREADS`` = ``auto`` (default, the policy above), ``inherit`` (change nothing:
torch's defaults, for comparisons) or a positive integer (that many threads, never switched).
Only Linux exposes the load this way; elsewhere the start count is torch's and is not switched.
"""

from __future__ import annotations

import os
import statistics
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ENV_VAR = "CASSPEC_THREADS"
#: Environment variables through which a user sets OpenMP's wait policy (reported, never set).
WAIT_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")
#: Window of the load reading taken when the policy is applied (seconds).
START_WINDOW_S = 0.1
#: How often a decoding process reads the load (seconds between readings).
SAMPLE_S = 0.5
#: All threads stay while the others leave at least ``max_threads - DOWN_SLACK`` cores free...
DOWN_SLACK = 0.5
#: ... and come back once they leave at least ``max_threads - UP_SLACK`` free, twice in a row.
UP_SLACK = 0.2
UP_CONFIRM = 2
#: Forwards of at most this many new tokens follow the switched count (`threads_for`): the LM
#: head is checked at each count for every row count up to `invariance.HEAD_ROWS`, and DyTC's
#: largest tree (`DyTCConfig.max_tree_size`) fits (tests/test_threads.py holds them together).
SWITCHED_ROWS = 32
#: ... and forwards that compute the last row's logits only (a prompt's piece), up to this many:
#: every other product and the attention are checked up to `invariance.FULL_ROWS` rows.
PROMPT_ROWS = 64


# ----------------------------------------------------------------------------- observations
@dataclass(frozen=True)
class CpuTimes:
    """One reading of the CPU counters: wall time (s), the machine's busy and total CPU time
    over all CPUs (ticks), this process's CPU time (ticks), and the number of CPUs."""

    wall: float
    busy: float
    total: float
    own: float
    cpus: int


@dataclass(frozen=True)
class Load:
    """What the other processes used between two readings: ``others`` cores out of ``cpus``."""

    cpus: int
    others: float
    window_s: float

    @property
    def free(self) -> float:
        """Cores the other processes left free (this process's own use counts as free)."""
        return self.cpus - self.others


def parse_cpu_times(stat: str, self_stat: str, wall: float) -> CpuTimes:
    """Counters from the text of /proc/stat and /proc/self/stat (proc(5)). Busy time is all
    but ``idle`` and ``iowait``; ``guest`` is already inside ``user``, so it is not added."""
    lines = stat.splitlines()
    fields = [float(v) for v in lines[0].split()[1:]]
    if not lines[0].startswith("cpu ") or len(fields) < 4:
        raise ValueError(f"not a /proc/stat 'cpu' line: {lines[0][:60]!r}")
    total = sum(fields[:8])  # user nice system idle iowait irq softirq steal
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
    cpus = sum(1 for line in lines[1:] if line.startswith("cpu") and line[3:4].isdigit())
    # The command name may hold spaces and parentheses: fields count from after the last ')'.
    rest = self_stat.rsplit(")", 1)[1].split()
    own = float(rest[11]) + float(rest[12])  # utime, stime (fields 14 and 15)
    return CpuTimes(wall, total - idle, total, own, max(cpus, 1))


def load_between(a: CpuTimes, b: CpuTimes) -> Load:
    """The other processes' load between readings ``a`` and ``b`` (in cores, at least 0)."""
    window = max(b.wall - a.wall, 1e-9)
    total = b.total - a.total
    if total <= 0:
        return Load(b.cpus, 0.0, window)
    busy_share = (b.busy - a.busy) / total  # of all CPUs' time
    own_share = (b.own - a.own) / total
    return Load(b.cpus, max(0.0, (busy_share - own_share) * b.cpus), window)


def read_cpu_times(root: Path = Path("/proc")) -> CpuTimes | None:
    """The counters now, or None where procfs is not there (not Linux)."""
    try:
        stat = (root / "stat").read_text()
        self_stat = (root / "self" / "stat").read_text()
        return parse_cpu_times(stat, self_stat, time.monotonic())
    except (OSError, ValueError, IndexError):
        return None


def sample_load(window_s: float = START_WINDOW_S) -> Load | None:
    """The other processes' load over the next ``window_s`` seconds (this one sleeps)."""
    a = read_cpu_times()
    time.sleep(window_s)
    b = read_cpu_times()
    return None if a is None or b is None else load_between(a, b)


# ----------------------------------------------------------------------------- decisions
def choose_threads(load: Load | None, max_threads: int, current: int | None = None) -> int:
    """The thread count for ``load``: ``max_threads`` if the others leave that many cores free,
    else 1. With all threads running (or none chosen yet) they stay unless fewer than
    ``max_threads - DOWN_SLACK`` cores are free; from one thread, all come back only once
    ``max_threads - UP_SLACK`` are (the gap keeps a load near the line from flipping the count).
    No reading (``None``): keep ``current`` (``max_threads`` if none)."""
    if max_threads <= 1:
        return 1
    if load is None:
        return max_threads if current is None else current
    slack = UP_SLACK if current == 1 else DOWN_SLACK
    return max_threads if load.free >= max_threads - slack else 1


class JumpDetector:
    """Says when forward durations jump: the median of a key's last ``window`` durations above
    ``factor`` times the lowest such median seen for that key since the last `reset`.

    A key groups forwards of one kind (same rows, same plan): their durations are comparable.
    A false alarm costs one load reading, so the detector is cheap rather than sure.
    """

    def __init__(self, factor: float = 2.5, window: int = 5) -> None:
        if factor <= 1 or window < 1:
            raise ValueError(f"factor must be > 1 and window >= 1, got {factor}, {window}")
        self.factor, self.window = factor, window
        self._recent: dict[Hashable, deque[float]] = {}
        self._best: dict[Hashable, float] = {}

    def reset(self) -> None:
        """Forget every baseline (the thread count changed: durations change with it)."""
        self._recent.clear()
        self._best.clear()

    def observe(self, key: Hashable, seconds: float) -> bool:
        recent = self._recent.setdefault(key, deque(maxlen=self.window))
        recent.append(seconds)
        if len(recent) < self.window:
            return False
        median = statistics.median(recent)
        best = min(self._best.get(key, median), median)
        self._best[key] = best
        return median > self.factor * best


@dataclass
class Policy:
    """What was chosen, and why (`as_dict` is what ``--json`` and the bench record show)."""

    mode: str  # "auto", "user" (OMP_NUM_THREADS set), "fixed" (CASSPEC_THREADS=N), "inherit"
    threads: int
    max_threads: int
    wait_policy: str
    start_others: float | None = None  # cores the other processes used at start
    switching: bool = False
    switching_note: str = "not yet decided (no kernel table prepared)"
    switches: list[tuple[float, int]] = field(default_factory=list)  # (time since start, count)
    #: The most cores other processes used in one reading while decoding (None: none taken).
    most_others_seen: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class Monitor:
    """The run-time half of the policy: fed each forward's duration, it returns a new thread
    count when the load calls for one (or None). ``read`` gives the counters (`read_cpu_times`;
    tests give synthetic ones) and ``clock`` the time on the counters' wall clock: a forward
    costs a clock reading, and the counters are read only once ``every_s`` has passed since
    the last reading or the forward times jumped."""

    def __init__(
        self,
        policy: Policy,
        read: Callable[[], CpuTimes | None] = read_cpu_times,
        detector: JumpDetector | None = None,
        every_s: float = SAMPLE_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy, self.read, self.every_s, self.clock = policy, read, every_s, clock
        self.detector = JumpDetector() if detector is None else detector
        self.last = read()
        self.ups = 0  # readings in a row that asked for all threads back

    def observe(self, key: Hashable, seconds: float) -> int | None:
        jumped = self.detector.observe(key, seconds)
        if self.last is None or not (jumped or self.clock() - self.last.wall >= self.every_s):
            return None
        now = self.read()
        if now is None or now.wall - self.last.wall < 0.02:  # too short a window to read from
            return None
        load, self.last = load_between(self.last, now), now
        seen = self.policy.most_others_seen
        self.policy.most_others_seen = round(max(seen or 0.0, load.others), 2)
        if not self.policy.switching:
            return None  # the reading is still reported: a run that met a load says so
        current = self.policy.threads
        wanted = choose_threads(load, self.policy.max_threads, current)
        self.ups = self.ups + 1 if wanted > current else 0
        if wanted == current or (wanted > current and self.ups < UP_CONFIRM):
            return None
        self.ups = 0
        self.detector.reset()
        self.policy.threads = wanted
        self.policy.switches.append((round(now.wall - _START, 3), wanted))
        return wanted


# ----------------------------------------------------------------------------- the process
_START = time.monotonic()
_POLICY: Policy | None = None


def wait_policy() -> str:
    """OpenMP's wait policy as this process was started with it."""
    set_vars = [f"{v}={os.environ[v]}" for v in WAIT_VARS if v in os.environ]
    return ", ".join(set_vars) if set_vars else "OpenMP default (spin, then sleep)"


def apply() -> Policy:
    """Choose this process's thread count (once; later calls return the same `Policy`).

    Call it before the first forward: the entry points do (`load_model` calls it), and a
    notebook's first cell can (``from casspec_ref.accel import threads; threads.apply()``).
    """
    global _POLICY
    if _POLICY is not None:
        return _POLICY
    import torch

    inherited = torch.get_num_threads()
    setting = os.environ.get(ENV_VAR, "auto").strip().lower() or "auto"
    if "OMP_NUM_THREADS" in os.environ:
        _POLICY = Policy("user", inherited, inherited, wait_policy(), switching_note="")
    elif setting == "inherit":
        _POLICY = Policy("inherit", inherited, inherited, wait_policy(), switching_note="")
    elif setting.isdigit() and int(setting) > 0:
        torch.set_num_threads(int(setting))
        _POLICY = Policy("fixed", int(setting), int(setting), wait_policy(), switching_note="")
    elif setting == "auto":
        _POLICY = _auto(torch, inherited)
    else:
        raise ValueError(f"{ENV_VAR}={setting!r}: allowed are auto, inherit or a positive integer")
    return _POLICY


def _auto(torch: Any, inherited: int) -> Policy:
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    max_threads = max(1, min(inherited, cpus or 1))
    load = sample_load() if max_threads > 1 else None
    chosen = choose_threads(load, max_threads)
    torch.set_num_threads(chosen)
    others = None if load is None else round(load.others, 2)
    return Policy("auto", chosen, max_threads, wait_policy(), start_others=others)


def current() -> Policy | None:
    """The policy applied in this process (None before `apply`)."""
    return _POLICY


def allow_switching(allowed: bool, note: str) -> None:
    """Let the `Monitor` switch the thread count during a run (only in ``auto`` mode, with the
    load readable), or hold the count chosen at start; ``note`` says why (it is reported)."""
    policy = apply()
    readable = read_cpu_times() is not None
    policy.switching = allowed and policy.mode == "auto" and policy.max_threads > 1 and readable
    if policy.mode != "auto":
        note = f"the count is set ({policy.mode})"
    elif allowed and not readable:
        note = "no /proc/stat to read the load from"
    policy.switching_note = note


def threads_for(rows: int, policy: Policy, last_only: bool = False) -> int:
    """The thread count a forward of ``rows`` new tokens runs on (``last_only``: it computes the
    last row's logits only): the policy's current count up to `SWITCHED_ROWS` rows, or
    `PROMPT_ROWS` if ``last_only`` (row counts the invariance check covered at each count it
    switches between), `Policy.max_threads` above (a long prompt, a large tree: products whose
    bits may depend on the count, so it never changes for them)."""
    limit = PROMPT_ROWS if last_only else SWITCHED_ROWS
    if not policy.switching or rows > limit:
        return policy.max_threads if policy.switching else policy.threads
    return policy.threads


def forward_kind(args: tuple, kwargs: dict[str, Any]) -> tuple[int, str]:
    """What a forward call of the model is, from its arguments (``tokens (1, T)``, ...,
    ``plan``): its rows (T new tokens) and its plan's name ("target" without one). Forwards of
    one kind take comparable times (`JumpDetector`'s key)."""
    tokens = args[0] if args else kwargs.get("tokens")
    plan = args[4] if len(args) > 4 else kwargs.get("plan")
    shape = getattr(tokens, "shape", None)
    rows = int(shape[-1]) if shape else 0
    return rows, "target" if plan is None else str(getattr(plan, "name", plan))


def watch(model: Any) -> None:
    """Feed ``model``'s forward durations to a `Monitor` that switches the thread count when
    the load calls for it (a no-op unless switching is allowed; installed once per model), and
    have the loops send a prompt in forwards of at most `PROMPT_ROWS` rows while it may.

    The hooks run on every call of the model, ``model(tokens, ...)``: the naive loop's forwards,
    the speculative loop's prompt and verify forwards and the drafts' forwards all call it so
    (a direct ``model.forward(...)`` passes the hooks by)."""
    import torch

    policy = apply()
    if policy.mode != "auto" or getattr(model, "_thread_monitor", None) is not None:
        return
    monitor = Monitor(policy)
    started = [0.0]
    if policy.switching:
        model.prompt_rows = PROMPT_ROWS

    def before(module: Any, args: tuple, kwargs: dict[str, Any]) -> None:
        last_only = bool(kwargs.get("last_only", False))  # keyword-only in `Transformer.forward`
        count = threads_for(forward_kind(args, kwargs)[0], policy, last_only)
        if count != torch.get_num_threads():
            torch.set_num_threads(count)
        started[0] = time.perf_counter()

    def after(module: Any, args: tuple, kwargs: dict[str, Any], output: Any) -> None:
        seconds = time.perf_counter() - started[0]
        wanted = monitor.observe(forward_kind(args, kwargs), seconds)
        if wanted is not None:  # between two forwards: the next one runs on the new count
            torch.set_num_threads(wanted)

    hooks = (
        model.register_forward_pre_hook(before, with_kwargs=True),
        model.register_forward_hook(after, with_kwargs=True),
    )
    model._thread_monitor, model._thread_hooks = monitor, hooks


def unwatch(model: Any) -> None:
    """Undo `watch`: the hooks are removed and the prompt goes in one forward again; the
    thread count stays where it is. A comparison's baseline: the same process, the same count,
    without the policy's run-time part (``benchmarks/busy_machine.py`` measures its cost so)."""
    for hook in getattr(model, "_thread_hooks", ()):
        hook.remove()
    model._thread_monitor, model._thread_hooks = None, ()
    model.prompt_rows = None


# ----------------------------------------------------------------------------- run records
#: A run's load "changed" when the other processes' cores at its start and end differ by more.
LOAD_CHANGE_CORES = 0.5


def machine_load(window_s: float = 0.5) -> dict[str, Any] | None:
    """The other processes' load over ``window_s`` (this one sleeps), for a run's record:
    ``{"others_cores", "cpus", "loadavg_1m"}``; None where procfs is not there."""
    load = sample_load(window_s)
    if load is None:
        return None
    try:
        loadavg = float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        loadavg = None
    return {"others_cores": round(load.others, 2), "cpus": load.cpus, "loadavg_1m": loadavg}


def load_record(start: dict[str, Any] | None, end: dict[str, Any] | None) -> dict[str, Any]:
    """A run's load at its start and end, and whether it changed (by over `LOAD_CHANGE_CORES`
    of other processes' cores: the figures of such a run mix two machines)."""
    changed = None
    if start is not None and end is not None:
        changed = abs(start["others_cores"] - end["others_cores"]) > LOAD_CHANGE_CORES
    return {"start": start, "end": end, "changed": changed}
