"""One-line checks for another project's test suite: `assert_lossless` and its pytest fixture.

``assert_lossless(fn, signature="hf")`` runs the oracle on ``fn`` and returns the report when
the verdict is LOSSLESS; any other verdict raises `AssertionError` whose message is the report:
the verdict, the minimal counterexample (the first failing case, its laws at the root, the first
token position where the laws differ) or the contract error, case and traceback. Code that
reaches TorchScript is imported again with TorchScript disabled first, as the command line does
(`casspec_ref.proof.reach`). The fixture of the same name is in
`casspec_ref.proof.pytest_plugin` (``pytest_plugins = ["casspec_ref.proof.pytest_plugin"]``).
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from casspec_ref.proof.checker import CheckReport, check_loop, check_tree_verifier, check_verifier
from casspec_ref.proof.reach import hidden_paths, import_without_torchscript


def without_torchscript(fn: Any) -> Any:
    """``fn`` as it is when its module is imported with TorchScript disabled, if it reaches
    TorchScript (a module-level function or class, or a `functools.partial` of one); otherwise
    ``fn`` itself."""
    if isinstance(fn, functools.partial):
        inner = without_torchscript(fn.func)
        return fn if inner is fn.func else functools.partial(inner, *fn.args, **fn.keywords)
    scripted = [h for h in hidden_paths(fn) if h.kind == "TorchScript"]
    module, name = getattr(fn, "__module__", None), getattr(fn, "__qualname__", "")
    if not scripted or not module or "<" in name:
        return fn
    new: Any = import_without_torchscript(module, tuple(h.module for h in scripted))
    for part in name.split("."):
        new = getattr(new, part)
    return new


def assert_lossless(
    fn: Any, *, signature: str = "chain", route_torchscript: bool = True, **options: Any
) -> CheckReport:
    """Assert that ``fn`` is lossless; return the report. ``signature`` is "chain" (the
    default), "tree", "loop", or a known convention ("plain", "hf", "vllm-v0"); ``options``
    go to `check_verifier` / `check_tree_verifier` / `check_loop` (families, vocab, k,
    tolerance, exact, timeout). Raises `AssertionError` with the report as its message."""
    if route_torchscript:
        fn = without_torchscript(fn)
    if signature == "tree":
        report = check_tree_verifier(fn, **options)
    elif signature == "loop":
        report = check_loop(fn, **options)
    else:
        report = check_verifier(fn, signature=signature, **options)
    if report.verdict != "LOSSLESS":
        name = getattr(fn, "__qualname__", None) or type(fn).__name__
        where = inspect.getmodule(fn)
        origin = f"{where.__name__}.{name}" if where is not None else name
        raise AssertionError(f"{origin}: {report.format()}")
    return report
