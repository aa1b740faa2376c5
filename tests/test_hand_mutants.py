"""The hand-mutant gallery's own checks (tests/hand_mutants.py), fast: every anchor is found
exactly once in the shipped source and changes it, every named test file exists, and a missing
anchor is an error, never a kill. `make hand-mutants` runs the mutants themselves."""

from __future__ import annotations

from pathlib import Path

import hand_mutants
import pytest
from hand_mutants import MUTANTS, Mutant, apply, run

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("mutant", MUTANTS, ids=lambda m: m.name)
def test_each_anchor_is_found_once_and_changes_the_source(mutant: Mutant) -> None:
    source = (ROOT / mutant.path).read_text()
    mutated = apply(mutant, source)
    assert mutated != source
    compile(mutated, mutant.path, "exec")  # a mutant is a bug, not a syntax error
    for test in mutant.tests:
        assert (ROOT / test.split("::")[0]).is_file(), test


def test_names_are_unique() -> None:
    names = [m.name for m in MUTANTS]
    assert len(set(names)) == len(names)


def test_an_anchor_matches_across_reformatting_only() -> None:
    mutant = Mutant("m", "x.py", "f(a, b)", "g(a, b)", ("t.py",))
    assert apply(mutant, "y = f(a,\n      b)\n") == "y = g(a, b)\n"
    with pytest.raises(ValueError, match="found 0 times"):
        apply(mutant, "y = f(b, a)\n")
    with pytest.raises(ValueError, match="found 2 times"):
        apply(mutant, "f(a, b)\nf(a, b)\n")


def test_a_missing_anchor_is_reported_and_not_killed(tmp_path: Path) -> None:
    (tmp_path / "x.py").write_text("y = 1\n")
    mutant = Mutant("m", "x.py", "y = 2", "y = 3", ("t.py",))
    status, detail = run(mutant, tmp_path)
    assert status == "ANCHOR" and "re-anchor" in detail
    assert (tmp_path / "x.py").read_text() == "y = 1\n"
    assert hand_mutants.main(["no such mutant"]) == 2
