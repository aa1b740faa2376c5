"""The package layout: dependencies run one way, tools -> proof/io -> accel/baselines -> core ->
base, never back up.

Every module of `casspec_ref` is parsed (not imported) and each ``casspec_ref.*`` import,
including imports inside functions, is checked against the layer order below.
"""

from __future__ import annotations

import ast
from pathlib import Path

import casspec_ref

PACKAGE = Path(casspec_ref.__file__).parent

#: Layer of a module: -1 = base (what the core stands on and does not teach: argument checks,
#: the matmul forms), 0 = core, 1 = accel (faster kernels, per machine) and baselines (the
#: schedules CAS-Spec is compared with), 2 = io and proof, 3 = tools (and the package's entry
#: points: ``casspec_ref/__init__.py``, which registers the baselines, and ``__main__``).
LAYERS = {"base": -1, "accel": 1, "baselines": 1, "io": 2, "proof": 2, "tools": 3}


def layer_of(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1 or parts[1] == "__main__":
        return 3
    return LAYERS.get(parts[1], 0)


def imports_of(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
    return [name for name in found if name.split(".")[0] == "casspec_ref"]


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def test_no_import_runs_back_up() -> None:
    violations = []
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 20, "the layout test found too few modules to be meaningful"
    for path in modules:
        name = module_name(path)
        for target in imports_of(path):
            if layer_of(target) > layer_of(name):
                violations.append(f"{name} imports {target}")
            elif (
                layer_of(target) == layer_of(name) == 2
                and target.split(".")[1] != name.split(".")[1]
            ):
                violations.append(f"{name} imports {target} (io and proof stay independent)")
    assert not violations, "imports that run against the layer order:\n" + "\n".join(violations)


def test_layer_rule_can_fail() -> None:
    """The classifier itself: a core module importing a tool (or accel) is a violation, accel
    importing a loader is one, and a loader importing accel is not."""
    assert layer_of("casspec_ref.tools.cli") > layer_of("casspec_ref.speculative")
    assert layer_of("casspec_ref.io.weights") > layer_of("casspec_ref.model")
    assert layer_of("casspec_ref.accel.int8") > layer_of("casspec_ref.dsia.act_quant")
    assert layer_of("casspec_ref.base.kernels") < layer_of("casspec_ref.accel.kernel_table")
    assert layer_of("casspec_ref.io.presets") > layer_of("casspec_ref.accel.int8")
    assert layer_of("casspec_ref.proof.harness") > layer_of("casspec_ref.accel")
    assert layer_of("casspec_ref.tools.demo") > layer_of("casspec_ref.io.presets")
    assert layer_of("casspec_ref.__main__") == 3
    assert layer_of("casspec_ref.base.kernels") < layer_of("casspec_ref.model")
    assert layer_of("casspec_ref.baselines") > layer_of("casspec_ref.schedules")
    assert layer_of("casspec_ref") > layer_of("casspec_ref.baselines")


#: The core (top level and dsia/; not base/, accel/, baselines/, io/, proof/, tools/) is read,
#: not just run.
MAX_FUNCTION_LINES = 60


def core_modules() -> list[Path]:
    return [path for path in sorted(PACKAGE.rglob("*.py")) if layer_of(module_name(path)) == 0]


def long_functions(path: Path, limit: int) -> list[str]:
    """Functions of ``path`` longer than ``limit`` lines, their docstring not counted."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        first = node.body[0]
        if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
            length -= (first.end_lineno or first.lineno) - first.lineno + 1
        if length > limit:
            found.append(f"{path.name}: {node.name} has {length} lines")
    return found


def test_no_core_function_is_too_long_to_read() -> None:
    modules = core_modules()
    assert len(modules) > 15, "the core was not found"
    found = [f for path in modules for f in long_functions(path, MAX_FUNCTION_LINES)]
    assert not found, f"core functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(found)


def test_function_length_rule_can_fail(tmp_path: Path) -> None:
    """A function of 61 lines after its docstring (def line included) is found at limit 60."""
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    module = tmp_path / "m.py"
    module.write_text(f'def f():\n    """A docstring\n    of two lines."""\n{body}\n')
    assert long_functions(module, 60) == ["m.py: f has 61 lines"]
    assert long_functions(module, 61) == []


#: The core's budget in lines (``wc -l``, docstrings, comments and blank lines included): what a
#: student reads in an afternoon. Argument checks, loaders, tools and baselines live outside it.
CORE_LINE_BUDGET = 2620


def core_lines(modules: list[Path]) -> int:
    return sum(len(path.read_text(encoding="utf-8").splitlines()) for path in modules)


def test_the_core_fits_its_line_budget() -> None:
    modules = core_modules()
    counts = sorted((len(p.read_text(encoding="utf-8").splitlines()), p.name) for p in modules)
    assert core_lines(modules) <= CORE_LINE_BUDGET, f"core files (lines, name): {counts}"


def test_line_budget_rule_can_fail(tmp_path: Path) -> None:
    """Two files of 3 and 4 lines count 7 lines (a final line without a newline counts too)."""
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\ny = 2\nz = 3\n")
    b.write_text("x = 1\n\n# c\ny = 2")
    assert core_lines([a, b]) == 7
