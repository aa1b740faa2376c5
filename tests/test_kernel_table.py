"""The per-machine kernel table's measuring side: the choice rules, the cache, `prepare`.

Nothing here times anything: tables are built by hand or from synthetic costs, and the
measuring function is replaced where `prepare` would call it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from casspec_ref.accel import invariance, kernel_table, threads
from casspec_ref.accel.kernel_table import MeasuredTable
from casspec_ref.accel.threads import CpuTimes, Load
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
    assert set(saved) == {"key", "checked_threads", "entries"}
    assert saved["key"] == kernel_table.machine_key()
    costs = {"linear": 7.0, "wxt": 2.5, "wxt@2": 2.4}
    entry = {"out": 40, "in": 24, "dtype": "float32", "rows": 1, "form": "wxt@2", "cost_us": costs}
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


@pytest.fixture
def quiet(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[Load]]:
    """A clean cache, and a machine whose load readings are the list's (quiet by default)."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(kernel_table, "_PROCESS_ONLY", MeasuredTable())
    monkeypatch.setattr(kernel_table, "estimate_seconds", lambda shapes, dtype: 1.0)
    monkeypatch.setattr(threads, "read_cpu_times", lambda: None)
    loads = [Load(2, 0.0, 0.1)]
    monkeypatch.setattr(threads, "sample_load", lambda: loads[0])
    yield loads


def test_two_processes_saving_at_once_each_replace_the_file_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A second process saves the table between the first's write and its replace (two loads
    at once, two test workers): each writes a temporary file of its own, so the first's replace
    still finds its file, the cache holds one whole table and no temporary file is left."""
    path = tmp_path / "k.json"
    first = MeasuredTable({(40, 24, torch.float32, 1): Form("wxt")}, {})
    second = MeasuredTable({(40, 24, torch.float32, 1): Form("linear", 2)}, {})
    real_replace = Path.replace
    interleaved = []

    def replace_after_the_other_process_saved(self: Path, target: Path) -> Path:
        if not interleaved:
            interleaved.append(self)
            other_pid = os.getpid() + 1
            monkeypatch.setattr(os, "getpid", lambda: other_pid)
            kernel_table.save_cached(second, path)
        return real_replace(self, target)

    monkeypatch.setattr(Path, "replace", replace_after_the_other_process_saved)
    kernel_table.save_cached(first, path)
    assert interleaved, "the second save did not run between the first's write and replace"
    assert kernel_table.load_cached(path).forms == first.forms
    assert not list(tmp_path.glob("*.tmp"))


def test_prepare_follows_the_environment(
    quiet: list[Load], monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[set[tuple[int, int]]] = []

    def fake_calibrate(
        shapes: set[tuple[int, int]], dtype: torch.dtype, **kw: object
    ) -> MeasuredTable:
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


def test_a_start_beside_busy_cores_checks_at_its_own_count_and_holds_it(
    quiet: list[Load], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A check on every thread beside a busy core would stall as a forward does; a process
    that started on one thread checks at one thread and never switches; a quiet start checks
    at 1 and 2 threads and may switch."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv(threads.ENV_VAR, raising=False)
    monkeypatch.setenv(kernel_table.ENV_VAR, "default")
    monkeypatch.setattr(threads, "read_cpu_times", lambda: CpuTimes(0, 0, 1, 0, 2))
    levels_checked: list[tuple[int, ...]] = []

    def fake_check(
        wanted: object,
        dtype: torch.dtype,
        levels: tuple[int, ...],
        table: object,
        head: object,
        cache: object,
    ) -> invariance.Report:
        levels_checked.append(levels)
        return invariance.Report(dtype, levels, attention=True)

    monkeypatch.setattr(kernel_table, "check_invariance", fake_check)
    previous = torch.get_num_threads()
    try:
        for others, want_levels, may_switch in ((1.0, (1,), False), (0.0, (1, 2), True)):
            monkeypatch.setattr(threads, "_POLICY", None)
            torch.set_num_threads(2)
            quiet[0] = Load(2, others, 0.1)
            kernel_table.prepare({(24, 24)}, torch.float32)
            policy = threads.current()
            assert policy is not None and levels_checked[-1] == want_levels
            assert policy.switching is may_switch
        assert levels_checked == [(1,), (1, 2)]
    finally:
        torch.set_num_threads(previous)


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


def contended_calibrate(
    shapes: set[tuple[int, int]], dtype: torch.dtype, **kw: object
) -> MeasuredTable:
    """What `calibrate` returns when a form's repeated timings were 3x apart in every pass."""
    reasons = kernel_table.contention_reasons([3.0] * 10, None)
    return MeasuredTable({(o, i, dtype, 1): Form("wxt") for o, i in shapes}, contention=reasons)


def test_a_contended_table_serves_its_process_and_is_never_cached(
    quiet: list[Load], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(kernel_table.ENV_VAR, "auto")
    calls = []
    monkeypatch.setattr(
        kernel_table, "calibrate", lambda s, d, **kw: calls.append(s) or contended_calibrate(s, d)
    )
    kernel_table.prepare({(40, 24)}, torch.float32)
    assert not kernel_table.cache_path().exists() and not list(tmp_path.rglob("kernels-*.json"))
    assert kernels.active_table().form_for(40, 24, torch.float32, 1) == Form("wxt")
    with pytest.raises(ValueError, match="not cached"):
        kernel_table.save_cached(contended_calibrate({(40, 24)}, torch.float32))
    kernels.use_table(None)
    kernel_table.prepare({(40, 24)}, torch.float32)  # the same process: not measured again
    assert len(calls) == 1
    assert kernels.active_table().form_for(40, 24, torch.float32, 1) == Form("wxt")
    monkeypatch.setattr(kernel_table, "_PROCESS_ONLY", MeasuredTable())  # a later start
    kernel_table.prepare({(40, 24)}, torch.float32)
    assert len(calls) == 2 and not kernel_table.cache_path().exists()


def test_a_load_during_calibration_keeps_the_table_out_of_the_cache(
    quiet: list[Load], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(kernel_table.ENV_VAR, "auto")
    monkeypatch.setattr(
        kernel_table, "calibrate", lambda s, d, **kw: MeasuredTable({(40, 24, d, 1): Form("wxt")})
    )
    # Before and after the measurement: over 1 s, other processes kept 0.9 of 2 cores busy.
    readings = iter([CpuTimes(0.0, 0, 0, 0, 2), CpuTimes(1.0, 190, 200, 100, 2)])
    monkeypatch.setattr(threads, "read_cpu_times", lambda: next(readings, None))
    measured = kernel_table.measure({(40, 24)}, torch.float32)
    assert measured is not None and measured.contention == [
        "other processes used 0.90 cores during the measurement"
    ]
    readings = iter([CpuTimes(0.0, 0, 0, 0, 2), CpuTimes(1.0, 190, 200, 100, 2)])
    kernel_table.prepare({(40, 24)}, torch.float32)
    assert not kernel_table.cache_path().exists()


def test_a_busy_start_measures_nothing_unless_forced(
    quiet: list[Load], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(kernel_table, "calibrate", contended_calibrate)
    quiet[0] = Load(2, 1.2, 0.1)
    assert kernel_table.measure({(40, 24)}, torch.float32) is None
    assert "keep 1.2 of 2 cores busy" in capsys.readouterr().err
    assert kernel_table.measure({(40, 24)}, torch.float32, force=True) is not None
    err = capsys.readouterr().err
    assert "measuring this machine's fastest exact matmul forms for 1 weight shapes" in err
    assert "about 1 s" in err and "not cached" in err


def test_contention_is_read_from_repeated_timings_and_the_load() -> None:
    assert kernel_table.contention_reasons([1.1, 1.3, 1.9, 1.2] * 5, 0.2) == []
    # 3 of 20 timings (15 %) disagree by more than 2x: more than the 10 % allowed.
    assert kernel_table.contention_reasons([1.1] * 17 + [2.5] * 3, None) == [
        "3 of 20 repeated timings disagree by more than 2x"
    ]
    assert kernel_table.contention_reasons([1.1] * 19 + [2.5], None) == []  # one hiccup: 5 %
    assert kernel_table.contention_reasons([], 0.6) == [
        "other processes used 0.60 cores during the measurement"
    ]


def test_untimed_row_counts_pad_to_the_next_timed_one_in_an_exact_form() -> None:
    assert kernel_table.timed_rows() == list(kernel_table.FIRST_ROWS)
    assert kernel_table.timed_rows(5) == [1, 2, 3, 4, 5]
    chosen = {r: Form("split") for r in kernel_table.FIRST_ROWS}
    chosen[8] = Form("packed", 12)
    filled = kernel_table.fill_rows(chosen, 16)
    assert sorted(filled) == list(range(1, 17))
    assert filled[5] == Form("split", 6) and filled[7] == Form("packed", 12)
    assert filled[9] == Form("split", 12) and filled[13] == Form("split", 16)
    for n, form in filled.items():  # every one a form the table may hold (`Form.parse`)
        assert Form.parse(str(form)) == form
        assert form.pad_to == 0 or n < form.pad_to <= kernels.MAX_ROWS


def test_forms_whose_bits_depend_on_the_thread_count_are_never_chosen(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A stand-in for a BLAS kernel that splits its sums by team size: ``linear`` rounds one
    way on one thread and another on two; calibration must not choose it anywhere."""
    real = kernel_table.apply_form

    def thread_dependent(form: Form, x: torch.Tensor, w: torch.Tensor, b: None) -> torch.Tensor:
        out = real(form, x, w, b)
        if form.base == "linear" and torch.get_num_threads() > 1:
            out = out + 1e-3
        return out

    monkeypatch.setattr(kernel_table, "apply_form", thread_dependent)
    w, x = torch.randn(8, 8), torch.randn(3, 8)
    assert kernel_table.thread_variant(kernels.base_forms(torch.float32), w, x, (1, 2)) == {
        "linear"
    }
    assert kernel_table.thread_variant([Form("linear")], w, x, (1,)) == set()
    table = kernel_table.calibrate(
        [(8, 8)], max_rows=4, classes=(32,), repeats=1, stream_bytes=0, thread_levels=(1, 2)
    )
    rows = {key[3]: form for key, form in table.forms.items()}
    assert sorted(rows) == [1, 2, 3, 4, 32]
    assert all(form.base != "linear" for r, form in rows.items() if r <= kernels.MAX_ROWS)
    # A class of larger row counts is not checked: a forward that large never switches counts.
    assert table.checked_threads == (1, 2)


def test_switching_threads_is_allowed_only_where_a_forward_keeps_its_bits() -> None:
    """The thread policy switches counts during a run only if every shape's invariant form
    passed the check at 1 and 2 threads (`check_invariance`). Then the target's
    forwards of 1..32 rows (after a prompt run on every thread), and prompt pieces of up to 64
    rows that compute the last row's logits only, must give the same bits on either count;
    where they do not, the check must have said no. A model of SmolLM2's widths, two layers."""
    from casspec_ref.base.random_weights import random_init_
    from casspec_ref.config import tiny_llama
    from casspec_ref.kv_cache import KVCache
    from casspec_ref.model import Transformer

    widths = {"d_model": 576, "n_heads": 9, "n_kv_heads": 3, "d_ff": 1536}
    config = tiny_llama(**widths, n_layers=2, vocab_size=512, max_seq_len=360)
    model = random_init_(Transformer(config), seed=0, std=0.05)
    shapes, head = kernel_table.model_shapes(model), kernel_table.head_only_shapes(model)
    allowed = kernel_table.check_invariance(shapes, torch.float32, (1, 2), None, head).complete
    previous = torch.get_num_threads()
    tokens = torch.randint(
        0, config.vocab_size, (1, 340), generator=torch.Generator().manual_seed(1)
    )
    same = True
    try:
        for past in (40, 300):
            for rows, last_only in [(r, False) for r in (1, 2, 5, 9, 16, 25, 32)] + [
                (40, True),
                (64, True),
            ]:
                outs = []  # per thread count: the logits, the K/V written
                for n in (1, 2):
                    torch.set_num_threads(2)
                    cache = KVCache(config, config.max_seq_len)
                    model(tokens[:, :past], cache=cache)
                    torch.set_num_threads(n)
                    new = tokens[:, past : past + rows]
                    outs.append(model(new, cache=cache, last_only=last_only))
                    outs.append(cache.k[..., : past + rows, :].clone())
                same = same and all(torch.equal(outs[i], outs[i + 2]) for i in (0, 1))
    finally:
        torch.set_num_threads(previous)
    assert same or not allowed, "switching allowed, but a forward changed its bits with threads"


def test_the_head_is_checked_to_the_rows_its_forwards_compute(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`head_only_shapes` finds the LM head's shape (tied, untied, GPT-2's position table left
    out; not when a body weight shares it) and `check_invariance` checks it to `HEAD_ROWS` rows,
    every other shape to `FULL_ROWS`."""
    from casspec_ref.config import tiny_gpt2, tiny_llama
    from casspec_ref.model import Transformer

    with torch.device("meta"):
        llama = Transformer(tiny_llama(vocab_size=61))
        gpt2 = Transformer(tiny_gpt2(vocab_size=53))
        shared = Transformer(tiny_llama(vocab_size=48))  # the head's shape is the MLP's up
    assert kernel_table.head_only_shapes(llama) == {(61, llama.config.d_model)}
    assert kernel_table.head_only_shapes(gpt2) == {(53, gpt2.config.d_model)}
    assert kernel_table.head_only_shapes(shared) == set()
    rows_of: dict[tuple[int, int], int] = {}

    def fake_form(shape, dtype, levels, ranked, rows, known):  # type: ignore[no-untyped-def]
        rows_of[shape] = rows
        return Form("wxt")

    monkeypatch.setattr(invariance, "invariant_form", fake_form)
    shapes = kernel_table.model_shapes(llama)
    head = kernel_table.head_only_shapes(llama)
    report = kernel_table.check_invariance(shapes, torch.float16, (1, 7), None, head)
    assert all(form is not None for form in report.forms.values())  # (attention: this CPU's)
    assert rows_of == {
        s: invariance.HEAD_ROWS if s in head else invariance.FULL_ROWS for s in shapes
    }


def test_the_checks_verdicts_are_reached_once_per_machine_and_kept(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A second process (the in-process memo cleared) reads the tiles' verdicts from the file
    the first wrote, checking nothing; a file written under another dispatch level
    or damaged is not trusted, and the check runs again."""
    checked: list[tuple[int, int]] = []

    def fake_form(shape, dtype, levels, ranked, rows, known):  # type: ignore[no-untyped-def]
        for tile in ranked:  # as the real one: a known verdict is not checked again
            if str(tile) not in known:
                checked.append(shape)
                known[str(tile)] = shape == (8, 16) and tile == Form("wxt", 4)
            if known[str(tile)]:
                return tile
        return None

    monkeypatch.setattr(invariance, "invariant_form", fake_form)
    monkeypatch.setattr(kernel_table, "_INVARIANT", {})
    path = tmp_path / "verdicts.json"
    shapes = {(8, 16), (4, 8)}
    first = kernel_table.check_invariance(shapes, torch.float16, (1, 2), cache=path)
    assert {(4, 8), (8, 16)} <= set(checked)
    kernel_table._INVARIANT.clear()
    checked.clear()
    again = kernel_table.check_invariance(shapes, torch.float16, (1, 2), cache=path)
    assert checked == [] and again.forms == first.forms == {(8, 16): Form("wxt", 4), (4, 8): None}
    data = json.loads(path.read_text())
    data["key"]["capability"] = "some other level"
    path.write_text(json.dumps(data))
    kernel_table._INVARIANT.clear()
    kernel_table.check_invariance(shapes, torch.float16, (1, 2), cache=path)
    assert {(4, 8), (8, 16)} == set(checked)
    path.write_text("{ damaged")
    kernel_table._INVARIANT.clear()
    checked.clear()
    kernel_table.check_invariance(shapes, torch.float16, (1, 2), cache=path)
    assert {(4, 8), (8, 16)} == set(checked)
    data = json.loads(path.read_text())  # entries of the wrong kind: checked again, no crash
    data["verdicts"] = {k: True for k in data["verdicts"]}
    path.write_text(json.dumps(data))
    kernel_table._INVARIANT.clear()
    checked.clear()
    kernel_table.check_invariance(shapes, torch.float16, (1, 2), cache=path)
    assert {(4, 8), (8, 16)} <= set(checked)


def test_the_machine_key_names_the_dispatch_levels(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table or verdict made under one cap of oneDNN or MKL is not read under another."""
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    plain = kernel_table.machine_key()
    assert plain["capability"] == torch.backends.cpu.get_cpu_capability()
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert kernel_table.machine_key() != plain
    assert kernel_table.cache_path() != kernel_table.cache_path(plain)
