"""docs/results.md is exactly what the generator makes of the committed records in docs/bench/."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

import pytest

import casspec_ref
from casspec_ref.tools import results

ROOT = Path(casspec_ref.__file__).parent.parent
RECORDS = ROOT / "docs" / "bench"


@pytest.fixture(scope="module")
def records() -> dict:
    return results.load_records(RECORDS)


def test_the_committed_page_is_what_the_committed_records_give(records: dict) -> None:
    page = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    assert page == results.render(records), "docs/results.md is stale: run `make results`"


def test_every_record_is_on_the_page_with_its_command_commit_and_machine(records: dict) -> None:
    page = results.render(records)
    assert {"cpu_heldout_greedy", "cpu_bundled_greedy", "cpu_heldout_sampling"} <= set(records)
    for name, record in records.items():
        env = record.get("environment", {})
        missing = {"command", "machine", "git_commit"} - {k for k, v in env.items() if v}
        assert not missing, (
            f"docs/bench/{name}.json: its environment lacks {sorted(missing)} "
            "(casspec_ref.tools.bench.environment(device, dtype, command) writes them)"
        )
        section = page.split(f"[`docs/bench/{name}.json`]", 1)[1].split("\n## ", 1)[0]
        assert f"Command: `{env['command']}`" in section, name
        assert env["git_commit"] in section and env["machine"] in section, name


def test_every_method_of_a_bench_record_is_shown(records: dict) -> None:
    """A method the generator has never heard of gets its rows."""
    record = copy.deepcopy(records["cpu_heldout_greedy"])
    added = [
        {**r, "method": "made-up:method", "speedup": 1.2345678}
        for r in record["records"]
        if r["method"] == "cas-spec"
    ]
    record["records"] += added
    page = results.render({"cpu_heldout_greedy": record})
    overall = [line for line in page.splitlines() if line.startswith("| `made-up:method` | ")]
    assert len(overall) == 2  # the overall table and the per-group table
    assert overall[0].split(" | ")[1] == added[0].get("base", "ar")  # ar where none is named
    assert overall[0].split(" | ")[2].startswith("1.235 ")
    assert overall[1].count("1.235 (") == len(added) - 1  # every group, "overall" excluded


def test_a_record_of_unknown_shape_appears_with_its_figures(records: dict) -> None:
    busy = {
        "environment": {"command": "python benchmarks/x.py", "machine": "m", "git_commit": "abc"},
        "threads": {"2": {"tokens_per_s": 12.5}},
    }
    page = results.render({**records, "busy_machine": busy})
    assert "## A busy machine" in page and "| `threads.2.tokens_per_s` | 12.5000 |" in page
    assert page.index("## A busy machine") > page.index("## DSIA drafts")


def _busy_rate(method: str, condition: str, rate: float, over: float | None) -> dict:
    return {
        "setting": "policy",
        "method": method,
        "condition": condition,
        "tokens_per_s": rate,
        "repeats": 2,
        "over_quiet": over,
        "switched_cells": 0 if condition == "quiet" else 2,
        "switching": True,
    }


def _busy_cell(repeat: int, condition: str, others: float, error: str | None) -> dict:
    return {
        "repeat": repeat,
        "setting": "policy",
        "method": "ar",
        "condition": condition,
        "most_others_seen": others,
        "switching_note": "checked at 1 and 2 threads",
        "error": error,
    }


BUSY: dict[str, Any] = {
    "benchmark": "busy_machine",
    "settings": {"max_new_tokens": 128, "repeats": 2, "mid_run_fraction": 0.25},
    "environment": {
        "command": "python benchmarks/busy_machine.py",
        "machine": "m",
        "git_commit": "a",
    },
    "cells": [
        _busy_cell(0, "competitor-mid", 1.02, None),
        _busy_cell(1, "competitor-mid", 0.97, "timed out after 600.0 s"),
    ],
    "rates": [
        _busy_rate("ar", "quiet", 20.0, None),
        _busy_rate("ar", "competitor-mid", 15.0, 0.75),
        _busy_rate("cas-spec", "quiet", 24.0, None),
        _busy_rate("cas-spec", "competitor-mid", 16.5, 0.6875),
    ],
    "speedups": [
        {"setting": "policy", "condition": "quiet", "speedup": 1.2, "over_quiet_speedup": 1.0},
        {
            "setting": "policy",
            "condition": "competitor-mid",
            "speedup": 1.1,
            "over_quiet_speedup": 0.9167,
        },
    ],
    "quiet_cost": [
        {
            "method": "ar",
            "policy_over_inherited": 0.99,
            "policy_over_one_thread": 1.5,
            "inherited_over_one_thread": 1.51,
        }
    ],
    "reference": {"setting": "policy", "repeat": 0, "tokens": [1, 2, 3]},
    "differences": [
        {
            "repeat": 1,
            "setting": "inherited",
            "method": "cas-spec",
            "condition": "decoder",
            "first_difference": 7,
            "tokens": [1, 2],
        }
    ],
}


def test_the_busy_machine_targets_are_judged_from_the_record(records: dict) -> None:
    """Each target beside its figure: met, missed (below a floor, outside the speedup's band
    on either side), and left out where the record has no figure for it."""
    busy = copy.deepcopy(BUSY)
    busy["rates"] += [
        _busy_rate("ar", "competitor", 11.0, 0.55),
        _busy_rate("cas-spec", "competitor", 10.0, 0.4999),
    ]
    busy["speedups"].append(
        {"setting": "policy", "condition": "competitor", "speedup": 1.3, "over_quiet_speedup": 1.11}
    )
    section = results.render({**records, "busy_machine": busy}).split("## A busy machine", 1)[1]
    assert "| `ar` beside a competitor, over quiet | >= 0.5 | 0.550 | yes |" in section
    assert "| `cas-spec` beside a competitor, over quiet | >= 0.5 | 0.500 | no |" in section
    assert "| `ar` quiet, `policy` over `inherited` | >= 0.97 | 0.990 | yes |" in section
    assert "`cas-spec` quiet" not in section  # no quiet cost recorded for it
    band = "| speedup beside a competitor, over the quiet speedup | 0.9 to 1.1 |"
    assert f"{band} 1.110 | no |" in section
    busy["speedups"][-1]["over_quiet_speedup"] = 0.9
    section = results.render({**records, "busy_machine": busy}).split("## A busy machine", 1)[1]
    assert f"{band} 0.900 | yes |" in section
    busy["speedups"][-1]["over_quiet_speedup"] = 0.899
    busy["quiet_cost"][0]["policy_over_inherited"] = 0.969
    section = results.render({**records, "busy_machine": busy}).split("## A busy machine", 1)[1]
    assert f"{band} 0.899 | no |" in section
    assert "| `ar` quiet, `policy` over `inherited` | >= 0.97 | 0.969 | no |" in section
    busy["quiet_cost"][0]["policy_over_unwatched"] = 0.98  # a paired figure is judged first
    section = results.render({**records, "busy_machine": busy}).split("## A busy machine", 1)[1]
    paired = "| `ar` quiet, `policy` over its run-time part off (paired) | >= 0.97 | 0.980 | yes |"
    assert paired in section and "quiet, `policy` over `inherited` |" not in section
    busy["quiet_cost"][0]["policy_over_unwatched_interval"] = [0.955, 1.004]
    section = results.render({**records, "busy_machine": busy}).split("## A busy machine", 1)[1]
    assert "| `ar` | 0.969 | 1.500 | 1.510 | 0.980 [0.955, 1.004] |" in section  # its interval
    assert "policy / unwatched interval" not in section  # a bound, not a column of its own
    bare = {**BUSY, "quiet_cost": []}  # no figure for any target
    assert "The policy's targets:" not in results.render({**records, "busy_machine": bare})


def test_a_busy_machine_record_is_shown_by_condition_and_setting(records: dict) -> None:
    page = results.render({**records, "busy_machine": BUSY})
    section = page.split("## A busy machine", 1)[1].split("\n## ", 1)[0]
    assert "| setting | method | quiet | competitor-mid |" in section
    assert "| `policy` | `ar` | 20.0 | 15.0 (0.750) |" in section
    assert "| `policy` | 1.200 | 1.100 (0.917) |" in section  # CAS-Spec over the naive loop
    assert (
        "| method | policy / inherited | policy / one thread | inherited / one thread |" in section
    )
    assert "| `ar` | 0.990 | 1.500 | 1.510 |" in section
    assert "| `ar` | `competitor-mid` | yes | 2 of 2 | 1.02 |" in section  # the most seen
    assert "Switching: checked at 1 and 2 threads." in section
    assert "differ from the quiet naive loop's: 1." in section
    assert "repeat 1, `inherited`, `cas-spec`, `decoder`: first at token 7" in section
    assert "Failed cells: 1." in section and "timed out after 600.0 s" in section
    assert "`rates[0]" not in section  # not the generic list of scalars
    quiet = {**BUSY, "differences": [], "cells": BUSY["cells"][:1]}
    section = results.render({"busy_machine": quiet}).split("## A busy machine", 1)[1]
    assert "Every generation equals the quiet naive loop's token for token." in section
    assert "Failed cells" not in section


def test_the_paired_decodes_say_whether_they_did_the_same_work(records: dict) -> None:
    """Per method: the pairs pooled over the repeats, whether every decode replayed its recorded
    decode's work (a row without the flag is "not recorded", a failed child is left out) and
    the count's switches during them."""

    def row(method: str, ratios: list[float] | None, same: bool | None, switches: int) -> dict:
        flag = {} if same is None else {"same_work": same}
        return {"method": method, "pair_ratios": ratios, "switches_in_pairs": switches, **flag}

    paired = [
        row("ar", [1.0, 0.99], True, 0),
        row("cas-spec", [1.01, 0.97, 1.02], True, 1),
        row("ar", [0.98], True, 0),
        row("cas-spec", [0.99], False, 0),
        row("cas-spec", None, None, 0),  # a failed child
    ]
    page = results.render({**records, "busy_machine": {**BUSY, "paired": paired}})
    section = page.split("## A busy machine", 1)[1].split("\n## ", 1)[0]
    assert "| method | pairs | same work in every decode | switches during the pairs |" in section
    assert "| `ar` | 3 | yes | 0 |" in section
    assert "| `cas-spec` | 4 | no | 1 |" in section
    paired[0] = row("ar", [1.0, 0.99], None, 0)
    page = results.render({**records, "busy_machine": {**BUSY, "paired": paired}})
    assert "| `ar` | 3 | not recorded | 0 |" in page
    failed = [row("cas-spec", None, None, 0)]  # no pair to judge: neither yes nor no
    page = results.render({**records, "busy_machine": {**BUSY, "paired": failed}})
    assert "| `cas-spec` | 0 | - | 0 |" in page
    assert "same work in every decode" not in results.render({**records, "busy_machine": BUSY})


def test_divergences_are_counted_and_shown(records: dict) -> None:
    record = copy.deepcopy(records["cpu_bundled_greedy"])
    record["divergences"] = [{"method": "pld:3", "question": 1, "turn": 0, "token": 10}]
    page = results.render({"x": record})
    assert "Divergences from the naive loop: 1." in page and '"token": 10' in page


def test_the_base_and_the_plain_loops_divergences_are_shown(records: dict) -> None:
    """A row says which naive loop its speedup is taken against; the plain loop's divergences
    from ``ar`` are a count apart, which leaves the other methods' verdict standing."""
    record = copy.deepcopy(records["cpu_bundled_greedy"])
    for r in record["records"]:
        if r["method"] == "pld:3":
            r["base"] = "ar-plain"
    record["plain_divergences"] = {
        "ar-plain": {
            "generations": 21,
            "differing": 2,
            "divergences": [
                {"method": "ar-plain", "question_id": 4, "turn": 0, "position": 17},
                {"method": "ar-plain", "question_id": 9, "turn": 1, "position": 60},
            ],
        },
        "cas-spec+plain": {"generations": 21, "differing": 0, "divergences": []},
    }
    page = results.render({"x": record})
    assert "| `pld:3` | ar-plain | " in page and "| `cas-spec` | ar | " in page
    assert (
        "ar-plain differs from ar in 2 of 21 generations, first differences at tokens 17, 60"
        in page
    )
    assert "Every output of the other methods equals the naive loop's token for token." in page
    assert "cas-spec+plain differs from ar in 0 of 21 generations (its kernels" in page


def test_check_mode_fails_on_a_stale_page_and_passes_on_a_fresh_one(tmp_path: Path) -> None:
    folder = tmp_path / "bench"
    folder.mkdir()
    (folder / "gpu_forward.json").write_text((RECORDS / "gpu_forward.json").read_text())
    page = tmp_path / "results.md"
    argv = ["--records", str(folder), "--out", str(page)]
    assert results.main([*argv, "--check"]) == 1  # no page yet
    assert results.main(argv) == 0
    assert results.main([*argv, "--check"]) == 0
    record = json.loads((folder / "gpu_forward.json").read_text())
    record["float32"]["ar_tok_s"] = 1.0
    (folder / "gpu_forward.json").write_text(json.dumps(record))
    assert results.main([*argv, "--check"]) == 1


def test_a_missing_or_broken_records_folder_is_a_clear_error(tmp_path: Path, capsys) -> None:
    assert results.main(["--records", str(tmp_path / "absent"), "--check"]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "bad.json").write_text("{")
    assert results.main(["--records", str(tmp_path), "--out", str(tmp_path / "p.md")]) == 2
    assert "cannot read the records" in capsys.readouterr().err


def test_numbers_print_fixed_and_missing_values_as_a_dash() -> None:
    assert results.num(1.23456) == "1.235" and results.num(2.5, 1) == "2.5"
    assert results.num(None) == "-" and results.num(float("nan")) == "-"
    assert results.num(True) == "yes" and results.num(7) == "7"


# Pages that send the reader to results.md for figures: a speed, a time, a ratio or an (alpha, c)
# value quoted on one of them would go stale when the records change.
DEFERRING_PAGES = (
    "README.md",
    "docs/index.md",
    "docs/benchmarks.md",
    "docs/dsia.md",
    "docs/smollm2.md",
    "docs/floating_point.md",
)
RUN_FIGURE = re.compile(
    r"\d\s*tok/s|\d\s*ms\b|\b\d+\.\d+x\b|\bspeedup (?:of )?\d|\b(?:alpha|c)\s*[=~]\s*0\.\d",
    re.IGNORECASE,
)


def run_figures(text: str) -> list[str]:
    return [m.group(0) for m in RUN_FIGURE.finditer(text)]


@pytest.mark.parametrize("page", DEFERRING_PAGES)
def test_pages_that_defer_to_results_quote_no_run_figure(page: str) -> None:
    assert run_figures((ROOT / page).read_text(encoding="utf-8")) == [], page


def test_the_run_figure_check_catches_quoted_figures() -> None:
    planted = "ar 33.3 tok/s; a forward 28.2 ms; cas-spec 1.15x; the int8 draft at c = 0.63"
    assert len(run_figures(planted)) == 4
    assert run_figures("torch 2.13.0, 18 questions, MAT 1.00 for the naive loop, top-p 0.9") == []


def test_the_exact_cost_record_is_shown_per_level_and_dtype() -> None:
    """Every level and dtype a row, both forms' figures side by side, the tiles the check chose,
    and each level the CPU lacked named."""
    row = {
        "level": "avx2",
        "capability": "AVX2",
        "dtype": "bfloat16",
        "forward_ms_T1": {"exact": 30.04, "plain": 25.0},
        "forward_ms_T16": {"exact": 61.0, "plain": 44.44},
        "naive_tok_s": {"exact": 20.5, "plain": 25.25},
        "exact_over_plain": 0.8119,
        "naive_same_tokens": False,
        "shape_invariance": [
            {"dtype": "bfloat16", "forms": {"1x2": "packed@4", "3x4": None, "5x6": "wxt@2"}},
            {"dtype": "float32", "forms": {"1x2": "linear@8"}},
        ],
    }
    record = {"benchmark": "exact_cost", "rows": [row], "levels_not_run": ["avx512: no avx512f"]}
    lines = results.section("cpu_exact_cost", record)
    text = "\n".join(lines)
    assert (
        "| avx2 (AVX2) | bfloat16 | 30.0 / 25.0 | 61.0 / 44.4 | 20.5 / 25.2 | 0.812 | no |" in text
    )
    assert "packed@4, row by row, wxt@2 |" in text and "linear@8" not in text
    assert "- not run: avx512: no avx512f" in text
    assert lines[0] == "## CPU, what exactness costs at each dispatch level"


def dispatch_row(level: str, dtype: str, **fields: Any) -> dict[str, Any]:
    """One row of a dispatch-kernels record (`benchmarks/dispatch_kernels.py`), ``fields`` set."""
    row: dict[str, Any] = {
        "level": level,
        "dtype": dtype,
        "capability": level.upper(),
        "onednn_max_cpu_isa": "AVX2",
        "mkl_enable_instructions": "",
        "threads": [1, 2],
        "silu_rows_differ": {"13": 327, "48": 0},
        "rowwise_silu_rows_differ": {"13": 0, "48": 0},
        "linear_prefixes_differ": {"q, o": 9, "head": 7},
        "tiles_pass": {"q, o": {"rows": True, "linear@2": True}, "head": {"linear@2": True}},
        "attention_threads_agree": dtype == "bfloat16",
    }
    return {**row, **fields}


def test_the_dispatch_kernels_record_is_shown_a_column_per_level() -> None:
    """Each count in its level's column, the failed tiles named with their weights, and a level
    the CPU lacked a column of its own whose every cell says it was not run."""
    failing = {"q, o": {"rows": False, "linear@2": True}, "head": {"linear@2": False}}
    record = {
        "benchmark": "dispatch_kernels",
        "levels_not_run": ["avx512: this CPU lacks avx512f"],
        "rows": [
            dispatch_row("avx2", "float32", tiles_pass=failing),
            dispatch_row("avx2", "bfloat16", silu_rows_differ={"13": 5, "48": 1}),
        ],
    }
    lines = results.section("cpu_dispatch_kernels", record)
    assert lines[0] == "## CPU, what each dispatch level does to the plain kernels"
    text = "\n".join(lines)
    header = "| what | avx2 (AVX2; oneDNN AVX2, MKL uncapped) | avx512: not run (this CPU lacks "
    assert header + "avx512f) |" in text
    assert "widths 13 / 48 | 327 / 0 | not run |" in text
    assert (
        "`silu`, bfloat16: rows of 1-40-row calls that differ from one-row calls, widths 13 / 48 "
        "| 5 / 1 |" in text
    )
    assert "weights q, o / head | 9 / 7 | not run |" in text
    assert "float32 (at 1 and 2 threads) | `rows` (q, o); `linear@2` (head) |" in text
    assert "bfloat16 (at 1 and 2 threads) | none of 2 (`linear@2`, `rows`) |" in text
    assert "float32 / bfloat16 | no / yes | not run |" in text


@pytest.mark.parametrize("stem", ["cpu_dispatch_kernels", "cpu_dispatch_kernels_avx512"])
def test_floating_point_shows_the_dispatch_table_of_each_kind_of_cpu(
    records: dict, stem: str
) -> None:
    """docs/floating_point.md's table per dispatch level is each record's, cell for cell."""
    page = (ROOT / "docs" / "floating_point.md").read_text(encoding="utf-8")
    body = results.dispatch_kernels_section(records[stem])
    assert "\n".join(body) in page, (
        "docs/floating_point.md's dispatch-level table differs from the one "
        f"docs/bench/{stem}.json gives:\n" + "\n".join(body)
    )


def test_a_second_kind_of_cpus_record_follows_its_namesake_with_the_kind_in_its_title() -> None:
    stems = ["gpu_forward", "cpu_exact_cost_avx512", "zzz_other", "cpu_exact_cost", "x_avx512"]
    assert sorted(stems, key=results._rank) == [
        "cpu_exact_cost",
        "cpu_exact_cost_avx512",
        "gpu_forward",
        "x_avx512",
        "zzz_other",
    ]
    base = results.TITLES["cpu_exact_cost"]
    assert results.title("cpu_exact_cost") == base
    assert results.title("cpu_exact_cost_avx512") == f"{base} (AVX-512 machine)"
    assert results.title("x_avx512") == "x avx512"  # no such benchmark: the stem, as written


def replay_record(**fields: Any) -> dict[str, Any]:
    """A DyTC replay record (`benchmarks/dytc_replay.py replay --json`), ``fields`` set."""
    record: dict[str, Any] = {
        "benchmark": "dytc_replay",
        "questions": "heldout",
        "answers": 2,
        "costs_measured": "2026-12-07",
        "overheads_s": {"draft": 0.001, "step": 0.003},
        "speedup": {"pld:3": 0.8, "cas-spec": 0.9},
        "best_fixed": "pld:3",
    }
    return {**record, **fields}


def test_the_dytc_replay_record_is_shown_per_variant() -> None:
    """Each DyTC variant a row with its recorded-order speedup and its spread over the orders;
    the best fixed schedule last; a fixed schedule is not listed as a variant."""
    record = replay_record(
        questions="prompts_heldout",
        answers=18,
        speedup={"pld:3": 1.1, "cas-spec": 1.2345, "cas-spec@margin_bins=0": 1.1111},
        orders={
            "cas-spec": {"median": 1.25, "min": 1.2, "max": 1.3, "n": 4},
            "cas-spec@margin_bins=0": {"median": 1.1, "min": 1.05, "max": 1.15, "n": 4},
        },
    )
    lines = results.section("cpu_dytc_replay", record)
    text = "\n".join(lines)
    assert lines[0] == "## CPU, DyTC's refinements replayed on recorded acceptances"
    assert "| `cas-spec` | 1.234 | 1.250 | 1.200-1.300 (4) |  |" in text
    assert "| `cas-spec@margin_bins=0` | 1.111 | 1.100 | 1.050-1.150 (4) | +13.6% |" in text
    assert text.index("`cas-spec@margin_bins=0`") < text.index("`pld:3` (best fixed)")
    assert "| `pld:3` |" not in text and "18 answers (prompts_heldout;" in text


def test_the_dytc_replay_record_shows_the_hindsight_bound_and_the_costs_replayed() -> None:
    """The bound is a row after the best fixed schedule, and the costs it stands on are printed
    beside it; a record without them shows neither."""
    record = replay_record(
        hindsight={"speedup": 1.3361, "steps": {"plain": 3, "pld": 1}},
        costs_ms={"verify": {"1": 53.61, "16": 222.9, "2": 78.9}, "draft": {"w8a8": 36.14}},
    )
    text = "\n".join(results.section("cpu_dytc_replay", record))
    assert "costs measured in the exact forms 2026-12-07;" in text  # a record of exact costs
    assert "| hindsight (knows the answer) | 1.336 |" in text
    assert text.index("(best fixed)") < text.index("hindsight (knows the answer)")
    assert "T=1 53.6, T=2 78.9, T=16 222.9" in text and "`w8a8` 36.1" in text
    del record["hindsight"]
    text = "\n".join(results.section("cpu_dytc_replay", record))
    assert "hindsight" not in text.lower() and "T=1" not in text


def test_the_dytc_replay_record_shows_each_presets_steps_by_kind() -> None:
    """A row per preset and kind of step, the most lost first, with what the naive loop takes
    for the same tokens and the signed difference; a record without the ledger shows none."""
    fields = ("steps", "tokens", "ms", "overhead_ms", "naive_ms")
    kinds = {
        "pld match 3+": dict(zip(fields, (9, 27, 933.0, 36.4, 1115.4), strict=True)),
        "pld match 1": dict(zip(fields, (15, 19, 1503.1, 60.2, 784.9), strict=True)),
    }
    record = replay_record(steps_by_kind={"cas-spec": kinds, "cas-spec:paper": {}})
    text = "\n".join(results.section("cpu_dytc_replay", record))
    assert "| `cas-spec` | `pld match 1` | 15 | 19 | 1503 | 60 | 785 | -718 |" in text
    assert "| `cas-spec` | `pld match 3+` | 9 | 27 | 933 | 36 | 1115 | +182 |" in text
    assert text.index("`pld match 1`") < text.index("`pld match 3+`")
    assert "`cas-spec:paper` |" not in text  # no steps: no row
    text = "\n".join(results.section("cpu_dytc_replay", replay_record()))
    assert "step drafted by" not in text and "Where each preset's time went" not in text


def test_a_replay_says_whether_its_overheads_were_measured_or_given() -> None:
    measured = replay_record(overheads_measured={"draft": True, "step": True})
    text = "\n".join(results.section("cpu_dytc_replay", measured))
    assert "overheads (measured with the costs): 1.000 ms per draft call, 3.000 ms per step" in text
    free = {"draft": 0.001, "step": 0.003, "lookup": 2.5e-5, "recycle": 4e-6}
    text = "\n".join(results.section("cpu_dytc_replay", replay_record(overheads_s=free)))
    assert "3.000 ms per step, 25.0 us per prompt lookup, 4.0 us per recycled-token walk" in text
    given = replay_record(overheads_measured={"draft": False, "step": False})
    assert "overheads (given): 1.000 ms" in "\n".join(results.section("cpu_dytc_replay", given))
    mixed = replay_record(overheads_measured={"draft": False, "step": True})
    text = "\n".join(results.section("cpu_dytc_replay", mixed))
    assert "overheads (draft given, step measured): 1.000 ms" in text
    assert "overheads: 1.000 ms" in "\n".join(results.section("cpu_dytc_replay", replay_record()))


def test_a_replay_on_plain_costs_says_so_and_names_the_command_that_measured_them() -> None:
    record = replay_record(
        costs_measured="2026-12-07 02:50 UTC",
        costs_forms="plain",
        costs_command="python benchmarks/dytc_replay.py recost a.json --plain --out b.json",
    )
    lines = results.section("cpu_dytc_replay_plain", record)
    assert lines[0] == "## CPU, DyTC replayed on the plain forms' costs"
    assert (
        "costs measured in the plain forms 2026-12-07 02:50 UTC by "
        "`python benchmarks/dytc_replay.py recost a.json --plain --out b.json`;" in "\n".join(lines)
    )


# docs/design.md gives each DyTC refinement's replayed worth beside its reason, in one phrase:
# "Replayed (`SWITCH`...): E% (exact) and P% (plain) in the default[; the paper's policy with it
# alone E% (exact) and P% (plain)]". Each figure must be the one the replay records give.
REPLAYED = re.compile(
    r"Replayed \(`(\w+)`[^)]*\): ([+-]\d+\.\d%) \(exact\) and ([+-]\d+\.\d%) \(plain\) in the "
    r"default(?:; the paper's policy with it alone ([+-]\d+\.\d%) \(exact\) and "
    r"([+-]\d+\.\d%) \(plain\))?"
)
REPLAY_RECORDS = {"exact": "cpu_dytc_replay", "plain": "cpu_dytc_replay_plain"}


def replayed_effects(record: dict[str, Any]) -> dict[tuple[str, str], str]:
    """(preset, switch) -> the refinement's effect as results.md prints it."""
    median = {name: o["median"] for name, o in record["orders"].items()}
    effects = {}
    for name in median:
        effect = results._refinement_effect(name, median)
        if effect:
            preset, _, change = name.partition("@")
            effects[(preset, change.partition("=")[0])] = effect
    return effects


def quoted_replay_effects(text: str) -> dict[str, tuple[str | None, ...]]:
    """Per switch, the figures docs/design.md quotes (exact, plain; the paper's exact, plain)."""
    flat = " ".join(text.split())
    return {m.group(1): m.groups()[1:] for m in REPLAYED.finditer(flat)}


def test_design_quotes_each_refinements_replayed_effect_as_the_records_give_it(
    records: dict,
) -> None:
    from casspec_ref.dytc_config import REFINEMENTS

    design = " ".join((ROOT / "docs" / "design.md").read_text(encoding="utf-8").split())
    quoted = quoted_replay_effects(design)
    assert set(quoted) == {"window", *REFINEMENTS}, "a switch without its replayed effect"
    effects = {forms: replayed_effects(records[name]) for forms, name in REPLAY_RECORDS.items()}
    for switch, (exact, plain, paper_exact, paper_plain) in quoted.items():
        want = (effects["exact"][("cas-spec", switch)], effects["plain"][("cas-spec", switch)])
        assert (exact, plain) == want, f"{switch}: design.md quotes {exact}, {plain}"
        if paper_exact is not None:
            want = tuple(effects[f][("cas-spec:paper", switch)] for f in ("exact", "plain"))
            assert (paper_exact, paper_plain) == want, f"{switch}: the paper's policy with it"
    # The section's opening names the switches that pay (each must pay on some costs), then
    # gives the others' reach.
    opening = re.search(
        r"There the (.*?)every other switch, .*? at most (\d+\.\d)% either way", design
    )
    assert opening, "the opening sentence on what the switches are worth"
    named = set(re.findall(r"`(\w+)`", opening.group(1)))
    assert named and named <= set(quoted), f"the opening names {named}"
    for switch in named:
        gains = [float(effects[forms][("cas-spec", switch)].rstrip("%")) for forms in effects]
        assert max(gains) > 0, f"the opening says `{switch}` pays; the records give {gains}"
    others = [
        abs(float(effects[forms][("cas-spec", s)].rstrip("%")))
        for s in quoted
        if s not in named
        for forms in effects
    ]
    assert opening.group(2) == f"{max(others):.1f}", (
        f"the opening's reach of the other switches: the records give {max(others):.1f}%"
    )


def test_the_replayed_effects_check_reads_every_form_of_the_phrase() -> None:
    text = (
        "Replayed (`window`, 40 against 20): -0.2% (exact) and -0.5% (plain) in the\n  default; "
        "the paper's policy with it alone -15.5% (exact) and +2.6% (plain). Replayed "
        "(`cost_table`): +16.5% (exact) and +5.8% (plain) in the default."
    )
    assert quoted_replay_effects(text) == {
        "window": ("-0.2%", "-0.5%", "-15.5%", "+2.6%"),
        "cost_table": ("+16.5%", "+5.8%", None, None),
    }
