"""benchmarks/busy_machine.py's bookkeeping, on made-up cells: nothing here runs or times a decode.

The order of a repeat's cells, the comparison of every generation with the quiet naive loop's,
and the figures of the record (medians, ratios within a repeat, the quiet cost) are checked
exactly; the processes the script starts are not run (a competitor's end is checked with a
stand-in process).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from script_support import load_script

import casspec_ref

SCRIPT = Path(casspec_ref.__file__).parent.parent / "benchmarks" / "busy_machine.py"


@pytest.fixture(scope="module")
def busy() -> ModuleType:
    return load_script(SCRIPT)


def cell(busy: ModuleType, key: tuple[int, str, str, str], rate: float | None, **t: Any) -> dict:
    child: dict[str, Any] = {"tokens_per_s": rate, "seconds": None if rate is None else 8 / rate}
    child["threads"] = {"switching": t.get("switching", False), "threads": 2}
    child["switches_in_decode"] = t.get("switches", 0)
    child["tokens"] = None if rate is None else [1] * 8
    return busy.cell_record(key, child if rate is not None else {"error": "failed"}, None)


def test_a_repeat_runs_quiet_first_and_one_thread_only_quiet(busy: ModuleType) -> None:
    cells = busy.plan(["policy", "one-thread"], ["ar", "cas-spec"], ["competitor-mid", "quiet"])
    assert cells == [
        ("policy", "ar", "quiet"),
        ("policy", "cas-spec", "quiet"),
        ("one-thread", "ar", "quiet"),
        ("one-thread", "cas-spec", "quiet"),
        ("policy", "ar", "competitor-mid"),
        ("policy", "cas-spec", "competitor-mid"),
    ]


def test_torchs_defaults_beside_a_load_run_only_in_the_slow_repeats(busy: ModuleType) -> None:
    settings, conditions = ["policy", "inherited"], ["quiet", "competitor"]
    slow = busy.plan(settings, ["ar"], conditions, slow=True)
    assert ("inherited", "ar", "competitor") in slow and len(slow) == 4
    fast = busy.plan(settings, ["ar"], conditions, slow=False)
    assert fast == [
        ("policy", "ar", "quiet"),
        ("inherited", "ar", "quiet"),
        ("policy", "ar", "competitor"),
    ]


def test_a_cell_decodes_once_more_only_while_under_its_budget(busy: ModuleType) -> None:
    """The first decode always runs; the next ones only while the cell's seconds so far (the
    ones given, and each decode's own) are under the budget."""
    calls: list[int] = []

    def decode() -> list[int]:
        calls.append(1)
        return [len(calls)]

    assert [t for _, t in busy.decodes(decode, 3, [], 1e9)] == [[1], [2], [3]]
    assert [t for _, t in busy.decodes(decode, 3, [5.0], 1.0)] == [[4]]  # over budget already
    spent: list[float] = []
    assert len(busy.decodes(decode, 1, spent, 1e9)) == 1 and len(spent) == 1


def test_every_generation_is_compared_with_the_quiet_naive_loops(busy: ModuleType) -> None:
    keys = [
        (0, "inherited", "ar", "quiet"),
        (1, "policy", "ar", "quiet"),
        (0, "policy", "ar", "quiet"),
        (0, "policy", "cas-spec", "decoder"),
        (0, "policy", "hf", "quiet"),
        (0, "inherited", "cas-spec", "quiet"),
    ]
    cells = [cell(busy, k, 10.0) for k in keys]
    cells[5] = cell(busy, keys[5], None)  # a failed cell is not compared
    tokens = [[1, 2, 3], [1, 2, 3], [1, 2, 3], [1, 2, 4], [1, 2], None]
    reference, differences = busy.compare_tokens(cells, tokens, ["policy", "inherited"])
    assert reference == {"setting": "policy", "repeat": 0, "tokens": [1, 2, 3]}
    assert [c["equal_to_quiet_ar"] for c in cells] == [True, True, True, False, False, None]
    assert [c["first_difference"] for c in cells] == [None, None, None, 2, 2, None]
    assert [(d["method"], d["tokens"]) for d in differences] == [
        ("cas-spec", [1, 2, 4]),
        ("hf", [1, 2]),
    ]
    assert busy.compare_tokens(cells[3:4], tokens[3:4], ["policy"]) == (None, [])
    cells[1]["runs_equal"] = False  # one of its timed decodes gave other tokens
    _, differences = busy.compare_tokens(cells, tokens, ["policy", "inherited"])
    assert cells[1]["equal_to_quiet_ar"] is False and cells[1]["first_difference"] is None
    assert [d["repeat"] for d in differences if d["method"] == "ar"] == [1]


def test_the_figures_are_medians_of_ratios_within_a_repeat(busy: ModuleType) -> None:
    rates = {  # (setting, method, condition): tokens per second in repeats 0, 1, 2
        ("policy", "ar", "quiet"): (20.0, 10.0, 30.0),
        ("policy", "cas-spec", "quiet"): (30.0, 12.0, None),
        ("policy", "ar", "competitor"): (10.0, 8.0, 15.0),
        ("policy", "cas-spec", "competitor"): (20.0, 4.0, 30.0),
        ("inherited", "ar", "quiet"): (25.0, 10.0, 20.0),
        ("one-thread", "ar", "quiet"): (10.0, 5.0, 20.0),
    }
    cells = [
        cell(busy, (rep, *key), by_repeat[rep], switching=True, switches=int(key[2] != "quiet"))
        for rep in range(3)
        for key, by_repeat in rates.items()
    ]
    out = busy.summarize(cells, repeats=3)
    row = {(r["setting"], r["method"], r["condition"]): r for r in out["rates"]}
    assert row["policy", "ar", "quiet"]["tokens_per_s"] == 20.0
    assert row["policy", "ar", "quiet"]["over_quiet"] is None
    assert row["policy", "ar", "competitor"]["over_quiet"] == 0.5  # of 0.5, 0.8, 0.5
    assert row["policy", "cas-spec", "quiet"]["repeats"] == 2  # one cell failed
    assert row["policy", "cas-spec", "competitor"]["switched_cells"] == 3
    assert row["policy", "cas-spec", "competitor"]["switching"] is True
    speedup = {r["condition"]: r for r in out["speedups"] if r["setting"] == "policy"}
    assert speedup["quiet"]["speedup"] == 1.35  # of 1.5, 1.2 (repeat 2 failed)
    assert speedup["competitor"]["speedup"] == 2.0  # of 2.0, 0.5, 2.0
    # Over the quiet speedup within each repeat: 2.0 / 1.5, 0.5 / 1.2 (repeat 2: no quiet).
    assert speedup["competitor"]["over_quiet_speedup"] == round((4 / 3 + 5 / 12) / 2, 4)
    cost = {c["method"]: c for c in out["quiet_cost"]}
    assert cost["ar"] == {
        "method": "ar",
        "policy_over_inherited": 1.0,  # of 0.8, 1.0, 1.5
        "policy_over_one_thread": 2.0,  # of 2.0, 2.0, 1.5
        "inherited_over_one_thread": 2.0,  # of 2.5, 2.0, 1.0
        "policy_over_unwatched": None,  # no paired measurement
        "policy_over_unwatched_interval": None,
    }
    assert cost["cas-spec"]["policy_over_inherited"] is None  # no inherited cell to compare
    paired = [
        {"method": "ar", "ratio": r} for r in (0.99, 0.97, None, 1.02)
    ]  # None: a failed child
    cost = {c["method"]: c for c in busy.summarize(cells, 3, paired)["quiet_cost"]}
    assert cost["ar"]["policy_over_unwatched"] == 0.99  # median of 0.99, 0.97, 1.02
    assert cost["cas-spec"]["policy_over_unwatched"] is None
    # Every repeat's pairs are pooled (not the median of the repeats' medians, 0.98 here).
    paired = [
        {"method": "cas-spec", "ratio": 0.96, "pair_ratios": [0.95, 0.96, 1.04]},
        {"method": "cas-spec", "ratio": 1.0, "pair_ratios": [0.99, 1.0, 1.01]},
    ]
    cost = {c["method"]: c for c in busy.summarize(cells, 3, paired)["quiet_cost"]}
    assert cost["cas-spec"]["policy_over_unwatched"] == 0.995  # of the six
    low, high = cost["cas-spec"]["policy_over_unwatched_interval"]
    assert 0.95 <= low <= 0.995 <= high <= 1.04 and low < high


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--conditions", "quiet,storm"], "--conditions=quiet,storm: allowed are quiet, "),
        (["--conditions", "competitor"], "must include quiet"),
        (["--methods", "ar,beam"], "--methods=ar,beam: allowed are ar, cas-spec, hf"),
        (["--repeats", "0"], "must be >= 1"),
        (["--mid-run-fraction", "1.5"], "must be in [0, 1)"),
        (["--timed-runs", "0"], "--timed-runs must be >= 1"),
        (["--pairs", "-1"], "--pairs and --inherited-repeats must be >= 0"),
        (["--cell-budget-s", "0"], "--cell-budget-s > 0"),
    ],
)
def test_bad_arguments_say_what_is_allowed(
    busy: ModuleType, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        busy.parse_args(argv)
    assert message in capsys.readouterr().err


def test_the_defaults_measure_long_decodes_under_every_condition(busy: ModuleType) -> None:
    args = busy.parse_args([])
    assert (args.max_new_tokens, args.repeats) == (128, 3)
    assert args.conditions == ["quiet", "competitor", "decoder", "competitor-mid"]
    assert args.settings == ["policy", "inherited", "one-thread"]
    assert (args.warmups, args.timed_runs, args.pairs, args.inherited_repeats) == (2, 3, 16, 1)


def test_a_mid_run_cell_says_whether_its_competitor_met_the_decode(busy: ModuleType) -> None:
    key = (0, "policy", "ar", "competitor-mid")
    child = {"tokens_per_s": 4.0, "seconds": 2.0, "tokens": [1] * 8}
    assert busy.cell_record(key, child, 0.5)["competitor_in_decode"] is True
    assert busy.cell_record(key, child, 2.5)["competitor_in_decode"] is False  # after its end
    assert busy.cell_record(key, {"error": "failed"}, 0.5)["competitor_in_decode"] is None
    assert busy.cell_record(key[:3] + ("quiet",), child, None)["competitor_in_decode"] is None


@pytest.mark.parametrize("condition", ["competitor", "decoder", "competitor-mid"])
def test_a_cell_whose_competitor_ended_before_it_is_recorded_as_failed(
    busy: ModuleType, monkeypatch: pytest.MonkeyPatch, condition: str
) -> None:
    """Beside a competitor that outlived the cell the child's record stands; beside one that
    had ended (a load that outlasted its life) the cell did not measure its condition."""
    args = busy.parse_args([])
    good = {"tokens_per_s": 5.0, "seconds": 1.0, "tokens": [1, 2]}
    monkeypatch.setattr(busy.time, "sleep", lambda s: None)

    def cell(cmd: list[str], setting: str, args: Any, on_timed: Any) -> dict[str, Any]:
        if on_timed is not None:
            on_timed()
        return dict(good)

    monkeypatch.setattr(busy, "run_cell_process", cell)
    for code, kept in (("import time; time.sleep(60)", True), ("pass", False)):

        def start(kind: str, setting: str, seconds: float, code: str = code) -> None:
            # a process group of its own, as the script's competitors: the script stops the group
            proc = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
            busy._LIVE.append(proc)
            if code == "pass":
                proc.wait()  # ended before the cell did

        monkeypatch.setattr(busy, "start_competitor", start)
        record, _ = busy.measure("ar", "policy", condition, args, 2.0)
        assert (record == good) is kept
        assert kept or "competitor ended" in record["error"]
        assert not busy._LIVE  # stopped with the cell


def test_every_paired_decode_repeats_the_recorded_decodes_work(
    busy: ModuleType, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The paired decodes time the same work with the policy's run-time part on and off: a
    stand-in DyTC state counts the decodes it learned from; the warm-ups carry it on, and each
    timed decode gets its own copy of where they left it and is given the clock readings the
    recorded decode read (a stand-in decode reads the clock as often as its state says)."""
    from casspec_ref.accel import threads

    class Learned:
        decodes = 0

    seen: list[tuple[int, list[float] | None]] = []

    def runner(method: str, model: Any, dytc: Any = None, clock: Any = None) -> Any:
        def decode(prompt: list[int], n: int) -> list[int]:
            readings = None if clock is None else [clock() for _ in range(dytc.decodes + 1)]
            seen.append((dytc.decodes, readings))
            dytc.decodes += 1
            return [7] * n

        return decode

    monkeypatch.setattr(busy, "_load", lambda: (object(), [1, 2]))
    monkeypatch.setattr(busy, "_dytc", lambda method, model: Learned())
    monkeypatch.setattr(busy, "_runner", runner)
    monkeypatch.setattr(threads, "watch", lambda model: None)
    monkeypatch.setattr(threads, "unwatch", lambda model: None)
    monkeypatch.setattr(threads, "apply", lambda: threads.Policy("inherit", 1, 1, "default"))
    args = busy.parse_args(["--paired", "cas-spec", "--pairs", "3", "--max-new-tokens", "4"])
    assert busy.run_paired(args) == 0
    record = json.loads(capsys.readouterr().out)
    # two warm-ups learn; the recorded decode and six timed ones start where they left it
    assert [learned for learned, _ in seen] == [0, 1] + [2] * 7
    recorded = seen[2][1]
    assert recorded is not None and len(recorded) == 3
    assert all(readings == recorded for _, readings in seen[3:])
    assert record["same_work"] is True
    assert len(record["pair_ratios"]) == 3 and record["runs_equal"]
    assert record["switches_in_pairs"] == 0
    assert record["ratio"] == pytest.approx(statistics.median(record["pair_ratios"]), abs=1e-4)


def test_a_replayed_clock_says_when_a_decode_did_other_work(busy: ModuleType) -> None:
    recorded = busy.RecordedClock()
    readings = [recorded() for _ in range(3)]
    assert readings == recorded.readings and readings == sorted(readings)
    fewer = busy.ReplayedClock(recorded.readings)
    assert [fewer(), fewer()] == readings[:2] and not fewer.done
    more = busy.ReplayedClock(recorded.readings)
    assert [more() for _ in range(3)] == readings and more.done
    with pytest.raises(RuntimeError, match="more than the 3 clock readings"):
        more()
