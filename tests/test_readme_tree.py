"""README's annotated tree is the package's file list: every module is named, every name exists."""

from __future__ import annotations

import re
from pathlib import Path

import casspec_ref

ROOT = Path(casspec_ref.__file__).parent.parent
MODULE = re.compile(r"\b(\w+\.py)\b")


def readme_tree(text: str) -> set[str]:
    """Module paths (relative to the repository) named in the README's tree block: under a
    ``casspec_ref/...`` heading, the names before each line's annotation (two or more spaces)."""
    block = text.split("## Read it in this order", 1)[1].split("```", 2)[1]
    named: set[str] = set()
    package = sub = None
    for line in block.splitlines():
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip(" "))
        names = re.split(r"\s{2,}", line.strip())[0]
        if indent == 0:
            package = names if names.startswith("casspec_ref/") else None
            sub = None
        elif package is not None and indent == 2 and names.endswith("/"):
            sub = package + names
        elif package is not None:
            where = sub if indent >= 4 and sub is not None else package
            named.update(where + name for name in MODULE.findall(names))
    return named


def package_modules() -> set[str]:
    return {
        str(path.relative_to(ROOT))
        for path in (ROOT / "casspec_ref").rglob("*.py")
        if path.name not in ("__init__.py", "__main__.py")
    }


def test_readme_tree_names_every_module_and_only_modules_that_exist() -> None:
    named = readme_tree((ROOT / "README.md").read_text(encoding="utf-8"))
    actual = package_modules()
    assert named - actual == set(), f"README names modules that do not exist: {named - actual}"
    assert actual - named == set(), f"README's tree misses modules: {actual - named}"


def test_tree_parser_reads_names_subfolders_and_skips_annotations() -> None:
    text = (
        "## Read it in this order\n```\n"
        "casspec_ref/  core, see notes.py\n"
        "  a.py  x\n"
        "  d/  y\n"
        "    b.py, c.py  about e.py\n"
        "tests/  f.py\n"
        "```"
    )
    named = readme_tree(text)
    assert named == {"casspec_ref/a.py", "casspec_ref/d/b.py", "casspec_ref/d/c.py"}
    # The comparison the real test makes: a module left out of the tree is reported.
    assert {"casspec_ref/a.py", "casspec_ref/g.py"} - named == {"casspec_ref/g.py"}
