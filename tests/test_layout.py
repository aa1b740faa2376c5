"""The package layout: dependencies run one way, tools -> proof/io -> accel/baselines -> core ->
base, never back up; the core is written to be read.

Every module of `casspec_ref` is parsed (not imported) and each ``casspec_ref.*`` import,
including imports inside functions, is checked against the layer order below. In the core, no
function is over 60 lines and no line switches ruff's formatter off. Each rule has a test that
shows it can fail. The README's annotated tree is checked by tests/test_readme_tree.py.
"""

from __future__ import annotations

import ast
import re
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


def private_imports(path: Path) -> list[str]:
    """Names starting with ``_`` that ``path`` imports from another ``casspec_ref`` module."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("casspec_ref"):
            found += [f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_")]
    return found


def test_no_module_imports_another_modules_private_names() -> None:
    """What two modules share lives in a module of its own (as the command-line checks that
    `generate` and `bench` share do), not in one of them as a private name."""
    found = [
        f"{module_name(p)}: {n}" for p in sorted(PACKAGE.rglob("*.py")) for n in private_imports(p)
    ]
    assert not found, "private names imported across modules:\n" + "\n".join(found)


def test_private_import_rule_can_fail(tmp_path: Path) -> None:
    module = tmp_path / "m.py"
    module.write_text(
        "from casspec_ref.tools.cli import _fail, main\nfrom os import _exit\n"
        "def f():\n    from casspec_ref.tools import _x\n"
    )
    assert private_imports(module) == ["casspec_ref.tools.cli._fail", "casspec_ref.tools._x"]


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


#: A comment that turns ruff's formatter off for a line or a region. Formatting is ruff's
#: everywhere: the core is kept short by having few concepts, not by packing lines.
FORMAT_OFF = re.compile(r"#\s*fmt:\s*(skip|off)\b")


def formatter_overrides(path: Path) -> list[str]:
    """Lines of ``path`` that switch the formatter off, as ``name:line``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [f"{path.name}:{i}" for i, line in enumerate(lines, 1) if FORMAT_OFF.search(line)]


def test_no_core_file_switches_the_formatter_off() -> None:
    modules = core_modules()
    assert len(modules) > 15, "the core was not found"
    found = [hit for path in modules for hit in formatter_overrides(path)]
    assert not found, "formatter switched off in the core (run ruff format):\n" + "\n".join(found)


def test_formatter_rule_can_fail(tmp_path: Path) -> None:
    """A planted skip marker and an off region are found, with their line numbers; the words in
    a docstring without the comment sign are not."""
    module = tmp_path / "m.py"
    marker = "fmt" + ": "  # split, so that this file holds no marker itself
    module.write_text(
        f'"""{marker}skip is forbidden."""\nx = [1,2]  # {marker}skip\n#{marker}off\ny = 3\n'
    )
    assert formatter_overrides(module) == ["m.py:2", "m.py:3"]
    module.write_text("x = [1, 2]  # formatted\n")
    assert formatter_overrides(module) == []
