"""The thread policy's decisions, from synthetic observations: nothing here is timed.

The load is read from procfs text (`parse_cpu_times`), turned into the other processes' cores
(`load_between`), and decided on (`choose_threads`, `Monitor`); each step is fed made-up
counters, so every decision is checked exactly.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

import pytest
import torch

from casspec_ref.accel import threads
from casspec_ref.accel.threads import CpuTimes, JumpDetector, Load, Monitor, Policy
from casspec_ref.base.random_weights import random_init_
from casspec_ref.config import tiny_llama
from casspec_ref.generate import generate_ar
from casspec_ref.model import Transformer
from casspec_ref.plan import ExecutionPlan
from casspec_ref.speculative import generate_speculative

STAT = """cpu  100 5 20 300 10 1 2 3 0 0
cpu0 50 2 10 150 5 0 1 1 0 0
cpu1 50 3 10 150 5 1 1 2 0 0
intr 12345
"""
# A command name with a space and parentheses: fields are counted from the last ')'.
SELF_STAT = "4242 (py (x) y) R 1 2 3 4 5 6 7 8 9 10 40 7 0 0 20 0 1 0"
PROMPT = [3, 5, 7, 9, 3, 5, 7, 11]


@pytest.fixture(autouse=True)
def fresh_policy(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    previous = torch.get_num_threads()
    monkeypatch.setattr(threads, "_POLICY", None)
    yield
    torch.set_num_threads(previous)


def times(wall: float, busy: float, own: float, cpus: int = 2) -> CpuTimes:
    """Counters at ``wall`` seconds with 100 ticks per CPU-second."""
    return CpuTimes(wall, busy, 100 * cpus * wall, own, cpus)


def test_counters_are_read_from_procfs_text() -> None:
    t = threads.parse_cpu_times(STAT, SELF_STAT, wall=5.0)
    # busy = user+nice+system+irq+softirq+steal = 100+5+20+1+2+3; idle+iowait = 310
    assert (t.busy, t.total, t.own, t.cpus, t.wall) == (131.0, 441.0, 47.0, 2, 5.0)
    with pytest.raises(ValueError, match="not a /proc/stat"):
        threads.parse_cpu_times("intr 1 2 3\n", SELF_STAT, wall=0.0)


def test_the_load_is_the_other_processes_cpu_time() -> None:
    # Over 1 s on 2 CPUs (200 ticks): 150 busy, 100 of them ours: the others used 0.5 core.
    load = threads.load_between(times(0.0, 0, 0), times(1.0, 150, 100))
    assert (load.cpus, load.others, load.free, load.window_s) == (2, 0.5, 1.5, 1.0)
    # Our own spinning never counts as load, and a zero-length window reads as no load.
    assert threads.load_between(times(0.0, 0, 0), times(1.0, 200, 200)).others == 0.0
    assert threads.load_between(times(1.0, 5, 5), times(1.0, 5, 5)).others == 0.0


@pytest.mark.parametrize(
    ("others", "current", "expected"),
    [
        (0.0, None, 2),  # quiet start: every thread
        (0.45, None, 2),  # a light background load: still 1.55 cores free
        (0.6, None, 1),  # a busy core: one thread
        (0.6, 2, 1),
        (0.3, 1, 1),  # from one thread, all come back only with 1.8 cores free ...
        (0.15, 1, 2),  # ... here
        (1.0, 2, 1),
    ],
)
def test_choose_threads_with_a_gap_between_going_down_and_up(
    others: float, current: int | None, expected: int
) -> None:
    assert threads.choose_threads(Load(2, others, 0.5), 2, current) == expected


def test_choose_threads_without_a_reading_or_a_team() -> None:
    assert threads.choose_threads(None, 4) == 4
    assert threads.choose_threads(None, 4, current=1) == 1
    assert threads.choose_threads(Load(8, 0.0, 1.0), 1) == 1  # nothing to choose
    assert threads.choose_threads(Load(8, 4.0, 1.0), 4) == 4  # 4 cores free for 4 threads
    assert threads.choose_threads(Load(8, 4.6, 1.0), 4) == 1


def test_jump_detector_compares_a_rolling_median_with_the_best_seen() -> None:
    d = JumpDetector(factor=2.5, window=3)
    assert [d.observe("a", s) for s in (1.0, 1.1, 0.9, 1.0, 1.2)] == [False] * 5
    assert d.observe("a", 3.0) is False  # one slow forward: the median holds
    assert d.observe("a", 3.0) is True  # two of three: the median jumped (3.0 > 2.5 x 1.0)
    assert d.observe("b", 3.0) is False  # another kind of forward has its own baseline
    d.reset()
    assert [d.observe("a", 3.0) for _ in range(4)] == [False] * 4  # 3.0 is the new normal
    with pytest.raises(ValueError, match="factor"):
        JumpDetector(factor=1.0)


def policy(threads_now: int = 2, switching: bool = True) -> Policy:
    return Policy("auto", threads_now, 2, "OpenMP default", switching=switching)


def test_monitor_drops_to_one_thread_when_another_process_takes_a_core() -> None:
    # Readings: start, then after 0.6 s a competitor used a full core beside our 1 core.
    feed = iter([times(0.0, 0, 0), times(0.6, 120, 60)])
    m = Monitor(policy(), read=lambda: next(feed))
    assert m.observe(1, 0.03) == 1
    assert m.policy.threads == 1 and [n for _, n in m.policy.switches] == [1]


class Counters:
    """Synthetic counters on a settable wall clock: each reading is counted, and the others'
    load is ``others`` cores (2 CPUs, 100 ticks per CPU-second, this process using 1 core)."""

    def __init__(self, others: float) -> None:
        self.now, self.others, self.readings = 0.0, others, 0

    def clock(self) -> float:
        return self.now

    def read(self) -> CpuTimes:
        self.readings += 1
        return times(self.now, 100 * (1 + self.others) * self.now, 100 * self.now)


def test_monitor_reads_the_counters_only_when_its_interval_passed_or_times_jump() -> None:
    c = Counters(others=1.0)
    m = Monitor(policy(), c.read, JumpDetector(2.0, 3), every_s=0.5, clock=c.clock)
    assert c.readings == 1  # the reading the first window starts from
    for _ in range(20):  # 20 forwards within 0.2 s at a steady time: no reading
        c.now += 0.01
        assert m.observe(1, 0.01) is None
    assert c.readings == 1
    c.now += 0.1
    assert m.observe(1, 0.05) is None and c.readings == 1  # one slow forward: the median holds
    assert m.observe(1, 0.05) == 1 and c.readings == 2  # a jump: read at once, a core taken
    assert m.policy.most_others_seen == 1.0
    c.now += 0.49
    assert m.observe(1, 0.05) is None and c.readings == 2  # the detector was reset; 0.49 s
    c.now += 0.02
    assert m.observe(1, 0.05) is None and c.readings == 3  # the interval passed: read (1 core)


def test_monitor_reads_nothing_from_too_short_a_window() -> None:
    c = Counters(others=1.0)
    m = Monitor(policy(), c.read, JumpDetector(2.0, 1), every_s=0.5, clock=c.clock)
    c.now += 0.01
    m.observe(1, 0.001)
    assert m.observe(1, 1.0) is None and c.readings == 2  # read on the jump, 0.01 s: no load
    assert m.policy.most_others_seen is None and m.policy.threads == 2


def test_monitor_comes_back_to_every_thread_after_two_quiet_readings() -> None:
    feed = iter([times(0.0, 0, 0), times(1.0, 102, 100), times(2.0, 204, 200)])
    m = Monitor(policy(threads_now=1), read=lambda: next(feed))
    assert m.observe(1, 0.03) is None  # one quiet reading is not enough ...
    assert m.observe(1, 0.03) == 2  # ... the second brings the team back
    assert m.policy.threads == 2


def test_monitor_holds_the_count_when_switching_is_not_allowed() -> None:
    feed = iter([times(0.0, 0, 0), times(1.0, 200, 50)])
    m = Monitor(policy(switching=False), read=lambda: next(feed))
    assert m.observe(1, 10.0) is None and m.policy.threads == 2
    assert m.policy.most_others_seen == 1.5  # the load is still read and reported


def test_large_forwards_always_run_on_every_thread_when_switching() -> None:
    p = policy(threads_now=1)
    assert [threads.threads_for(r, p) for r in (1, 32, 33, 500)] == [1, 1, 2, 2]
    # a prompt's piece computes the last row's logits only: switched up to `PROMPT_ROWS` rows
    assert [threads.threads_for(r, p, last_only=True) for r in (33, 64, 65)] == [1, 1, 2]
    held = policy(threads_now=1, switching=False)
    assert [threads.threads_for(r, held) for r in (1, 500)] == [1, 1]


def test_the_hook_runs_a_prompt_piece_on_the_switched_count_and_a_large_tree_on_every_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`watch`'s hook reads ``last_only`` from the call: 40 rows computing the last row's logits
    follow the switched count (1 here), 40 rows computing every row's run on every thread."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(threads.ENV_VAR, raising=False)
    monkeypatch.setattr(threads, "sample_load", lambda: Load(2, 0.0, 0.1))
    monkeypatch.setattr(threads, "read_cpu_times", lambda: None)
    model = random_init_(Transformer(tiny_llama(vocab_size=32, max_seq_len=64)).double(), seed=4)
    p = threads.apply()
    p.switching, p.threads, p.max_threads = True, 1, 2
    threads.watch(model)
    seen: list[int] = []
    inner = model.forward

    def recording(*args: Any, **kwargs: Any) -> torch.Tensor:
        seen.append(torch.get_num_threads())
        return inner(*args, **kwargs)

    monkeypatch.setattr(model, "forward", recording)
    tokens = torch.arange(40).remainder(32).unsqueeze(0)
    before = torch.get_num_threads()
    try:
        model(tokens, last_only=True)
        model(tokens)
        model(tokens[:, :5])
    finally:
        torch.set_num_threads(before)
    assert seen == [1, 2, 1]


def test_an_explicit_omp_num_threads_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setattr(threads, "sample_load", lambda: pytest.fail("no load is read"))
    p = threads.apply()
    assert (p.mode, p.threads, p.max_threads) == ("user", torch.get_num_threads(), p.threads)
    assert p.wait_policy == "OMP_WAIT_POLICY=PASSIVE"
    threads.allow_switching(True, "checked")
    assert p.switching is False and "user" in p.switching_note
    assert threads.apply() is p  # chosen once per process


def test_auto_mode_chooses_from_the_load(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(threads.ENV_VAR, raising=False)
    torch.set_num_threads(2)
    monkeypatch.setattr(threads, "sample_load", lambda: Load(2, 0.9, 0.1))
    p = threads.apply()
    assert (p.mode, p.threads, p.max_threads, p.start_others) == ("auto", 1, 2, 0.9)
    assert torch.get_num_threads() == 1
    assert set(p.as_dict()) >= {"mode", "threads", "max_threads", "wait_policy", "switches"}


def test_fixed_and_inherited_settings_and_a_bad_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv(threads.ENV_VAR, "1")
    assert (threads.apply().mode, torch.get_num_threads()) == ("fixed", 1)
    monkeypatch.setattr(threads, "_POLICY", None)
    monkeypatch.setenv(threads.ENV_VAR, "inherit")
    assert threads.apply().mode == "inherit"
    monkeypatch.setattr(threads, "_POLICY", None)
    monkeypatch.setenv(threads.ENV_VAR, "many")
    with pytest.raises(ValueError, match="CASSPEC_THREADS='many': allowed are auto, inherit"):
        threads.apply()


def test_a_run_whose_load_changed_is_flagged() -> None:
    quiet = {"others_cores": 0.1, "cpus": 2, "loadavg_1m": 0.2}
    busy = {"others_cores": 1.0, "cpus": 2, "loadavg_1m": 1.5}
    assert threads.load_record(quiet, busy)["changed"] is True
    assert threads.load_record(quiet, dict(quiet, others_cores=0.5))["changed"] is False
    assert threads.load_record(None, busy) == {"start": None, "end": busy, "changed": None}


def test_watch_sees_every_forward_of_a_speculative_decode(monkeypatch: pytest.MonkeyPatch) -> None:
    """The prompt, verify and draft forwards of the speculative loop reach the monitor, each
    with its kind: every call of the model is observed, in order, and none is missed."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(threads.ENV_VAR, raising=False)
    monkeypatch.setattr(threads, "sample_load", lambda: Load(2, 0.0, 0.1))
    seen: list[tuple[int, str]] = []

    class Recording(Monitor):
        def observe(self, key: Hashable, seconds: float) -> int | None:
            seen.append(key)  # type: ignore[arg-type]
            return super().observe(key, seconds)

    monkeypatch.setattr(threads, "Monitor", Recording)
    model = random_init_(Transformer(tiny_llama(vocab_size=32, max_seq_len=64)).double(), seed=1)
    want = generate_ar(model, PROMPT, 12).tokens  # before the watch: not observed
    threads.watch(model)
    called: list[tuple[int, str]] = []
    inner = model.forward  # every forward, however it is called, passes through here

    def counting(*args: Any, **kwargs: Any) -> torch.Tensor:
        called.append(threads.forward_kind(args, kwargs))
        return inner(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    exit_early = ExecutionPlan(exit_after=1, name="exit")
    got = generate_speculative(model, PROMPT, 12, method="chain", drafts=(exit_early,))
    assert got.tokens == want
    assert seen == called
    assert seen[0] == (len(PROMPT), "target")  # the prompt's forward
    verify = [rows for rows, name in seen[1:] if name == "target"]
    drafts = [rows for rows, name in seen if name == "exit"]
    assert len(verify) == got.stats["steps"] and max(verify) > 1  # one per step, with drafts
    assert len(drafts) == got.stats["draft_forwards"] > 0
    threads.watch(model)  # installed once: a second call adds no hooks
    generate_ar(model, PROMPT, 2)
    assert seen == called


def test_the_switched_rows_are_the_checked_rows_and_hold_the_largest_tree() -> None:
    """Every forward that follows a switched count was checked at each count: every row count
    up to `PROMPT_ROWS` in the body's product check; up to `SWITCHED_ROWS` in the LM head's
    check, which only a forward computing every row's logits applies to more than one row;
    DyTC's largest tree is no larger (else its verify would run on every thread). Attention
    is one call per token whatever the row count (`invariance.attention_threads_agree`)."""
    from casspec_ref.accel import invariance
    from casspec_ref.dytc_config import DyTCConfig

    assert invariance.FULL_ROWS == threads.PROMPT_ROWS
    assert invariance.HEAD_ROWS == threads.SWITCHED_ROWS
    assert DyTCConfig().max_tree_size <= threads.SWITCHED_ROWS <= threads.PROMPT_ROWS


@pytest.mark.parametrize("method", ["ar", "chain"])
def test_a_switching_policy_sends_the_prompt_in_checked_pieces(
    monkeypatch: pytest.MonkeyPatch, method: str
) -> None:
    """While the count may switch, the prompt goes in pieces of at most `PROMPT_ROWS` rows
    (here 3, so that an 8-token prompt splits 3 + 3 + 2), in order, and the tokens are the
    one-forward prompt's."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(threads.ENV_VAR, raising=False)
    monkeypatch.setattr(threads, "sample_load", lambda: Load(2, 0.0, 0.1))
    monkeypatch.setattr(threads, "read_cpu_times", lambda: None)
    monkeypatch.setattr(threads, "PROMPT_ROWS", 3)
    model = random_init_(Transformer(tiny_llama(vocab_size=32, max_seq_len=64)).double(), seed=2)
    exit_early = ExecutionPlan(exit_after=1, name="exit")

    def decode() -> list[int]:
        if method == "ar":
            return generate_ar(model, PROMPT, 10).tokens
        return generate_speculative(model, PROMPT, 10, method="chain", drafts=(exit_early,)).tokens

    want = decode()
    threads.apply().switching = True  # as `allow_switching` leaves it after a passed check
    threads.watch(model)
    assert model.prompt_rows == 3
    rows: list[int] = []
    inner = model.forward

    def counting(*args: Any, **kwargs: Any) -> torch.Tensor:
        if threads.forward_kind(args, kwargs)[1] == "target":
            rows.append(threads.forward_kind(args, kwargs)[0])
        return inner(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    assert decode() == want
    assert rows[:3] == [3, 3, 2]  # the prompt; then one row a step, or a verified tree
    assert rows[3:] and (method != "ar" or set(rows[3:]) == {1})


def test_a_policy_that_holds_its_count_sends_the_prompt_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv(threads.ENV_VAR, "1")
    model = Transformer(tiny_llama(vocab_size=32, max_seq_len=64))
    threads.watch(model)
    assert model.prompt_rows is None


def test_unwatch_removes_the_hooks_and_the_prompt_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """`unwatch` leaves the model as it was before `watch` (the baseline of the busy-machine
    benchmark's paired quiet cost): no forward reaches a monitor, the prompt goes whole, and a
    second `watch` installs the hooks again."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(threads.ENV_VAR, raising=False)
    monkeypatch.setattr(threads, "sample_load", lambda: Load(2, 0.0, 0.1))
    seen: list[Hashable] = []

    class Recording(Monitor):
        def observe(self, key: Hashable, seconds: float) -> int | None:
            seen.append(key)
            return super().observe(key, seconds)

    monkeypatch.setattr(threads, "Monitor", Recording)
    model = random_init_(Transformer(tiny_llama(vocab_size=32, max_seq_len=64)).double(), seed=3)
    threads.apply().switching = True
    threads.watch(model)
    assert model.prompt_rows == threads.PROMPT_ROWS
    generate_ar(model, PROMPT, 3)
    assert len(seen) == 3  # the prompt and two steps
    threads.unwatch(model)
    assert model.prompt_rows is None and not model._forward_hooks and not model._forward_pre_hooks
    generate_ar(model, PROMPT, 3)
    assert len(seen) == 3
    threads.watch(model)
    generate_ar(model, PROMPT, 3)
    assert len(seen) == 6 and model.prompt_rows == threads.PROMPT_ROWS
