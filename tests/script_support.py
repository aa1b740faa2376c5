"""Loading a script that is not part of the package (a benchmark, a test driver) as a module.

Not a test module: the tests of `benchmarks/*.py`, `tests/dispatch_levels.py` and the
tutorials' Python files (`tutorials/exercises.py`, lecture 0's sampler) import their script with
`load_script`.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path) -> ModuleType:
    """The script at ``path`` run as a module named after its file, registered in
    ``sys.modules`` (dataclasses and pickling look a module up there)."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
