"""docs/testing.md's counts and names are the suite's: each is checked against the test
collection, the pytest configuration, the Hypothesis profiles or the mutant gallery."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import hand_mutants
import test_loop_laws as loop_laws
from hypothesis import settings

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "testing.md").read_text()


def _collected(path: str, *options: str) -> list[str]:
    """The node ids pytest collects from ``path`` (with ``options``)."""
    command = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    done = subprocess.run(
        [*command, *options, path], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return [line for line in done.stdout.splitlines() if line.startswith(path + "::")]


def _bullet(title: str) -> str:
    """The text of the Principles bullet that starts with ``**title**``."""
    start = DOC.index(f"- **{title}**")
    end = DOC.find("\n- ", start + 1)
    return DOC[start:end]


def test_markers_are_the_configured_ones():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    configured = {m.split(":")[0] for m in config["tool"]["pytest"]["ini_options"]["markers"]}
    documented = set(re.findall(r"`(\w+)` \(", _bullet("Markers:")))
    assert documented == configured


def test_hypothesis_profiles_are_the_configured_ones():
    text = " ".join(_bullet("Hypothesis profiles").split())
    documented = dict(re.findall(r"`(\w+)` \([^)]*?(\d+) examples", text))
    assert documented, text
    for name, examples in documented.items():
        assert settings.get_profile(name).max_examples == int(examples), name


def test_loop_law_counts_are_the_collected_ones():
    ids = _collected("tests/test_loop_laws.py", "--thorough")
    default = [i for i in ids if "::test_loop_law_equals_ar_and_exercises_what_it_claims[" in i]
    thorough = [i for i in ids if "::test_loop_law_thorough[" in i]
    seeded = [i for i in ids if "::test_drafting_mutants_are_caught_on_more_seeds[" in i]
    methods, cases = len(loop_laws.METHODS), len(loop_laws.THOROUGH_CASES)
    mutants, seeds = len(loop_laws.MUTANTS), len(seeded) // len(loop_laws.MUTANTS)
    assert len(default) == methods and len(thorough) == methods * cases
    cells = sum(len(loop_laws.cases_of(m)) for m in loop_laws.METHODS)
    three = len(loop_laws.THREE_SIBLING_METHODS)
    assert f"{cells} cells ({methods} methods x {len(loop_laws.CASES)} cases, and the " in DOC
    assert f"three-sibling case for {three} methods)" in DOC
    total = len(thorough) + len(seeded)
    assert f"{total} cells ({methods} methods x {cases} cases, and the {mutants} " in DOC
    assert f"drafting mutants on {seeds} seeds)" in DOC


def test_loop_law_table_rows_are_the_matrix_cells():
    rows = re.findall(r"^\| ([\w-]+) \| ([\w.-]+) \| \d+ \| [\d.e+-]+ \|", DOC, re.MULTILINE)
    want = [(m, case.name) for m in loop_laws.METHODS for case in loop_laws.cases_of(m)]
    assert rows == want


def test_the_loop_law_docstring_names_the_markers_its_tests_carry():
    source = (ROOT / "tests" / "test_loop_laws.py").read_text()
    for marker in set(re.findall(r"@pytest\.mark\.(\w+)\n", source)):
        assert f"marked `{marker}`" in " ".join((loop_laws.__doc__ or "").split()), marker
    assert "slow" not in set(re.findall(r"@pytest\.mark\.(\w+)\n", source))


def test_the_hand_mutant_table_is_the_gallery():
    names = re.findall(r"^\| ([^|]+?) \| `casspec_ref/[^`]+` \|", DOC, re.MULTILINE)
    assert names == [m.name for m in hand_mutants.MUTANTS]
    assert re.search(rf"\*\*\d+ of {len(hand_mutants.MUTANTS)} killed\*\*", DOC)
