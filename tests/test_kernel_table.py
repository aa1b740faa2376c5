"""The per-machine kernel table's measuring side: the choice rules, the cache, `prepare`.

Nothing here times anything: tables are built by hand or from synthetic costs, and the
measuring function is replaced where `prepare` would call it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from casspec_ref.accel import kernel_table
from casspec_ref.accel.kernel_table import MeasuredTable
from casspec_ref.base import kernels
from casspec_ref.base.kernels import Form, KernelTable


@pytest.fixture(autouse=True)
def restore_table() -> Iterator[None]:
    previous = kernels.use_table(None)
    yield
    kernels.use_table(previous)


def test_bad_settings_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(kernel_table.ENV_VAR, "fastest")
    with pytest.raises(ValueError, match="CASSPEC_KERNELS='fastest'"):
        kernel_table.kernel_mode()
    with pytest.raises(ValueError, match="max_rows"):
        kernel_table.calibrate([(4, 4)], max_rows=17)
    with pytest.raises(ValueError, match="classes must be among"):
        kernel_table.calibrate([(4, 4)], classes=(64,))
    with pytest.raises(ValueError, match="repeats"):
        kernel_table.calibrate([(4, 4)], repeats=0)
    with pytest.raises(ValueError, match="margin"):
        kernel_table.calibrate([(4, 4)], margin=1.0)


def test_calibration_times_every_row_count_and_each_class_of_larger_ones() -> None:
    # A real (tiny) measurement: what is timed and kept, not which form wins (noise decides).
    table = kernel_table.calibrate([(8, 8)], max_rows=2, classes=(32,), repeats=1, stream_bytes=0)
    rows = sorted(r for _, _, _, r in table.forms)
    assert rows == [1, 2, 32]
    names = {str(f) for f in kernels.base_forms(torch.float32)}
    assert set(table.timings_us[(8, 8, torch.float32, 32)]) == names  # base forms, no padding
    assert table.forms[(8, 8, torch.float32, 32)].pad_to == 0
    # The class entry is what 17..32 rows read; 33 rows read the class up to 128, which this
    # table lacks: the default form.
    kernels.use_table(KernelTable({(8, 8, torch.float32, 32): Form("wxt")}))
    assert [kernels.active_table().form_for(8, 8, torch.float32, r) for r in (17, 32)] == [
        Form("wxt")
    ] * 2
    assert kernels.active_table().form_for(8, 8, torch.float32, 33) == Form("linear")
    assert "<=32" in kernel_table.format_table(table)


def test_choice_keeps_the_default_unless_another_form_wins_by_the_margin() -> None:
    costs = {
        1: {"linear": 100.0, "wxt": 95.0},  # 5 % faster: within the 10 % margin, default kept
        2: {"linear": 100.0, "wxt": 80.0},  # 20 % faster: switched
        3: {"linear": 90.0, "wxt": 120.0},
    }
    chosen = kernel_table.choose_forms(costs, torch.float32, margin=0.1)
    assert chosen == {1: Form("linear"), 2: Form("wxt"), 3: Form("linear")}
    bf16 = kernel_table.choose_forms({2: {"linear": 95.0, "wxt": 100.0}}, torch.bfloat16, 0.1)
    assert bf16 == {2: Form("wxt")}  # bfloat16's default is the transposed product


def test_padding_goes_to_the_cheapest_larger_row_count_only_when_it_pays() -> None:
    cost = {1: 70.0, 2: 25.0, 3: 24.0, 4: 30.0, 5: 31.0, 6: 60.0, 7: 29.0, 8: 40.0}
    pads = kernel_table.padding_candidates(cost, margin=0.1)
    # 1 -> 3 (cheapest larger); 2 -> none (24 is within 10 % of 25); 6 -> 7; 8 has no larger.
    assert pads == {1: 3, 6: 7}
    assert kernel_table.padding_candidates({1: 10.0, 2: 10.0}, margin=0.0) == {}


def test_table_json_round_trip_and_cache_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = MeasuredTable(
        {(40, 24, torch.float32, 1): Form("wxt", 2), (40, 24, torch.bfloat16, 3): Form("linear")},
        {(40, 24, torch.float32, 1): {"linear": 7.0, "wxt": 2.5, "wxt@2": 2.4}},
    )
    again = MeasuredTable.from_json(json.loads(json.dumps(table.to_json())))
    assert again.forms == table.forms and again.timings_us == table.timings_us
    path = kernel_table.save_cached(table, tmp_path / "k.json")
    assert kernel_table.load_cached(path).forms == table.forms
    # The file format other versions of this package read: the machine key and one entry per
    # (shape, dtype, rows) with its form and costs.
    saved = json.loads(path.read_text())
    assert set(saved) == {"key", "entries"} and saved["key"] == kernel_table.machine_key()
    entry = {"out": 40, "in": 24, "dtype": "float32", "rows": 1, "form": "wxt@2",
             "cost_us": {"linear": 7.0, "wxt": 2.5, "wxt@2": 2.4}}  # fmt: skip
    assert entry in saved["entries"] and len(saved["entries"]) == 2
    # A file written under another machine key (torch version, CPU, threads) is ignored.
    data = json.loads(path.read_text())
    data["key"]["threads"] = "999"
    path.write_text(json.dumps(data))
    assert kernel_table.load_cached(path).forms == {}
    path.write_text("{not json")
    assert kernel_table.load_cached(path).forms == {}
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert kernel_table.cache_path().parent == tmp_path / "casspec_ref"
    other = dict(kernel_table.machine_key(), threads="999")
    assert kernel_table.cache_path(other) != kernel_table.cache_path()
    # A table measured before a form existed was never offered it: another key, measured again.
    assert kernel_table.machine_key()["forms"] == ",".join(kernels.BASE_FORMS)
    older = dict(kernel_table.machine_key(), forms="linear,wxt,split")
    assert kernel_table.cache_path(older) != kernel_table.cache_path()
    text = kernel_table.format_table(table)
    assert "wxt@2" in text and "40x24" in text
    assert kernel_table.format_table(KernelTable(table.forms)) == text  # the core table prints too
    # ... and serializes too: the same entries without the costs (benchmarks/verify_curve.py).
    core = kernel_table.table_to_json(KernelTable(table.forms))
    assert core == [{**e, "cost_us": {}} for e in table.to_json()] and core


def test_prepare_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    calls: list[set[tuple[int, int]]] = []

    def fake_calibrate(shapes: set[tuple[int, int]], dtype: torch.dtype) -> MeasuredTable:
        calls.append(set(shapes))
        return MeasuredTable({(o, i, dtype, 2): Form("wxt") for o, i in shapes})

    monkeypatch.setattr(kernel_table, "calibrate", fake_calibrate)
    shapes = {(40, 24), (24, 24)}
    monkeypatch.setenv(kernel_table.ENV_VAR, "default")
    assert kernel_table.prepare(shapes, torch.float32).forms == {} and calls == []

    monkeypatch.setenv(kernel_table.ENV_VAR, "auto")
    kernel_table.prepare(shapes, torch.float32)
    assert calls == [shapes]  # nothing cached yet: measured once, then saved
    assert kernels.active_table().form_for(40, 24, torch.float32, 2) == Form("wxt")
    kernels.use_table(None)
    kernel_table.prepare(shapes, torch.float32)
    assert len(calls) == 1  # the second load reads the cache
    assert kernels.active_table().form_for(24, 24, torch.float32, 2) == Form("wxt")
    kernel_table.prepare(shapes | {(8, 24)}, torch.float32)
    assert calls[1] == {(8, 24)}  # only the missing shape is measured
    kernel_table.prepare(shapes, torch.float32, device="meta")
    assert len(calls) == 2  # non-CPU devices keep the defaults

    monkeypatch.setenv(kernel_table.ENV_VAR, "calibrate")
    kernel_table.prepare(shapes, torch.float32)
    assert calls[2] == shapes  # forced: measured again although cached
    assert len(kernel_table.load_cached().shapes()) == 3


def test_row_counts_measured_during_a_stall_are_flagged_for_remeasurement() -> None:
    costs = {
        1: {"linear": 100.0, "wxt": 90.0},
        2: {"linear": 150.0, "wxt": 5000.0},  # one form stalled: the other is plausible
        3: {"linear": 40000.0, "wxt": 38000.0},  # both forms stalled
        16: {"linear": 700.0, "wxt": 650.0},
    }
    assert kernel_table.implausible(costs) == [3]
    assert kernel_table.implausible({2: {"linear": 1e6}}) == []  # no one-row reference


def test_weight_copies_stream_past_the_largest_cache(tmp_path: Path) -> None:
    """The calibration's weight copies total three times the largest cache sysfs lists (sizes
    in K or M; unreadable or malformed entries skipped), or the fallback when it lists none."""
    for index, size in enumerate(["48K", "1024K", "32768K", "junk", "2M"]):
        (tmp_path / f"index{index}").mkdir()
        (tmp_path / f"index{index}" / "size").write_text(size + "\n")
    (tmp_path / "index9").mkdir()  # a listed cache without a size file
    assert kernel_table.stream_bytes_default(root=tmp_path) == 3 * (32 << 20)
    empty = tmp_path / "none"
    assert kernel_table.stream_bytes_default(fallback=123, root=empty) == 123
    assert kernel_table.machine_key()["calibration"] == kernel_table.CALIBRATION
