"""Draws through Triton kernels: the checked code's kernels run in Triton's interpreter on a CPU,
and the oracle's lazy draws go through them undecided.

Triton's interpreter (``TRITON_INTERPRET=1``) runs a kernel in Python over numpy arrays, and its
loads and stores read and write the tensors' memory by address. So a lazy draw crosses into a
kernel as a *marked value* in memory:

- a uniform or an exponential (float32 or float64) is a NaN whose payload names an entry of this
  run's table of marks; a NaN keeps its payload through loads, stores, broadcasts, ``where`` and
  casts between float32 and float64;
- a token not decided yet (the bonus token, a race's winner) is an integer (int32 or int64) in a
  reserved negative range, ``MARK_BASE - entry``.

Moving a mark changes nothing. Computing with one is followed by the interpreter's builder,
which this module wraps while a check runs:

- ``u < t`` (any of the four orders) with u a uniform: one exact decision, as in torch code;
- ``w * (1 / E)`` or ``w / E`` with E exponential: a race score, and ``max``/``argmax`` of a block
  of scores (lanes outside the vocabulary at -inf or <= 0): one exponential race, a pending
  token; its maximum compares above any negative threshold (a running maximum's first block);
- integer arithmetic on a pending token: deferred (the same builder operation, applied to the
  token when it is decided); an integer comparison or an address computed from it decides it.

Anything else that meets a mark (``log(u)``, ``u + 1``, a sum, a dot product, an atomic, a
block pointer, a bfloat16 draw) raises `UnfollowableDrawError` naming the construct: the verdict
is NOT CHECKABLE, never a value read from a NaN. After a launch, a tensor that holds marks
becomes a tensor of draws (`LazyDraws`) or of pending tokens (`PendingDraw`) again, so the
torch code around the kernels, and the oracle reading the output, see what they would see in
torch code. Supported: triton 3.x (tested with 3.9.0), kernels launched as ``kernel[grid](...)``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from casspec_ref.proof.adapters import (
    COMPARISONS,
    Draws,
    DrawVariable,
    LazyDraws,
    PendingDraw,
    Thunk,
    UnfollowableDrawError,
)
from casspec_ref.proof.enumerate import NotCheckableError

# ---------------------------------------------------------------------------------------------
# Marks: how a draw is written in memory
# ---------------------------------------------------------------------------------------------

_TAG = 0x2D  # six payload bits that say "a mark" (a NaN numpy makes has payload 0)
_INDEX_BITS = 16
_F32_QUIET_NAN = 0x7FC00000
_F64_SHIFT = 29  # float32 -> float64 moves the mantissa up by 29 bits, payload included
#: Integer marks: MARK_BASE - entry, below any token id or -1 placeholder.
MARK_BASE = -(2**30)
_MAX_ENTRIES = 2**_INDEX_BITS


@dataclass
class _Draw:
    """A uniform or an exponential of the book; ``inverse`` for ``1 / E``."""

    var: DrawVariable
    inverse: bool = False


@dataclass
class _Score:
    """``weight / E`` (or ``weight * (1 / E)``): one lane of an exponential race."""

    weight: float
    var: DrawVariable


@dataclass
class _Top:
    """The maximum of a race's scores: positive, its value never fixed."""


@dataclass
class _Token:
    """A token id not decided yet."""

    thunk: Thunk


_Entry = _Draw | _Score | _Top | _Token


def _add(book: Draws, entry: _Entry) -> int:
    """Put ``entry`` in this run's table of marks (`Draws.reset` starts a new one); its index."""
    table: list[_Entry] = book.marks
    if len(table) >= _MAX_ENTRIES:
        raise UnfollowableDrawError(f"more than {_MAX_ENTRIES} draws in one run's Triton kernels")
    table.append(entry)
    return len(table) - 1


def _float_bits(index: np.ndarray, dtype: np.dtype) -> np.ndarray:
    bits32 = (_F32_QUIET_NAN | (_TAG << _INDEX_BITS) | index).astype(np.uint32)
    if dtype == np.float32:
        return bits32.view(np.float32)
    mantissa = (bits32 & np.uint32(0x7FFFFF)).astype(np.uint64) << np.uint64(_F64_SHIFT)
    return (mantissa | np.uint64(0x7FF << 52)).view(np.float64)


def encode(indices: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The marks of table entries ``indices`` as values of ``dtype``."""
    indices = np.asarray(indices, dtype=np.int64)
    if dtype in (np.float32, np.float64):
        return _float_bits(indices, np.dtype(dtype))
    if dtype in (np.int32, np.int64):
        return (MARK_BASE - indices).astype(dtype)
    raise UnfollowableDrawError(f"a random draw held in {np.dtype(dtype)} inside a Triton kernel")


def decode(data: np.ndarray) -> np.ndarray | None:
    """The table entry marked at each element (-1 where plain), or None when nothing is marked."""
    if data.size == 0:
        return None
    if data.dtype in (np.float32, np.float64):
        if not np.isnan(data.min()):  # one pass, no mask: most arrays hold no NaN
            return None
        bits = data.astype(np.float32).view(np.uint32).astype(np.int64)
        marked = np.isnan(data) & ((bits >> _INDEX_BITS) & 0x3F == _TAG)
        out = np.where(marked, bits & (_MAX_ENTRIES - 1), -1)
    elif data.dtype in (np.int32, np.int64):
        if data.min() > MARK_BASE:
            return None
        values = data.astype(np.int64)
        marked = (values <= MARK_BASE) & (values > MARK_BASE - _MAX_ENTRIES)
        if not marked.any():
            return None
        out = np.where(marked, MARK_BASE - values, -1)
    else:
        return None
    return out if (out >= 0).any() else None


# ---------------------------------------------------------------------------------------------
# Following the builder's operations
# ---------------------------------------------------------------------------------------------

#: Builder operations that move bits unchanged: a mark goes through them as it is.
_MOVES = {"create_load", "create_masked_load", "create_store", "create_masked_store"}
_MOVES |= {"create_splat", "create_broadcast", "create_reshape", "create_expand_dims"}
_MOVES |= {"create_trans", "create_join", "create_split", "create_cat", "create_select"}
_FLOAT_ORDER = {"OLT": "lt", "ULT": "lt", "OLE": "le", "ULE": "le"}
_FLOAT_ORDER |= {"OGT": "gt", "UGT": "gt", "OGE": "ge", "UGE": "ge"}
_RACE_OPS = {"create_fmul": "mul", "create_fdiv": "div", "create_precise_divf": "div"}
_INT_OPS = {"create_add", "create_sub", "create_mul", "create_sdiv", "create_udiv"}
_INT_OPS |= {"create_srem", "create_urem", "create_minsi", "create_maxsi", "create_minui"}
_INT_OPS |= {"create_maxui", "create_and", "create_or", "create_xor", "create_shl"}
_INT_OPS |= {"create_lshr", "create_ashr"}
_CASTS = {"create_fp_ext", "create_fp_trunc", "create_int_cast", "create_fp_to_fp"}
_FOLLOWED = "loads, stores, casts, where, comparisons with uniforms and the exponential race"


def _refuse(what: str) -> UnfollowableDrawError:
    """NOT CHECKABLE: ``what`` a Triton kernel did with a draw, and what is followed."""
    return UnfollowableDrawError(
        f"in a Triton kernel, {what}; the oracle follows draws through {_FOLLOWED}"
    )


def _on_draw(op: str) -> UnfollowableDrawError:
    return _refuse(f"{op.removeprefix('create_')} on a random draw")


class _Follow:
    """The wrapped builder's view of one run: its book, and the handle type of the interpreter."""

    def __init__(self, book: Draws, handle_type: Any) -> None:
        self.book = book
        self.handle = handle_type

    def entries(self, h: Any) -> np.ndarray | None:
        return decode(h.data) if isinstance(h, self.handle) else None

    def entry(self, index: int) -> _Entry:
        return self.book.marks[index]

    def forced(self, h: Any) -> Any:
        """``h`` with every pending token decided (its use needs the value)."""
        marks = self.entries(h)
        if marks is None:
            return h
        data = h.data.copy()
        for i in np.flatnonzero(marks.reshape(-1) >= 0):
            entry = self.entry(int(marks.reshape(-1)[i]))
            if not isinstance(entry, _Token):
                raise _refuse("a float draw used as an integer")
            data.reshape(-1)[i] = entry.thunk.force()
        return self.handle(data, h.dtype)

    def call(
        self, name: str, original: Callable[..., Any], builder: Any, args: tuple, kwargs: dict
    ) -> Any:
        if not any(self.entries(a) is not None for a in (*args, *kwargs.values())):
            return original(builder, *args, **kwargs)
        if kwargs:  # no followed operation takes keywords
            raise _on_draw(name)
        if name in _MOVES:
            return original(builder, *args)
        if name.startswith("create_fcmp") and name[len("create_fcmp") :] in _FLOAT_ORDER:
            return self.compare(_FLOAT_ORDER[name[len("create_fcmp") :]], *args)
        if name.startswith("create_icmp") or name == "create_addptr":
            return original(builder, *(self.forced(a) for a in args))
        if name in _RACE_OPS:
            return self.score(_RACE_OPS[name], original, builder, *args)
        if name in _INT_OPS:
            return self.deferred(original, builder, *args)
        if name in _CASTS:
            return self.cast(name, original, builder, *args)
        raise _on_draw(name)

    # -- comparisons ---------------------------------------------------------------------------
    def compare(self, order: str, lhs: Any, rhs: Any) -> Any:
        """``lhs ORDER rhs``, elementwise, where one side holds uniforms or a race's maximum."""
        left, right, lm, rm = _operands(lhs, rhs)
        with np.errstate(invalid="ignore"):  # the marked lanes' NaNs; each is decided below
            out = np.asarray(_plain_order(order, left, right), dtype=bool).copy()
        for i in _marked(lm, rm):
            a, b = int(lm.flat[i]), int(rm.flat[i])
            if a >= 0 and b >= 0:
                raise _refuse("two random draws compared")
            if a >= 0:
                out.flat[i] = self.order(order, a, right.flat[i], rhs.data.dtype)
            else:
                mirror = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}[order]
                out.flat[i] = self.order(mirror, b, left.flat[i], lhs.data.dtype)
        import triton.language as tl

        return self.handle(out, tl.int1)

    def order(self, order: str, index: int, threshold: Any, dtype: np.dtype) -> bool:
        """``mark ORDER threshold``: one decision for a uniform, a sure answer for a race's top.
        ``dtype`` is the threshold's (a float32 one is named in the report's rounding note)."""
        entry = self.entry(index)
        t = float(threshold)
        if isinstance(entry, _Top):
            if t < 0:  # a race's maximum is >= 0: the first block beats the -inf start
                return order in ("gt", "ge")
            raise _refuse("a race's maximum compared with a number >= 0 (maxima of two blocks)")
        if not isinstance(entry, _Draw) or entry.var.kind != "uniform":
            raise _refuse("an exponential or a race score compared with a number")
        self.book.saw(np.empty(0, dtype=dtype))
        below, strict = COMPARISONS[order]
        if below:
            return self.book.below(entry.var, t, strict)
        return not self.book.below(entry.var, t, not strict)

    # -- the exponential race -------------------------------------------------------------------
    def score(self, op: str, original: Callable[..., Any], builder: Any, lhs: Any, rhs: Any) -> Any:
        """``w * (1 / E)`` or ``w / E``: a race score in each marked lane."""
        out = original(builder, lhs, rhs)
        left, right, lm, rm = _operands(lhs, rhs)
        marks = np.full(out.data.shape, -1, dtype=np.int64)
        self.book.saw(np.empty(0, dtype=out.data.dtype))
        for i in _marked(lm, rm):
            a, b = int(lm.flat[i]), int(rm.flat[i])
            # weights * (1 / E) in either order; weights / E with E the divisor
            draw_side, weights = (b, left) if b >= 0 else (a, right)
            draw = self.entry(draw_side)
            if (a >= 0 and b >= 0) or not _races(op, draw, divisor=b >= 0):
                raise _refuse(
                    f"{op} with a random draw that is not a race score (w / E or w * (1 / E))"
                )
            assert isinstance(draw, _Draw)
            marks.flat[i] = _add(self.book, _Score(float(weights.flat[i]), draw.var))
        chosen = marks >= 0
        data = out.data.copy()
        data[chosen] = encode(marks[chosen], data.dtype)
        return self.handle(data, out.dtype)

    def race(self, values: np.ndarray, axis: int | None, keep_dims: bool, with_index: bool) -> Any:
        """``max`` (and ``argmax``) over lanes of race scores: the top and a pending token."""
        if axis is None:
            values, axis = values.reshape(-1), 0
        lanes = np.moveaxis(values, axis, -1)
        rows = lanes.reshape(-1, lanes.shape[-1])
        tokens = np.array([self.race_row(np.ascontiguousarray(row)) for row in rows])
        tops = np.array([_add(self.book, _Top()) for _ in rows])
        shape = lanes.shape[:-1]
        top = encode(tops, values.dtype).reshape(shape)
        index = encode(tokens, np.dtype(np.int32)).reshape(shape)
        if keep_dims:
            top, index = np.expand_dims(top, axis), np.expand_dims(index, axis)
        return (top, index) if with_index else (top, None)

    def race_row(self, row: np.ndarray) -> int:
        """The entry of the pending token that wins one row's race: argmax over lanes of scores
        ``w / E`` (>= 0) and plain lanes <= 0 (masked lanes), the leftmost of equal maxima."""
        marks = decode(row)
        marks = marks if marks is not None else np.full(row.shape, -1)
        plain = marks < 0
        if not np.all(row[plain] <= 0):  # NaN fails too
            raise _refuse("max over race scores beside a plain value above 0")
        lanes_in = np.flatnonzero(~plain).tolist()
        scores = [self.entry(int(marks[i])) for i in lanes_in]
        if not all(isinstance(s, _Score) for s in scores):
            raise _refuse("max or argmax over random draws that are not race scores")
        weights = np.array([s.weight for s in scores])  # type: ignore[union-attr]
        racing = [i for i, w in enumerate(weights) if w > 0]  # w <= 0 never beats w > 0
        zeros = [lanes_in[i] for i, w in enumerate(weights) if w == 0]
        zeros = sorted(zeros + np.flatnonzero(plain & (row == 0)).tolist())

        def winner() -> int:
            if racing:
                variables = [scores[i].var for i in racing]  # type: ignore[union-attr]
                return lanes_in[racing[self.book.race(variables, weights[racing])]]
            if zeros:  # no positive score: the leftmost lane holding 0 wins
                return zeros[0]
            raise _refuse("argmax over race scores whose weights are all negative")

        return _add(self.book, _Token(Thunk(winner)))

    # -- deferred integer arithmetic -------------------------------------------------------------
    def deferred(self, original: Callable[..., Any], builder: Any, lhs: Any, rhs: Any) -> Any:
        """Integer arithmetic on a pending token: the same operation, applied when it is decided."""
        out = original(builder, lhs, rhs)
        left, right, lm, rm = _operands(lhs, rhs)
        data = out.data.copy()
        for i in _marked(lm, rm):
            a, b = int(lm.flat[i]), int(rm.flat[i])
            x = self._value(left.flat[i], a, lhs)
            y = self._value(right.flat[i], b, rhs)

            def apply(x: Callable[[], Any] = x, y: Callable[[], Any] = y) -> int:
                one = original(builder, x(), y())
                return int(one.data.reshape(-1)[0])

            index = _add(self.book, _Token(Thunk(apply)))
            data.flat[i] = encode(np.array([index]), data.dtype)[0]
        return self.handle(data, out.dtype)

    def _value(self, value: Any, mark: int, h: Any) -> Callable[[], Any]:
        """A one-element handle of ``value``, or of the token it marks once decided."""
        if mark < 0:
            return lambda: self.handle(np.array([value], dtype=h.data.dtype), h.dtype)
        entry = self.entry(mark)
        if not isinstance(entry, _Token):
            raise _refuse("integer arithmetic on a float draw")
        return lambda: self.handle(np.array([entry.thunk.force()], dtype=h.data.dtype), h.dtype)

    def cast(
        self, name: str, original: Callable[..., Any], builder: Any, src: Any, *rest: Any
    ) -> Any:
        """Casts that keep a mark: float32 <-> float64, and integers of 32 or 64 bits."""
        out = original(builder, src, *rest)
        before, after = decode(src.data), decode(out.data)
        if after is None or before is None or not np.array_equal(before, after):
            raise _refuse(f"{name.removeprefix('create_')} of a random draw to {out.dtype}")
        return out


def _operands(lhs: Any, rhs: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Both operands broadcast to one shape, and the entry marked at each element (-1: plain)."""
    left, right = (np.ascontiguousarray(x) for x in np.broadcast_arrays(lhs.data, rhs.data))
    lm, rm = decode(left), decode(right)
    lm = lm if lm is not None else np.full(left.shape, -1)
    rm = rm if rm is not None else np.full(right.shape, -1)
    return left, right, lm, rm


def _marked(lm: np.ndarray, rm: np.ndarray) -> list[int]:
    """The flat positions where either operand holds a mark."""
    return np.flatnonzero((lm >= 0) | (rm >= 0)).tolist()


def _races(op: str, draw: _Entry, divisor: bool) -> bool:
    """Whether ``op`` of a weight and ``draw`` is a race score (and on the right side)."""
    if not isinstance(draw, _Draw) or draw.var.kind != "exponential":
        return False
    return (op == "mul" and draw.inverse) or (op == "div" and divisor and not draw.inverse)


def _plain_order(order: str, a: Any, b: Any) -> Any:
    return {"lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}[order](
        a, b
    )


# ---------------------------------------------------------------------------------------------
# Crossing a launch: tensors of draws into memory, marks back into tensors of draws
# ---------------------------------------------------------------------------------------------


def _plain(t: torch.Tensor) -> torch.Tensor:
    with torch._C.DisableTorchFunctionSubclass():
        return t.as_subclass(torch.Tensor)


def _int_view(plain: torch.Tensor) -> torch.Tensor:
    return plain.view({4: torch.int32, 8: torch.int64}[plain.element_size()])


def to_memory(book: Draws, t: Any) -> Any:
    """A plain tensor on ``t``'s memory, with ``t``'s draws or pending tokens written as marks."""
    if isinstance(t, LazyDraws):
        if t.dtype not in (torch.float32, torch.float64):
            raise _refuse(f"a random draw held in {t.dtype} (float32 and float64 are followed)")
        entries: list[_Entry] = [_Draw(v, t._inverse) for v in t._vars.reshape(-1)]
    elif isinstance(t, PendingDraw):
        entries = [_Token(th) for th in t._thunks.reshape(-1)]
    elif isinstance(t, torch.Tensor) and type(t) is not torch.Tensor:
        raise _refuse(f"a launch argument of type {type(t).__name__}")
    else:
        return t
    plain = _plain(t)
    indices = np.array([_add(book, e) for e in entries], dtype=np.int64)
    marks = encode(indices, np.dtype(str(plain.dtype).removeprefix("torch.")))
    with torch.no_grad():
        target = _int_view(plain) if plain.is_floating_point() else plain
        target.copy_(torch.from_numpy(marks.view(target.numpy().dtype)).reshape(plain.shape))
    return plain


def from_memory(book: Draws, t: Any) -> None:
    """Make ``t`` a tensor of draws or of pending tokens again where a kernel left marks in it."""
    if not isinstance(t, torch.Tensor):
        return
    data = _plain(t).detach().numpy()
    marks = decode(np.ascontiguousarray(data))
    if marks is None:
        return
    entries = [book.marks[m] if m >= 0 else None for m in marks.reshape(-1)]
    if data.dtype.kind == "f":
        if not all(isinstance(e, _Draw) for e in entries):
            raise _refuse("a race score or a mix of draws and plain values left in memory")
        inverse = {e.inverse for e in entries}  # type: ignore[union-attr]
        if len(inverse) > 1:
            raise _refuse("exponentials and their reciprocals left in one tensor")
        t.__class__ = LazyDraws
        t._vars = np.array([e.var for e in entries], dtype=object).reshape(data.shape)  # type: ignore
        t._book, t._inverse = book, inverse.pop()  # type: ignore[attr-defined]
        return
    plain_values = data.reshape(-1)
    thunks = np.empty(len(entries), dtype=object)
    for i, e in enumerate(entries):
        if isinstance(e, _Token):
            thunks[i] = e.thunk
        elif e is None:
            thunks[i] = Thunk(functools.partial(int, plain_values[i]))
        else:
            raise _refuse("a float draw left in integer memory")
    t.__class__ = PendingDraw
    t._thunks = thunks.reshape(data.shape)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# The context manager
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def route_triton(book: Draws) -> Iterator[None]:
    """While active, kernels launched in Triton's interpreter carry ``book``'s draws (see the
    module docstring); a kernel launched outside the interpreter is NOT CHECKABLE."""
    import triton
    from triton.runtime import interpreter
    from triton.runtime.jit import JITFunction

    follow = _Follow(book, interpreter.TensorHandle)
    builder_type = interpreter.InterpreterBuilder
    saved: dict[tuple[Any, str], Any] = {}

    def patch(owner: Any, name: str, value: Any) -> None:
        saved[(owner, name)] = owner.__dict__[name]
        setattr(owner, name, value)

    for name, original in list(vars(builder_type).items()):
        if name.startswith("create_") and callable(original):

            def method(self: Any, *args: Any, _n: str = name, _o: Any = original, **kw: Any) -> Any:
                return follow.call(_n, _o, self, args, kw)

            patch(builder_type, name, method)
    _patch_reductions(patch, follow, interpreter)
    _patch_builtin_lookup(patch, interpreter)
    _patch_launch(patch, book, interpreter.GridExecutor)

    def outside(*args: Any, **kwargs: Any) -> Any:
        raise NotCheckableError(
            "a Triton kernel launched outside Triton's interpreter; set TRITON_INTERPRET=1 "
            "before importing the module that defines it (`oracle check` sets it)"
        )

    patch(JITFunction, "run", outside)
    # The overflow check of integer arithmetic compares every sum with its bounds, which would
    # decide a pending token where it is only computed with; it asserts, it computes nothing.
    builder = interpreter.interpreter_builder
    options = builder.options
    builder.options = dataclasses.replace(options, sanitize_overflow=False)
    debugging = triton.knobs.compilation.front_end_debugging
    triton.knobs.compilation.front_end_debugging = True  # the kernel's errors are not wrapped
    try:
        yield
    finally:
        triton.knobs.compilation.front_end_debugging = debugging
        builder.options = options
        for (owner, name), value in saved.items():
            setattr(owner, name, value)


def _patch_reductions(patch: Callable[..., None], follow: _Follow, interpreter: Any) -> None:
    import triton.language as tl

    reduce_impl = interpreter.ReduceOps.apply_impl
    scan_impl = interpreter.ScanOps.apply_impl
    argmax = {
        tl.standard._argmax_combine_tie_break_left,
        tl.standard._argmax_combine_tie_break_fast,
    }

    def reduce(self: Any, input: Any) -> Any:
        values = input[0].handle.data
        if decode(np.ascontiguousarray(values)) is None:
            return reduce_impl(self, input)
        if self.combine_fn not in argmax and self.combine_fn is not tl.standard._elementwise_max:
            raise _refuse("a reduction other than max and argmax over random draws")
        with_index = self.combine_fn in argmax
        top, index = follow.race(values, self.axis, self.keep_dims, with_index)
        dtype = input[0].dtype.scalar
        if not with_index:
            return self.to_tensor(top, dtype)
        return self.to_tensor(top, dtype), self.to_tensor(index, tl.int32)

    def scan(self: Any, input: Any) -> Any:
        if any(decode(np.ascontiguousarray(t.handle.data)) is not None for t in input):
            raise _refuse("a scan over random draws")
        return scan_impl(self, input)

    patch(interpreter.ReduceOps, "apply_impl", reduce)
    patch(interpreter.ScanOps, "apply_impl", scan)


def _patch_builtin_lookup(patch: Callable[..., None], interpreter: Any) -> None:
    """Speed only: at every launch and every jitted helper's call the interpreter finds a
    language module's builtins with ``inspect.getmembers``, a third of a check's time; their
    names are looked up once here, and patched as the interpreter patches them."""
    import inspect

    import triton.language as tl

    names: dict[int, list[str]] = {}
    patch_attr = interpreter._patch_attr

    def patch_builtin(pkg: Any, builder: Any, scope: Any) -> None:
        if id(pkg) not in names:
            members = inspect.getmembers(pkg)
            names[id(pkg)] = [n for n, m in members if tl.core.is_builtin(m)]
        for name in names[id(pkg)]:
            member = getattr(pkg, name)
            if tl.core.is_builtin(member):  # not already patched by an enclosing call
                patch_attr(pkg, name, member, builder, scope)

    patch(interpreter, "_patch_builtin", patch_builtin)


def _library_interpreted() -> None:
    """Refuse a launch when triton's own jitted functions (``tl.argmax``, ``tl.max``, ...) were
    made for a GPU: triton was imported before ``TRITON_INTERPRET=1`` was set."""
    import triton.language as tl
    from triton.runtime.interpreter import InterpretedFunction

    if not isinstance(tl.standard.argmax, InterpretedFunction):
        raise NotCheckableError(
            "triton was imported before TRITON_INTERPRET=1 was set, so its library functions "
            "(tl.argmax, tl.max, ...) cannot run in the interpreter; set it before anything "
            "imports triton (transformers does; `oracle check` sets it first)"
        )


def _patch_launch(patch: Callable[..., None], book: Draws, executor: type) -> None:
    launch = executor.__call__

    def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        _library_interpreted()
        plain_args = [to_memory(book, a) for a in args]
        plain_kwargs = {k: to_memory(book, v) for k, v in kwargs.items()}
        try:
            out = launch(self, *plain_args, **plain_kwargs)
        except Exception as err:  # a jitted helper wraps what it raises in InterpreterError
            cause: BaseException | None = err
            while cause is not None and not isinstance(cause, NotCheckableError):
                cause = cause.__cause__
            raise (cause or err) from None
        for a in (*args, *kwargs.values()):
            from_memory(book, a)
        return out

    patch(executor, "__call__", call)
