"""The docs that teach DyTC name code that exists.

Every code name written in backticks in docs/notation.md and docs/method.md, and in the passages
of docs/design.md and docs/testing.md that speak of DyTC (`dytc_passages`), is looked up in the
package: a dotted path (`dytc.t_score`, `RefinedDyTC.alpha`) must resolve, from a module of
casspec_ref or a name one defines, through attributes (an instance attribute counts when its
class, or a package class it extends, assigns ``self.NAME``); a single identifier must be defined
or used as a name anywhere in the package or its tests (a function, a field, a variable, a dict
key, a pinned test case) or be a variable of the Makefile; a file name (`dytc.py`) must be a file
of the repository. In the notation table every backticked name of the code-name column is
checked; elsewhere a single identifier is taken for a code name when it holds an underscore or
an inner capital (`min_gain`, `DyTCConfig`), so that the letters of formulas (`p`, `w`) are not.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest

import casspec_ref

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "docs" / "notation.md", ROOT / "docs" / "method.md")
DYTC_IN = (ROOT / "docs" / "design.md", ROOT / "docs" / "testing.md")  # only where DyTC is named
MAKE_VARIABLE = re.compile(r"^([A-Z][A-Z0-9_]*)\s*[?:]?=", re.MULTILINE)
BACKTICKED = re.compile(r"`([^`\n]+)`")
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DOTTED = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
FILE_SUFFIXES = (".py", ".md", ".json", ".jsonl", ".ipynb", ".toml")


def _looks_like_code(name: str) -> bool:
    return "_" in name or any(ch.isupper() for ch in name[1:])


def code_names(text: str, notation_table: bool = False) -> list[str]:
    """The code names written in backticks in `text` (see the module docstring)."""
    names: list[str] = []
    for line in text.splitlines():
        cells = line.split("|")
        code_column = cells[2] if notation_table and line.startswith("|") and len(cells) > 3 else ""
        for token in BACKTICKED.findall(line):
            if DOTTED.fullmatch(token):
                names.append(token)
            elif IDENTIFIER.fullmatch(token) and (
                _looks_like_code(token) or f"`{token}`" in code_column
            ):
                names.append(token)
    return names


def dytc_passages(text: str) -> str:
    """The paragraphs and table rows of `text` that name DyTC (``DyTC`` or ``dytc``)."""
    units: list[str] = []
    for paragraph in re.split(r"\n\s*\n", text):
        table = paragraph.lstrip().startswith("|")
        units += paragraph.splitlines() if table else [paragraph]
    return "\n\n".join(unit for unit in units if re.search("DyTC|dytc", unit))


@cache
def _modules() -> dict[str, Any]:
    """Every module of the package by its short and its full name (``dytc``, ``base.kernels``)."""
    found: dict[str, Any] = {}
    prefix = casspec_ref.__name__ + "."
    for info in pkgutil.walk_packages(casspec_ref.__path__, prefix):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        short = info.name.removeprefix(prefix)
        found[short] = found[short.rsplit(".", 1)[-1]] = module
    return found


@cache
def _identifiers() -> frozenset[str]:
    """Every name the package's and the tests' source defines or uses, string keys included."""
    names: set[str] = set()
    tests = [path for path in (ROOT / "tests").glob("*.py") if path != Path(__file__).resolve()]
    for path in [*Path(casspec_ref.__file__).parent.rglob("*.py"), *tests]:  # not the planted
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name):
                names.add(node.id)
            elif isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
            elif isinstance(node, ast.keyword) and node.arg:
                names.add(node.arg)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                if IDENTIFIER.fullmatch(node.value):
                    names.add(node.value)
    names.update(MAKE_VARIABLE.findall((ROOT / "Makefile").read_text()))
    return frozenset(names)


def _assigned_on_self(owner: Any, name: str) -> bool:
    """True if class `owner` or a package class it extends assigns ``self.<name>`` in one of
    its methods."""
    if not inspect.isclass(owner):
        return False
    classes = [c for c in owner.__mro__ if c.__module__.startswith("casspec_ref")]
    trees = [ast.parse(inspect.getsource(c).lstrip()) for c in classes]
    return any(
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "self"
        and node.attr == name
        and isinstance(node.ctx, ast.Store)
        for tree in trees
        for node in ast.walk(tree)
    )


def exists(name: str) -> bool:
    """True if code name `name` is in the package (see the module docstring)."""
    if "." not in name:
        return name in _identifiers()
    if name.endswith(FILE_SUFFIXES):
        return any(path.name == name for path in ROOT.rglob(name) if ".venv" not in path.parts)
    first, *rest = name.split(".")
    modules = _modules()
    owners = [modules[first]] if first in modules else []
    owners += [getattr(m, first) for m in modules.values() if hasattr(m, first)]
    for obj in owners:
        for i, attr in enumerate(rest):
            if hasattr(obj, attr):
                obj = getattr(obj, attr)
            elif i == len(rest) - 1 and _assigned_on_self(obj, attr):
                return True
            else:
                break
        else:
            return True
    return False


def missing(names: list[str]) -> list[str]:
    return [name for name in names if not exists(name)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda path: path.name)
def test_every_code_name_in_the_doc_exists(doc: Path) -> None:
    names = code_names(doc.read_text(), notation_table=doc.name == "notation.md")
    assert len(names) >= 10, f"{doc.name}: the code names were not found"
    assert not missing(names), f"{doc.name} names code that does not exist: {missing(names)}"


@pytest.mark.parametrize("doc", DYTC_IN, ids=lambda path: path.name)
def test_every_code_name_where_a_doc_speaks_of_dytc_exists(doc: Path) -> None:
    names = code_names(dytc_passages(doc.read_text()))
    assert len(names) >= 5, f"{doc.name}: the DyTC passages' code names were not found"
    assert not missing(names), f"{doc.name} names code that does not exist: {missing(names)}"


def test_the_dytc_passages_are_the_ones_that_name_it() -> None:
    text = (
        "DyTC's rule (`exploration_cost`)\nwraps here.\n\nThe verifier (`no_such_verifier`).\n\n"
        "| row | `dytc.no_such_rule` |\n| row | `no_such_cell` |\n\n`MUTATION_DYTC_NAMES` in dytc"
    )
    names = code_names(dytc_passages(text))
    assert names == ["exploration_cost", "dytc.no_such_rule", "MUTATION_DYTC_NAMES"]
    assert missing(names) == names[:2]


def test_a_planted_name_trips_the_check() -> None:
    text = (
        "| alpha | `acceptance_rate_zz` | planted |\n"
        "`dytc.no_such_function`, `RefinedDyTC.no_such_field`, `nodule.t_score`, `DyTCConfig`,"
        " `dytc.t_score`, `RefinedDyTC.alpha`, `p`, `no_such_module.py`, `dytc.py`"
    )
    names = code_names(text, notation_table=True)
    assert names == [
        "acceptance_rate_zz",
        "dytc.no_such_function",
        "RefinedDyTC.no_such_field",
        "nodule.t_score",
        "DyTCConfig",
        "dytc.t_score",
        "RefinedDyTC.alpha",
        "no_such_module.py",
        "dytc.py",
    ]
    assert missing(names) == [*names[:4], "no_such_module.py"]
