"""tests/dispatch_levels.py: a level the CPU lacks is named, never passed in silence; a level
that runs pins torch, oneDNN and MKL together; a process that ran at another level than asked
fails."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_support import load_script

levels = load_script(Path(__file__).with_name("dispatch_levels.py"))


def test_a_level_the_cpu_lacks_is_named_and_not_run(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []
    monkeypatch.setattr(levels, "cpu_flags", lambda: {"avx2"})
    monkeypatch.setattr(levels.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(levels, "run_level", lambda level: ran.append(level) or (True, level))
    assert levels.main(["avx2", "avx512"]) == 0
    assert ran == ["avx2"]
    assert "avx512: NOT RUN: this CPU lacks avx512f" in capsys.readouterr().out


def test_a_failing_level_or_an_unknown_one_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(levels, "run_level", lambda level: (level != "default", level))
    assert levels.main(["default"]) == 1
    assert levels.main(["sse9"]) == 2


def test_each_level_pins_all_three_libraries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE")
    low = levels.environment("default")
    assert (low["ATEN_CPU_CAPABILITY"], low["ONEDNN_MAX_CPU_ISA"]) == ("default", "SSE41")
    assert low["MKL_ENABLE_INSTRUCTIONS"] == "SSE4_2"
    top = levels.environment("avx512")
    assert "ONEDNN_MAX_CPU_ISA" not in top and "MKL_ENABLE_INSTRUCTIONS" not in top


def test_a_process_that_ran_at_another_level_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(levels, "capability_in", lambda env: "DEFAULT")
    passed, line = levels.run_level("avx2")
    assert not passed and "torch ran DEFAULT" in line


def test_skip_native_leaves_out_the_level_the_main_suite_ran(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    ran: list[str] = []
    monkeypatch.setattr(levels, "cpu_flags", lambda: {"avx2", "avx512f"})
    monkeypatch.setattr(levels.platform, "machine", lambda: "x86_64")
    monkeypatch.setattr(levels, "native_level", lambda: "avx512")
    monkeypatch.setattr(levels, "run_level", lambda level: ran.append(level) or (True, level))
    assert levels.main(["--skip-native"]) == 0
    assert ran == ["default", "avx2"]
    assert "avx512: this CPU's own level, run by the main test suite" in capsys.readouterr().out
    assert levels.main([]) == 0 and ran[2:] == ["default", "avx2", "avx512"]
