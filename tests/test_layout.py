"""The package layout: dependencies run one way, tools -> proof/io -> core, never back up.

Every module of `casspec_ref` is parsed (not imported) and each ``casspec_ref.*`` import,
including imports inside functions, is checked against the layer order below.
"""

from __future__ import annotations

import ast
from pathlib import Path

import casspec_ref

PACKAGE = Path(casspec_ref.__file__).parent

#: Layer of a module: 0 = core, 1 = io and proof, 2 = tools (and the package entry point).
LAYERS = {"io": 1, "proof": 1, "tools": 2}


def layer_of(module: str) -> int:
    parts = module.split(".")
    if parts[:2] == ["casspec_ref", "__main__"]:
        return 2
    return LAYERS.get(parts[1], 0) if len(parts) > 1 else 0


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
                layer_of(target) == layer_of(name) == 1
                and target.split(".")[1] != name.split(".")[1]
            ):
                violations.append(f"{name} imports {target} (io and proof stay independent)")
    assert not violations, "imports that run against the layer order:\n" + "\n".join(violations)


def test_layer_rule_can_fail() -> None:
    """The classifier itself: a core module importing a tool is a violation."""
    assert layer_of("casspec_ref.tools.cli") > layer_of("casspec_ref.speculative")
    assert layer_of("casspec_ref.io.weights") > layer_of("casspec_ref.model")
    assert layer_of("casspec_ref.__main__") == 2
