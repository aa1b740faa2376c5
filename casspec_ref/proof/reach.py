"""Hidden paths: TorchScript and torch.compile in the checked code's reach, and how to route them.

The adapters (`casspec_ref.proof.adapters`) see draws made through Python. A function compiled
with ``@torch.jit.script`` (or traced) runs its draws in TorchScript's interpreter, and a
``torch.compile``d one in generated code: neither passes through the patched Python functions,
so their randomness is invisible and the check could only say NOT CHECKABLE.

`hidden_paths` walks what a callable can reach (the globals its code names, closures, methods
of the classes and instances it holds, recursively, skipping torch, numpy and the standard
library) and lists every scripted, traced or compiled callable with its file and line. Routing:

- TorchScript: `import_without_torchscript` imports the modules again with TorchScript disabled
  (``torch.jit._state.disable()``, which is what the environment variable ``PYTORCH_JIT=0`` does
  when set before torch is imported): ``@torch.jit.script`` then returns the Python function
  unchanged, with the same law. The CLI does this itself when it finds scripted functions.
- torch.compile: `eager_compiled` sets ``torch._dynamo.config.disable`` for the check, so that
  compiled functions run their Python code eagerly.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import os
import sys
import sysconfig
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

#: The switch that disables TorchScript when set before torch is imported.
TORCHSCRIPT_SWITCH = "PYTORCH_JIT=0"

_LIBRARY_ROOTS = tuple(
    os.path.dirname(os.path.abspath(m.__file__ or ""))
    for m in (torch, np, contextlib)  # contextlib: the standard library
) + (os.path.abspath(sysconfig.get_paths()["stdlib"]),)
_OWN_ROOT = os.path.dirname(os.path.abspath(__file__))


@dataclass(frozen=True)
class HiddenPath:
    """A scripted, traced or compiled callable the checked code can reach."""

    kind: str  # "TorchScript" or "torch.compile"
    name: str  # the name it is reached by, module-qualified
    module: str  # the module that holds it
    where: str  # "file:line" of its definition, when found

    def describe(self) -> str:
        return f"{self.name} ({self.kind}, {self.where})"


def _is_library(obj: Any) -> bool:
    module = sys.modules.get(getattr(obj, "__module__", "") or "")
    path = getattr(module, "__file__", None) or getattr(obj, "__file__", None)
    if path is None:
        return True  # builtins and C extensions
    path = os.path.abspath(path)
    return path.startswith(_LIBRARY_ROOTS) or path.startswith(_OWN_ROOT)


def _kind(obj: Any) -> str | None:
    if isinstance(obj, torch.jit.ScriptFunction | torch.jit.ScriptModule):
        return "TorchScript"
    if isinstance(obj, torch.nn.Module) and type(obj).__name__ == "OptimizedModule":
        return "torch.compile"
    if callable(obj) and hasattr(obj, "_torchdynamo_orig_callable"):
        return "torch.compile"
    return None


def _definition(module: str, name: str) -> str:
    """file:line of ``def name`` in ``module``'s source, or the module's file."""
    mod = sys.modules.get(module)
    path = getattr(mod, "__file__", None)
    if not path:
        return module
    short = name.rsplit(".", 1)[-1]
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                stripped = line.lstrip()
                if stripped.startswith((f"def {short}(", f"class {short}(", f"{short} =")):
                    return f"{path}:{number}"
    except OSError:
        pass
    return str(path)


def _code_names(code: types.CodeType) -> set[str]:
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


def _children(obj: Any) -> Iterator[tuple[str, Any, str]]:
    """(name, object, holding module) for what ``obj`` refers to."""
    if isinstance(obj, types.MethodType):
        yield obj.__func__.__name__, obj.__func__, obj.__func__.__module__
        yield "self", obj.__self__, obj.__func__.__module__
        return
    if isinstance(obj, functools.partial):
        yield "func", obj.func, getattr(obj.func, "__module__", "")
        for value in (*obj.args, *obj.keywords.values()):
            yield "argument", value, getattr(obj.func, "__module__", "")
        return
    if isinstance(obj, types.FunctionType):
        module = obj.__module__
        names = _code_names(obj.__code__)
        for name in names:
            if name in obj.__globals__:
                value = obj.__globals__[name]
                yield name, value, module
                if isinstance(value, types.ModuleType) and not _is_library(value):
                    for attr in names & set(vars(value)):
                        yield f"{name}.{attr}", getattr(value, attr), value.__name__
        for cell in obj.__closure__ or ():
            with contextlib.suppress(ValueError):
                yield "closure", cell.cell_contents, module
        return
    cls = obj if inspect.isclass(obj) else type(obj)
    if not inspect.isclass(obj):
        for name, value in getattr(obj, "__dict__", {}).items():
            yield name, value, cls.__module__
        if isinstance(obj, torch.nn.Module):
            yield from ((n, m, cls.__module__) for n, m in obj.named_children())
    for klass in cls.__mro__:
        if _is_library(klass):
            continue
        for name, value in vars(klass).items():
            yield f"{klass.__qualname__}.{name}", value, klass.__module__


def hidden_paths(fn: Any, max_objects: int = 5000) -> list[HiddenPath]:
    """Scripted, traced and compiled callables within ``fn``'s reach (see the module docstring)."""
    found: dict[int, HiddenPath] = {}
    seen: set[int] = set()
    stack: list[tuple[str, Any, str]] = [(getattr(fn, "__name__", "target"), fn, "")]
    while stack and len(seen) < max_objects:
        name, obj, module = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        kind = _kind(obj)
        if kind is not None:
            qualified = f"{module}.{name}" if module else name
            found[id(obj)] = HiddenPath(kind, qualified, module, _definition(module, name))
            if kind == "TorchScript":
                continue
        if isinstance(obj, staticmethod | classmethod):
            obj = obj.__func__
        if not (inspect.isclass(obj) or callable(obj) or isinstance(obj, torch.nn.Module)):
            continue
        if _is_library(obj) and not isinstance(obj, types.MethodType | functools.partial):
            if inspect.isclass(obj) or not hasattr(obj, "__dict__") or _is_library(type(obj)):
                continue
        stack.extend(_children(obj))
    return list(found.values())


def import_without_torchscript(module_name: str, also: tuple[str, ...] = ()) -> types.ModuleType:
    """Import ``module_name`` again with TorchScript disabled: ``@torch.jit.script`` then returns
    the Python function itself. Every loaded module of the same top-level package as
    ``module_name`` or as a module in ``also`` is imported afresh (a scripted helper is often
    imported from a sibling module). Returns the new module."""
    packages = {name.split(".")[0] for name in (module_name, *also)}
    for name in list(sys.modules):
        if name.split(".")[0] in packages:
            del sys.modules[name]
    torch.jit._state.disable()  # type: ignore[no-untyped-call]
    try:
        return importlib.import_module(module_name)
    finally:
        torch.jit._state.enable()  # type: ignore[no-untyped-call]


@contextlib.contextmanager
def eager_compiled() -> Iterator[None]:
    """Run ``torch.compile``d functions eagerly (their Python code) while the block runs."""
    config = torch._dynamo.config
    previous = config.disable
    config.disable = True
    try:
        yield
    finally:
        config.disable = previous


# ---------------------------------------------------------------------------------------------
# Where hidden randomness shows
# ---------------------------------------------------------------------------------------------


def _digest(value: Any) -> Any:
    """A run-independent summary of a local variable (object ids and lazy draws left out)."""
    if isinstance(value, bool | int | float | str | type(None)):
        return value
    if type(value) is torch.Tensor:
        return ("tensor", tuple(value.shape), str(value.detach().reshape(-1)[:64].tolist()))
    if isinstance(value, np.ndarray) and value.dtype != object:
        return ("array", value.shape, value.reshape(-1)[:64].tolist())
    if isinstance(value, list | tuple) and len(value) <= 64:
        return tuple(_digest(v) for v in value)
    return type(value).__name__


def first_divergence(run: Any) -> str | None:
    """Run ``run()`` twice, tracing the checked code's lines and local variables; return
    "file:line in function" of the line after which the two runs' variables first differ
    (the call that drew randomness the oracle does not see), or None if they never differ."""
    traces: list[list[tuple[str, int, str, Any]]] = []
    for _ in range(2):
        events: list[tuple[str, int, str, Any]] = []

        def tracer(frame: Any, event: str, arg: Any, events: list[Any] = events) -> Any:
            path = os.path.abspath(frame.f_code.co_filename)
            if path.startswith(_LIBRARY_ROOTS) or path.startswith(_OWN_ROOT):
                return None
            if event in ("line", "return"):
                state = tuple((k, _digest(v)) for k, v in frame.f_locals.items())
                events.append((path, frame.f_lineno, frame.f_code.co_name, state))
            return tracer

        previous = sys.gettrace()
        sys.settrace(tracer)
        try:
            run()
        except BaseException:  # the replay may stop at the hidden draw's consequence
            pass
        finally:
            sys.settrace(previous)
        traces.append(events)
    first, second = traces
    for i, (a, b) in enumerate(zip(first, second, strict=False)):
        if a != b:
            for j in range(i - 1, -1, -1):  # the previous line of the same function made it
                if first[j][:1] == a[:1] and first[j][2] == a[2]:
                    return f"{first[j][0]}:{first[j][1]} in {first[j][2]}"
            return f"{a[0]}:{a[1]} in {a[2]}"
    return None
