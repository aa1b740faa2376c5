"""Adapters: code that draws with torch, numpy or `random` runs unchanged under the oracle.

Real implementations do not call ``rng.bernoulli``; they draw uniforms (``torch.rand``,
``rand_like``, ``random.random()``, a numpy ``Generator``), sample with ``torch.multinomial`` or
race exponentials (``probs.div(q.exponential_()).argmax()``). The enumerating oracle needs each
of those draws as a finite decision with known probabilities. The idea that makes this possible
is the *lazy uniform*: a uniform U in [0, 1) is not given a value. It is an interval [lo, hi),
first [0, 1). Each comparison ``U < t`` is one Bernoulli decision with probability
``(t - lo) / (hi - lo)`` (clipped to [0, 1]) and narrows the interval to the side taken, so a draw
may be compared any number of times, with any thresholds, and the joint law stays exact. An
inverse-CDF sample from U (``multinomial``, ``random.choices``, ``Generator.choice``) is one
categorical decision over the buckets the interval still overlaps. An exponential race over a
row of exponentials is one categorical decision with the racing weights (the race's law).
Any other use of a drawn value (``log(u)``, ``u * total``, ``float(u)``) cannot be followed and
raises `UnfollowableDrawError`: the check then reports "not checkable", never a verdict.

Seeds are modelled, not ignored: a draw is identified by (stream, position), where a stream is
recognised by the real generator's state. A generator re-seeded to an earlier state gives the
same positions again, hence the *same* random variables, so a loop that re-seeds every step has
correlated steps, as it really does. The real generators are advanced by the number of values
drawn, so states stay distinct; their values are never used.

Entry points: `lazy_uniform` (one lazy uniform for hand-written code), and the context managers
`route_torch`, `route_numpy`, `route_random` and `route_all`, which route every supported draw
of those libraries to a `RandomSource` while they are active. Unsupported torch draws
(``randn``, ``normal_``, ...) raise `UnfollowableDrawError` naming the draw.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import random as _random_module
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np
import torch

from casspec_ref.proof.enumerate import EnumeratingSource, NotCheckableError
from casspec_ref.sampling import RandomSource

Number = float | Fraction


class UnfollowableDrawError(NotCheckableError):
    """A random draw was used in a way the adapters cannot turn into exact decisions."""

    def __init__(self, what: str) -> None:
        super().__init__(f"not checkable: randomness the oracle does not see: {what}")


# ---------------------------------------------------------------------------------------------
# The book of lazy variables of one run
# ---------------------------------------------------------------------------------------------


@dataclass
class DrawVariable:
    """One drawn value: a uniform known to lie in [lo, hi), or an exponential (race only)."""

    kind: str  # "uniform" or "exponential"
    label: str
    lo: Number = 0.0
    hi: Number = 1.0
    raced: bool = False


class Draws:
    """The lazy random variables of one run, keyed by (stream, position), decided through
    ``rng``. Streams are recognised by a fingerprint of the real generator's state."""

    def __init__(self, rng: RandomSource | None) -> None:
        #: Low-precision dtypes (float32, bfloat16, float16) seen in thresholds and laws that
        #: met a draw, over every run (for the report's rounding note).
        self.low_precision: set[str] = set()
        self.reset(rng)

    def saw(self, value: Any) -> None:
        """Note the dtype of a tensor that meets a draw, when it is a low-precision float."""
        dtype = getattr(value, "dtype", None)
        if dtype in (torch.float32, torch.bfloat16, torch.float16, np.float32, np.float16):
            self.low_precision.add(str(dtype).replace("torch.", ""))

    def reset(self, rng: RandomSource | None) -> None:
        """Start a new run drawing from ``rng``: no variable is known, no stream is seen."""
        self.rng: RandomSource = rng  # type: ignore[assignment]
        self.exact = bool(getattr(rng, "exact", False))
        self.variables: dict[tuple[int, int], DrawVariable] = {}
        #: What Triton kernels hold in memory (`casspec_ref.proof.triton_draws`).
        self.marks: list[Any] = []
        self.streams: dict[Any, tuple[int, int]] = {}
        self.n_streams = 0

    def _zero(self) -> Number:
        return Fraction(0) if self.exact else 0.0

    def take(
        self, fingerprint: Any, n: int, advance: Callable[[], Any], kind: str, label: str
    ) -> list[DrawVariable]:
        """The ``n`` next variables of the stream at ``fingerprint``; advances the generator."""
        if fingerprint in self.streams:
            stream, pos = self.streams[fingerprint]
        else:
            stream, pos = self.n_streams, 0
            self.n_streams += 1
            self.streams[fingerprint] = (stream, pos)
        advance()
        self.streams[self._fingerprint_after(fingerprint, advance)] = (stream, pos + n)
        out = []
        for i in range(n):
            key = (stream, pos + i)
            var = self.variables.get(key)
            name = f"{label} (stream {stream}, value {pos + i})"
            if var is None:
                var = DrawVariable(kind, name, self._zero(), self._zero() + 1)
                self.variables[key] = var
            elif var.kind != kind or kind == "exponential":
                raise UnfollowableDrawError(
                    f"{name} re-draws a value of a re-seeded generator as a different kind of "
                    "draw (or races the same exponentials twice); the oracle does not model it"
                )
            out.append(var)
        return out

    @staticmethod
    def _fingerprint_after(before: Any, advance: Callable[[], Any]) -> Any:
        state = getattr(advance, "fingerprint", None)
        return state() if state is not None else ("after", before)

    def fresh(self, label: str) -> DrawVariable:
        """A variable of no stream (for `lazy_uniform`)."""
        key = (-1, len(self.variables))
        var = DrawVariable("uniform", label, self._zero(), self._zero() + 1)
        self.variables[key] = var
        return var

    def _number(self, value: Any) -> Number:
        if isinstance(value, Fraction) and self.exact:
            return value
        if isinstance(value, int) and not isinstance(value, bool) and self.exact:
            return Fraction(value)
        return float(value)

    def below(self, var: DrawVariable, threshold: Any, strict: bool) -> bool:
        """Whether the variable is < ``threshold`` (``strict``) or <= it: one decision."""
        if var.kind != "uniform":
            raise UnfollowableDrawError(f"{var.label} is an exponential compared with a number")
        t = self._number(threshold)
        if t != t:  # NaN compares False
            return False
        if t <= var.lo:
            return False if strict or t < var.lo else var.lo == var.hi
        if t >= var.hi:
            return True
        prob = (t - var.lo) / (var.hi - var.lo)
        if _bernoulli(self.rng, _prob(prob), var.label):
            var.hi = t
            return True
        var.lo = t
        return False

    def inverse_cdf(self, var: DrawVariable, weights: Any) -> int:
        """The bucket of the inverse-CDF sample of ``weights`` (unnormalized) at the variable."""
        if var.kind != "uniform":
            raise UnfollowableDrawError(f"{var.label} is an exponential used as a uniform")
        values = [self._number(w) for w in weights]
        total = sum(values, self._zero())
        if not total > 0:
            raise ValueError(f"cannot sample from weights with no mass: {list(weights)}")
        edges = [self._zero()]
        for w in values:
            edges.append(edges[-1] + w / total)
        edges[-1] = self._zero() + 1
        overlaps = []
        for i in range(len(values)):
            lo, hi = max(edges[i], var.lo), min(edges[i + 1], var.hi)
            overlaps.append(hi - lo if hi > lo and values[i] > 0 else self._zero())
        exact_law = self.exact and _all_exact(overlaps)
        law = np.array(overlaps, dtype=object if exact_law else np.float64)
        picked = _categorical(self.rng, law, var.label)
        var.lo, var.hi = max(edges[picked], var.lo), min(edges[picked + 1], var.hi)
        return int(picked)

    def race(self, variables: list[DrawVariable], weights: Any) -> int:
        """argmax_i weights_i / E_i over fresh exponentials E_i: a categorical draw."""
        for var in variables:
            if var.kind != "exponential" or var.raced:
                raise UnfollowableDrawError(f"{var.label} raced twice or is not an exponential")
            var.raced = True
        values = np.array([float(w) for w in weights], dtype=np.float64)
        if not (values > 0).any():
            return 0  # argmax of an all-zero row
        if (values < 0).any() or np.isnan(values).any():
            raise ValueError(f"an exponential race needs weights >= 0, got {values.tolist()}")
        label = variables[0].label if variables else "exponential race"
        return _categorical(self.rng, values, label)


def _bernoulli(rng: RandomSource, prob: Number, label: str) -> bool:
    if isinstance(rng, EnumeratingSource):
        return rng.bernoulli(prob, draw=label)
    return bool(rng.bernoulli(prob))


def _categorical(rng: RandomSource, law: np.ndarray, label: str) -> int:
    if isinstance(rng, EnumeratingSource):
        return rng.categorical(law, draw=label)
    return int(rng.categorical(law))


def _prob(value: Number) -> Number:
    return value if isinstance(value, Fraction) else float(value)


def _all_exact(values: list[Number]) -> bool:
    return all(isinstance(v, Fraction) for v in values)


# ---------------------------------------------------------------------------------------------
# The lazy uniform as a Python number
# ---------------------------------------------------------------------------------------------


class LazyUniform:
    """A uniform draw in [0, 1) that is only ever compared: each comparison is one exact
    decision and narrows what is known of the value. Arithmetic or ``float()`` on it raises
    `UnfollowableDrawError` (its value is never fixed)."""

    __slots__ = ("_book", "_var")

    def __init__(self, book: Draws, var: DrawVariable) -> None:
        self._book = book
        self._var = var

    def __lt__(self, other: Any) -> bool:
        return self._book.below(self._var, _plain(other), strict=True)

    def __le__(self, other: Any) -> bool:
        return self._book.below(self._var, _plain(other), strict=True)

    def __gt__(self, other: Any) -> bool:
        return not self._book.below(self._var, _plain(other), strict=True)

    def __ge__(self, other: Any) -> bool:
        return not self._book.below(self._var, _plain(other), strict=True)

    def _refuse(self, *args: Any) -> Any:
        raise UnfollowableDrawError(
            f"{self._var.label} is used in arithmetic or converted to a number; the adapters "
            "follow a uniform only through comparisons and inverse-CDF sampling"
        )

    __float__ = __int__ = __index__ = __bool__ = __round__ = _refuse
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = _refuse
    __truediv__ = __rtruediv__ = __pow__ = __rpow__ = __neg__ = __abs__ = _refuse
    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        self._refuse()
        return False

    def __repr__(self) -> str:
        return f"LazyUniform({self._var.label}, in [{float(self._var.lo)}, {float(self._var.hi)}))"


def _plain(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise UnfollowableDrawError("a scalar uniform compared with a tensor of many values")
        return value.item()
    if isinstance(value, np.generic):
        return value.item()
    return value


def lazy_uniform(rng: RandomSource, label: str = "lazy_uniform") -> LazyUniform:
    """One uniform in [0, 1) for hand-written code: compare it as often as needed,
    e.g. ``u = lazy_uniform(rng); token = 0 if u < a else 1 if u < a + b else 2``."""
    book = Draws(rng)
    return LazyUniform(book, book.fresh(label))


# ---------------------------------------------------------------------------------------------
# torch
# ---------------------------------------------------------------------------------------------

COMPARISONS = {"lt": (True, True), "le": (True, False), "gt": (False, False), "ge": (False, True)}
_COMPARE_ALIASES = {"less": "lt", "less_equal": "le", "greater": "gt", "greater_equal": "ge"}
_SHAPE_OPS = {
    "__getitem__",
    "view",
    "reshape",
    "squeeze",
    "unsqueeze",
    "flatten",
    "expand",
    "expand_as",
    "t",
    "transpose",
    "permute",
    "select",
    "narrow",
    "unbind",
    "split",
    "chunk",
    "repeat",
    "index_select",
    "view_as",
    "reshape_as",
    "movedim",
    "unflatten",
}
_KEEP_OPS = {"clone", "detach", "contiguous", "cpu", "to", "double", "float", "half", "type"}
_META_GETTERS: set[Any] = {
    inspect.getattr_static(torch.Tensor, name).__get__
    for name in ("shape", "dtype", "device", "ndim", "is_cuda", "layout", "requires_grad")
    + ("is_leaf", "grad_fn")
}
_META_OPS = {"size", "dim", "numel", "__len__", "is_floating_point", "element_size", "nelement"}
_META_OPS |= {"is_contiguous", "stride", "storage_offset", "ndimension", "get_device"}
_META_OPS |= {"is_complex", "is_signed"}
_DIV_OPS = {"div", "div_", "__truediv__", "true_divide", "divide"}


def _name(func: Any) -> str:
    return str(getattr(func, "__name__", func))


class LazyDraws(torch.Tensor):
    """A tensor of lazy draws (uniforms or exponentials): its storage holds NaN, and the
    variables are held in ``_vars`` (an object array of the tensor's shape). Only comparisons,
    shape operations, ``.item()``/``.tolist()`` and (for exponentials) the race
    ``weights / draws`` then ``argmax`` are followed."""

    _vars: np.ndarray
    _book: Draws
    #: True for ``exponentials.reciprocal()``: ``weights * draws`` then races as ``weights / E``.
    _inverse: bool = False
    #: (the tensor of draws this one is a view of, the flat indices it reads there): an
    #: in-place draw into the view (``u[a:b].uniform_(generator=g)``) replaces them there too.
    _origin: tuple[LazyDraws, np.ndarray] | None = None

    def __repr__(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        return f"LazyDraws(shape={tuple(self._vars.shape)})"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func in _META_GETTERS or _name(func) in _META_OPS:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        full = _name(func)
        name = _COMPARE_ALIASES.get(full.strip("_"), full.strip("_"))
        lazy = [a for a in args if isinstance(a, LazyDraws)]
        if name in COMPARISONS and len(args) == 2 and len(lazy) == 1:
            return _compare(name, args[0], args[1])
        if name in _DIV_OPS and len(args) == 2 and isinstance(args[1], LazyDraws):
            if not isinstance(args[0], LazyDraws) and not args[1]._inverse:
                return _Race.make(args[0], args[1])
        if name in ("mul", "rmul") and len(args) == 2 and len(lazy) == 1 and lazy[0]._inverse:
            return _Race.make(args[1] if args[0] is lazy[0] else args[0], lazy[0])
        if name == "reciprocal" and len(args) == 1 and len(lazy) == 1:
            return _reciprocal(lazy[0])
        if lazy and (name in _SHAPE_OPS or full in _SHAPE_OPS):
            return _reshape(func, args, kwargs)
        if lazy and name in _KEEP_OPS and len(lazy) == 1 and args[0] is lazy[0]:
            return _rewrap(lazy[0], lazy[0]._vars, _cast(lazy[0], args[1:], kwargs))
        if name in ("item", "tolist") and lazy:
            values = np.vectorize(lambda v: LazyUniform(lazy[0]._book, v), otypes=[object])(
                lazy[0]._vars
            )
            if name == "item":
                if values.size != 1:
                    raise ValueError("only one-element tensors can be converted to Python scalars")
                return values.reshape(-1)[0]
            return values.tolist()
        raise UnfollowableDrawError(
            f"torch {_name(func)} on a random draw; the adapters follow draws only through "
            "comparisons, shape operations and the exponential race"
        )


class _Race(torch.Tensor):
    """``weights / exponentials``: only ``argmax`` is followed (the exponential race)."""

    _weights: np.ndarray
    _vars: np.ndarray
    _book: Draws

    @staticmethod
    def make(weights: Any, draws: LazyDraws) -> _Race:
        draws._book.saw(weights)
        w = _float64(weights)
        shape = np.broadcast_shapes(tuple(w.shape), draws._vars.shape)
        race = torch.Tensor._make_subclass(_Race, torch.full(shape, float("nan")))
        race._weights = np.broadcast_to(w.numpy(), shape)
        race._vars = np.broadcast_to(draws._vars, shape)
        race._book = draws._book
        return race

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func in _META_GETTERS or _name(func) in _META_OPS:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        if _name(func) == "argmax" and isinstance(args[0], _Race):
            race = args[0]
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            keepdim = kwargs.get("keepdim", args[2] if len(args) > 2 else False)
            weights, variables = race._weights, race._vars
            if dim is None:
                weights, variables, dim = weights.reshape(-1), variables.reshape(-1), 0
            w = np.moveaxis(weights, dim, -1)
            v = np.moveaxis(variables, dim, -1)
            rows = w.reshape(-1, w.shape[-1])
            thunks = np.empty(rows.shape[0], dtype=object)
            for i, (wr, vr) in enumerate(zip(rows, v.reshape(-1, v.shape[-1]), strict=True)):
                thunks[i] = Thunk(functools.partial(race._book.race, list(vr), wr))
            shape = w.shape[:-1]
            if keepdim:
                shape = (*shape[:dim], 1, *shape[dim:])
            return PendingDraw.make(thunks.reshape(shape))
        raise UnfollowableDrawError(
            f"torch {_name(func)} on weights divided by exponential draws; only argmax (the "
            "exponential race) is followed"
        )

    def __repr__(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        return f"ExponentialRace(shape={tuple(self._vars.shape)})"


class Thunk:
    """One pending decision: made on first use, then remembered."""

    __slots__ = ("decide", "value")

    def __init__(self, decide: Callable[[], int]) -> None:
        self.decide: Callable[[], int] | None = decide
        self.value = 0

    def force(self) -> int:
        if self.decide is not None:
            self.value, self.decide = self.decide(), None
        return self.value


class PendingDraw(torch.Tensor):
    """Token ids of exponential races not decided yet. Vectorized code races every position
    (a recovered token for each draft, a bonus token) but uses one or two of them; a race is
    decided only when its token is used (anything but indexing and reshaping), so unused races
    add no branches to the enumeration."""

    _thunks: np.ndarray

    @staticmethod
    def make(thunks: np.ndarray) -> PendingDraw:
        out = torch.Tensor._make_subclass(PendingDraw, torch.zeros(thunks.shape, dtype=torch.long))
        out._thunks = thunks
        return out

    def forced(self) -> torch.Tensor:
        values = [t.force() for t in self._thunks.reshape(-1)]
        return torch.tensor(values, dtype=torch.long).reshape(self._thunks.shape)

    def __repr__(self, *args: Any, **kwargs: Any) -> str:  # type: ignore[override]
        return f"PendingRaceTokens(shape={tuple(self._thunks.shape)})"

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        if func in _META_GETTERS or _name(func) in _META_OPS:
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **kwargs)
        full = _name(func)
        if full in _SHAPE_OPS or full.strip("_") in _SHAPE_OPS:
            pending = [a for a in args if isinstance(a, PendingDraw)]
            if len(pending) == 1 and args[0] is pending[0]:
                flat = pending[0]._thunks.reshape(-1)
                ids = torch.arange(flat.size).reshape(pending[0]._thunks.shape)
                with torch._C.DisableTorchFunctionSubclass():
                    result = func(ids, *args[1:], **kwargs)

                def wrap(r: Any) -> Any:
                    if isinstance(r, torch.Tensor):
                        return PendingDraw.make(flat[r.numpy().reshape(-1)].reshape(tuple(r.shape)))
                    if isinstance(r, tuple | list):
                        return type(r)(wrap(x) for x in r)
                    return r

                return wrap(result)

        masked = _masked_use(full.strip("_"), args, kwargs)
        if masked is not None:
            return masked

        def force(value: Any) -> Any:
            if isinstance(value, PendingDraw):
                return value.forced()
            if isinstance(value, tuple | list):
                return type(value)(force(v) for v in value)
            return value

        with torch._C.DisableTorchFunctionSubclass():
            return func(*force(args), **{k: force(v) for k, v in kwargs.items()})


def _forced_where(pending: PendingDraw, mask: torch.Tensor) -> torch.Tensor:
    """The race tokens where ``mask`` is true, 0 elsewhere: races the mask drops stay undecided."""
    with torch._C.DisableTorchFunctionSubclass():
        keep = mask.detach().to(torch.bool)
    shape = np.broadcast_shapes(pending._thunks.shape, tuple(keep.shape))
    thunks = np.broadcast_to(pending._thunks, shape).reshape(-1)
    chosen = np.broadcast_to(keep.numpy(), shape).reshape(-1)
    values = [t.force() if c else 0 for t, c in zip(thunks, chosen, strict=True)]
    return torch.tensor(values, dtype=torch.long).reshape(shape)


def _masked_use(name: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``tokens * mask`` and ``torch.where(mask, tokens, other)`` with a plain boolean mask:
    vectorized samplers race every position and keep one with a mask, so only the kept races are
    decided (x * False is 0, and ``where`` ignores the side it does not pick). None when the
    call is not of that form."""
    if kwargs:
        return None
    if name == "mul" and len(args) == 2:
        pending, mask = args if isinstance(args[0], PendingDraw) else args[::-1]
        if isinstance(pending, PendingDraw) and _is_plain_bool(mask):
            return _forced_where(pending, mask)
    if name == "where" and len(args) == 3 and _is_plain_bool(args[0]):
        cond, left, right = args
        if isinstance(left, PendingDraw):
            left = _forced_where(left, cond)
        if isinstance(right, PendingDraw):
            right = _forced_where(right, ~cond)
        with torch._C.DisableTorchFunctionSubclass():
            return torch.where(cond, left, right)
    return None


def _is_plain_bool(value: Any) -> bool:
    return type(value) is torch.Tensor and value.dtype is torch.bool


def _cast(lazy: LazyDraws, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.dtype:
    with torch._C.DisableTorchFunctionSubclass():
        probe = torch.empty(0, dtype=lazy.dtype)
        for a in (*args, *kwargs.values()):
            if isinstance(a, torch.dtype):
                return a
            if isinstance(a, torch.Tensor):
                return a.dtype
        return probe.dtype


def _rewrap(like: LazyDraws, variables: np.ndarray, dtype: torch.dtype) -> LazyDraws:
    data = torch.full(variables.shape, float("nan"), dtype=dtype)
    out = torch.Tensor._make_subclass(LazyDraws, data)
    out._vars = variables
    out._book = like._book
    out._inverse = like._inverse
    return out


def _reciprocal(lazy: LazyDraws) -> LazyDraws:
    """``1 / E`` of exponentials: kept lazy, so that ``weights * (1 / E)`` is still a race."""
    if any(var.kind != "exponential" for var in lazy._vars.reshape(-1)):
        raise UnfollowableDrawError("torch reciprocal of a uniform draw; only exponentials race")
    out = _rewrap(lazy, lazy._vars, lazy.dtype)
    out._inverse = not lazy._inverse
    return out


#: Shape operations whose result is a view: an in-place draw into it changes its base too.
_VIEW_OPS = {"__getitem__", "select", "narrow", "view", "reshape", "squeeze", "unsqueeze"}
_VIEW_OPS |= {"flatten", "t", "transpose", "permute", "view_as", "movedim", "unflatten"}
_VIEW_OPS |= {"unbind", "split", "chunk"}


def _write_through(view: LazyDraws, variables: np.ndarray) -> None:
    """Put ``variables`` in the places ``view`` reads in the tensor it is a view of (and so on
    up): what an in-place draw into a view does to its base."""
    if view._origin is None:
        return
    base, indices = view._origin
    table = np.array(base._vars, dtype=object)  # a writable copy in the base's shape
    table.reshape(-1)[indices] = variables.reshape(-1)
    base._vars = table
    _write_through(base, table)


def _reshape(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Apply a shape operation to the variables through a tensor of their indices."""
    lazy = next(a for a in args if isinstance(a, LazyDraws))
    flat = lazy._vars.reshape(-1)
    ids = torch.arange(flat.size).reshape(lazy._vars.shape)
    swapped = [ids if a is lazy else a for a in args]
    if any(isinstance(a, LazyDraws) for a in swapped):
        raise UnfollowableDrawError(f"torch {_name(func)} combining several tensors of draws")
    with torch._C.DisableTorchFunctionSubclass():
        result = func(*swapped, **kwargs)

    is_view = _name(func) in _VIEW_OPS and not any(
        isinstance(a, torch.Tensor | list | np.ndarray) for a in swapped[1:]
    )

    def wrap(r: Any) -> Any:
        if isinstance(r, torch.Tensor):
            indices = r.numpy().reshape(-1)
            out = _rewrap(lazy, flat[indices].reshape(tuple(r.shape)), lazy.dtype)
            out._origin = (lazy, indices) if is_view else None
            return out
        if isinstance(r, tuple | list):
            return type(r)(wrap(x) for x in r)
        return r

    return wrap(result)


def _compare(name: str, left: Any, right: Any) -> torch.Tensor:
    """Elementwise ``left OP right`` where one side holds lazy uniforms: one decision each."""
    below, strict = COMPARISONS[name]
    if isinstance(right, LazyDraws):  # t OP u  ==  u (mirrored OP) t
        left, right = right, left
        mirror = {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}[name]
        below, strict = COMPARISONS[mirror]
    lazy: LazyDraws = left
    lazy._book.saw(right)
    with torch._C.DisableTorchFunctionSubclass():
        other = _float64(right)
    shape = np.broadcast_shapes(lazy._vars.shape, tuple(other.shape))
    variables = np.broadcast_to(lazy._vars, shape).reshape(-1)
    thresholds = np.broadcast_to(other.numpy(), shape).reshape(-1)
    out = []
    for var, t in zip(variables, thresholds, strict=True):
        if below:  # u < t (strict) or u <= t
            out.append(lazy._book.below(var, float(t), strict))
        else:  # u > t is not u <= t; u >= t is not u < t
            out.append(not lazy._book.below(var, float(t), not strict))
    return torch.tensor(out, dtype=torch.bool).reshape(shape)


def _float64(value: Any) -> torch.Tensor:
    """``value`` as a float64 tensor. A Python float goes through numpy: ``torch.as_tensor``
    would make it float32 first and move a threshold by up to 6e-8."""
    if isinstance(value, torch.Tensor):
        return value.detach().double()
    return torch.from_numpy(np.asarray(value, dtype=np.float64))


def _torch_fingerprint(generator: torch.Generator | None) -> Callable[[], Any]:
    gen = generator if generator is not None else torch.default_generator

    def fingerprint() -> Any:
        return ("torch", hash(gen.get_state().numpy().tobytes()))

    return fingerprint


class _Advance:
    """Advance a real generator by ``n`` values (their values are never used)."""

    def __init__(self, run: Callable[[], Any], fingerprint: Callable[[], Any]) -> None:
        self.run = run
        self.fingerprint = fingerprint

    def __call__(self) -> Any:
        return self.run()


def _torch_take(
    book: Draws, generator: torch.Generator | None, n: int, kind: str, label: str
) -> list[DrawVariable]:
    fp = _torch_fingerprint(generator)
    gen = generator if generator is not None else torch.default_generator

    def run() -> None:
        with torch._C.DisableTorchFunctionSubclass():
            _ORIGINAL_UNIFORM(torch.empty(max(n, 1), dtype=torch.float64), generator=gen)

    return book.take(fp(), n, _Advance(run, fp), kind, label)


def _shape_of(size: tuple[Any, ...]) -> tuple[int, ...]:
    if len(size) == 1 and isinstance(size[0], tuple | list | torch.Size):
        return tuple(int(s) for s in size[0])
    return tuple(int(s) for s in size)


def _lazy_tensor(
    book: Draws, shape: tuple[int, ...], dtype: torch.dtype | None, gen: Any, kind: str, label: str
) -> LazyDraws:
    n = int(np.prod(shape)) if shape else 1
    variables = np.empty(n, dtype=object)
    for i, var in enumerate(_torch_take(book, gen, n, kind, label)):
        variables[i] = var
    data = torch.full(shape, float("nan"), dtype=dtype or torch.get_default_dtype())
    out = torch.Tensor._make_subclass(LazyDraws, data)
    out._vars = variables.reshape(shape)
    out._book = book
    return out


_ORIGINAL_UNIFORM = torch.Tensor.uniform_


def _in_place_allowed(target: torch.Tensor) -> None:
    if target._base is not None:
        raise UnfollowableDrawError(
            "an in-place draw into a view of another tensor (q[i].exponential_()); draw into a "
            "whole tensor (q_i = torch.empty(V).exponential_()) so that the draws are followed"
        )


def _in_place(target: torch.Tensor, lazy: LazyDraws) -> LazyDraws:
    """Turn ``target`` itself into the lazy tensor (``exponential_``/``uniform_`` are in place).
    A view of a plain tensor (``q[i].exponential_()`` on a plain q) is refused: its base would
    hold no draws. A view of a tensor of draws puts the new draws in its base as well."""
    if isinstance(target, LazyDraws):
        _write_through(target, lazy._vars)
    else:
        _in_place_allowed(target)
    with torch.no_grad(), torch._C.DisableTorchFunctionSubclass():
        target.fill_(float("nan"))
    target.__class__ = LazyDraws
    target._vars = lazy._vars  # type: ignore[attr-defined]
    target._book = lazy._book  # type: ignore[attr-defined]
    target._inverse = False  # type: ignore[attr-defined]
    return target  # type: ignore[return-value]


def _torch_patches(book: Draws) -> dict[tuple[Any, str], Any]:
    def rand(*size: Any, generator: Any = None, dtype: Any = None, **_: Any) -> LazyDraws:
        return _lazy_tensor(book, _shape_of(size), dtype, generator, "uniform", "torch.rand")

    def rand_like(x: torch.Tensor, *, dtype: Any = None, **_: Any) -> LazyDraws:
        shape = tuple(x.shape)
        return _lazy_tensor(book, shape, dtype or x.dtype, None, "uniform", "torch.rand_like")

    def uniform_(self: torch.Tensor, a: float = 0, b: float = 1, *, generator: Any = None) -> Any:
        if (a, b) != (0, 1):
            raise UnfollowableDrawError(f"Tensor.uniform_({a}, {b}): only [0, 1) is followed")
        shape = tuple(self.shape)
        lazy = _lazy_tensor(book, shape, self.dtype, generator, "uniform", "Tensor.uniform_")
        return _in_place(self, lazy)

    def exponential_(self: torch.Tensor, lambd: float = 1.0, *, generator: Any = None) -> Any:
        shape = tuple(self.shape)
        lazy = _lazy_tensor(
            book, shape, self.dtype, generator, "exponential", "Tensor.exponential_"
        )
        return _in_place(self, lazy)

    def bernoulli(p: Any, *args: Any, generator: Any = None, **kwargs: Any) -> torch.Tensor:
        if args or kwargs.get("p") is not None:
            raise UnfollowableDrawError("torch.bernoulli with an explicit p argument")
        probs = p.detach() if isinstance(p, torch.Tensor) else _float64(p)
        lazy = _lazy_tensor(book, tuple(probs.shape), None, generator, "uniform", "bernoulli")
        return _compare("lt", lazy, probs).to(probs.dtype)

    def multinomial(
        probs: torch.Tensor,
        num_samples: int,
        replacement: bool = False,
        *,
        generator: Any = None,
        **_: Any,
    ) -> torch.Tensor:
        book.saw(probs)
        weights = probs.detach().double()
        rows = weights.reshape(-1, weights.shape[-1]).numpy()
        picks = []
        for row in rows:
            left = row.copy()
            drawn = []
            for _k in range(num_samples):
                (var,) = _torch_take(book, generator, 1, "uniform", "torch.multinomial")
                if not left.sum() > 0:
                    raise ValueError("multinomial: not enough categories with mass to sample")
                token = book.inverse_cdf(var, left)
                drawn.append(token)
                if not replacement:
                    left[token] = 0.0
            picks.append(drawn)
        out = torch.tensor(picks, dtype=torch.long)
        return out.reshape(*weights.shape[:-1], num_samples)

    def randint(*args: Any, generator: Any = None, **kwargs: Any) -> torch.Tensor:
        ints = [a for a in args if isinstance(a, int)]
        size = next((a for a in args if isinstance(a, tuple | list | torch.Size)), None)
        size = kwargs.get("size", size)
        low, high = (0, ints[0]) if len(ints) == 1 else (ints[0], ints[1])
        shape = _shape_of((size,))
        n = int(np.prod(shape)) if shape else 1
        variables = _torch_take(book, generator, n, "uniform", "torch.randint")
        picks = [low + book.inverse_cdf(v, np.ones(high - low)) for v in variables]
        return torch.tensor(picks, dtype=torch.long).reshape(shape)

    patches: dict[tuple[Any, str], Any] = {
        (torch, "rand"): rand,
        (torch, "rand_like"): rand_like,
        (torch, "multinomial"): multinomial,
        (torch, "bernoulli"): bernoulli,
        (torch, "randint"): randint,
        (torch.Tensor, "multinomial"): multinomial,
        (torch.Tensor, "uniform_"): uniform_,
        (torch.Tensor, "exponential_"): exponential_,
    }
    for name in ("randn", "randn_like", "randint_like", "randperm", "normal", "poisson"):
        patches[(torch, name)] = _refusing(f"torch.{name}")
    for name in ("normal_", "random_", "bernoulli_", "cauchy_", "log_normal_", "geometric_"):
        patches[(torch.Tensor, name)] = _refusing(f"Tensor.{name}")
    patches[(torch.Tensor, "bernoulli")] = _refusing("Tensor.bernoulli")
    return patches


def _refusing(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise UnfollowableDrawError(
            f"{name} draws randomness the adapters do not follow (supported: rand, rand_like, "
            "uniform_, multinomial, bernoulli, randint, exponential_ race)"
        )

    return refuse


@contextlib.contextmanager
def _patched(patches: dict[tuple[Any, str], Any]) -> Iterator[None]:
    saved = {key: key[0].__dict__.get(key[1], getattr(key[0], key[1])) for key in patches}
    try:
        for (owner, name), value in patches.items():
            setattr(owner, name, value)
        yield
    finally:
        for (owner, name), value in saved.items():
            setattr(owner, name, value)


@contextlib.contextmanager
def route_torch(rng: RandomSource | None, book: Draws | None = None) -> Iterator[Draws]:
    """Route torch's draws (``rand``, ``rand_like``, ``Tensor.uniform_``, ``multinomial``,
    ``bernoulli``, ``randint``, the ``exponential_`` race; any ``generator=``) to ``rng``.
    torch's global generator state is restored on exit."""
    book = book if book is not None else Draws(rng)
    state = torch.get_rng_state()
    try:
        with _patched(_torch_patches(book)):
            yield book
    finally:
        torch.set_rng_state(state)


# ---------------------------------------------------------------------------------------------
# Python's random
# ---------------------------------------------------------------------------------------------

_PY_RANDOM = _random_module._random.Random  # type: ignore[attr-defined]


def _random_take(book: Draws, gen: Any, n: int, label: str) -> list[DrawVariable]:
    def fp() -> Any:
        return ("random", hash(gen.getstate()))

    def run() -> None:
        for _ in range(n):
            _PY_RANDOM.random(gen)

    return book.take(fp(), n, _Advance(run, fp), "uniform", label)


def _random_patches(book: Draws) -> dict[tuple[Any, str], Any]:
    cls = _random_module.Random

    def random(self: Any) -> LazyUniform:
        return LazyUniform(book, _random_take(book, self, 1, "random.random")[0])

    def randbelow(self: Any, n: int) -> int:
        (var,) = _random_take(book, self, 1, "random.randrange/choice")
        return book.inverse_cdf(var, np.ones(n))

    def choices(
        self: Any, population: Any, weights: Any = None, *, cum_weights: Any = None, k: int = 1
    ) -> list[Any]:
        pool = list(population)
        if cum_weights is not None:
            cum = list(cum_weights)
            weights = [cum[0], *(b - a for a, b in zip(cum, cum[1:], strict=True))]
        w = list(weights) if weights is not None else [1] * len(pool)
        if book.exact and all(isinstance(x, int | Fraction) for x in w):
            law: Any = np.array([Fraction(x) for x in w], dtype=object)
        else:
            law = np.array([float(x) for x in w])
        out = []
        for var in _random_take(book, self, k, "random.choices"):
            out.append(pool[book.inverse_cdf(var, law)])
        return out

    patches: dict[tuple[Any, str], Any] = {
        (cls, "random"): random,
        (cls, "_randbelow"): randbelow,
        (cls, "choices"): choices,
    }
    for name in ("uniform", "gauss", "normalvariate", "expovariate", "getrandbits", "betavariate"):
        patches[(cls, name)] = _refusing(f"random.{name}")
    return patches


@contextlib.contextmanager
def route_random(rng: RandomSource | None, book: Draws | None = None) -> Iterator[Draws]:
    """Route Python's `random` (module functions and `random.Random` instances: ``random()``,
    ``choices``, ``choice``, ``randrange``, ``randint``, ``shuffle``, ``sample``) to ``rng``.
    ``random.random()`` returns a `LazyUniform`. The global state is restored on exit."""
    book = book if book is not None else Draws(rng)
    state = _random_module.getstate()
    module_names = ("random", "choices", "choice", "randrange", "randint", "shuffle", "sample")
    try:
        with _patched(_random_patches(book)):
            inst = _random_module._inst  # type: ignore[attr-defined]
            module = {(_random_module, n): getattr(inst, n) for n in module_names}
            with _patched(module):
                yield book
    finally:
        _random_module.setstate(state)


# ---------------------------------------------------------------------------------------------
# numpy
# ---------------------------------------------------------------------------------------------


class RoutedGenerator:
    """What ``np.random.default_rng`` returns inside `route_numpy`: the draws of a numpy
    `Generator` (``random``, ``choice``, ``integers``, ``uniform(0, 1)``) routed to the source.
    Other methods raise `UnfollowableDrawError`."""

    def __init__(self, book: Draws, real: np.random.Generator) -> None:
        self._book = book
        self._real = real

    def _take(self, n: int, label: str) -> list[DrawVariable]:
        real = self._real

        def fp() -> Any:
            return ("numpy", repr(real.bit_generator.state))

        def run() -> None:
            real.random(n)

        return self._book.take(fp(), n, _Advance(run, fp), "uniform", label)

    def random(self, size: Any = None, dtype: Any = np.float64) -> Any:
        shape = () if size is None else np.atleast_1d(size).tolist()
        n = int(np.prod(shape)) if shape else 1
        values = [LazyUniform(self._book, v) for v in self._take(n, "Generator.random")]
        if size is None:
            return values[0]
        out = np.empty(n, dtype=object)
        out[:] = values
        return out.reshape(shape)

    def uniform(self, low: float = 0.0, high: float = 1.0, size: Any = None) -> Any:
        if (low, high) != (0.0, 1.0):
            raise UnfollowableDrawError(f"Generator.uniform({low}, {high}): only [0, 1)")
        return self.random(size)

    def choice(self, a: Any, size: Any = None, replace: bool = True, p: Any = None) -> Any:
        pool = np.arange(a) if isinstance(a, int | np.integer) else np.asarray(a)
        n = 1 if size is None else int(np.prod(np.atleast_1d(size)))
        left = np.ones(len(pool)) if p is None else np.array(p, dtype=np.float64)
        picks = []
        for var in self._take(n, "Generator.choice"):
            i = self._book.inverse_cdf(var, left)
            picks.append(pool[i])
            if not replace:
                left[i] = 0.0
        if size is None:
            return picks[0]
        return np.array(picks).reshape(np.atleast_1d(size).tolist())

    def integers(self, low: int, high: int | None = None, size: Any = None) -> Any:
        lo, hi = (0, low) if high is None else (low, high)
        return self.choice(np.arange(lo, hi), size=size)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return _refusing(f"numpy Generator.{name}")


@contextlib.contextmanager
def route_numpy(rng: RandomSource | None, book: Draws | None = None) -> Iterator[Draws]:
    """Route numpy's draws to ``rng``: generators made by ``np.random.default_rng`` inside the
    block are `RoutedGenerator`s, and the legacy ``np.random.random``/``rand``/``choice`` are
    routed too. Generators created before the block are not seen (create them inside, or pass
    `RoutedGenerator(book, gen)`)."""
    book = book if book is not None else Draws(rng)
    real_default_rng = np.random.default_rng
    state = np.random.get_state()
    legacy = RoutedGenerator(book, np.random.default_rng(0))

    def default_rng(seed: Any = None) -> RoutedGenerator:
        return RoutedGenerator(book, real_default_rng(seed))

    def rand(*size: int) -> Any:
        return legacy.random(size if size else None)

    patches: dict[tuple[Any, str], Any] = {
        (np.random, "default_rng"): default_rng,
        (np.random, "random"): lambda size=None: legacy.random(size),
        (np.random, "random_sample"): lambda size=None: legacy.random(size),
        (np.random, "rand"): rand,
        (np.random, "choice"): legacy.choice,
    }
    for name in ("randn", "normal", "exponential", "uniform", "randint", "permutation"):
        patches[(np.random, name)] = _refusing(f"np.random.{name}")
    try:
        with _patched(patches):
            yield book
    finally:
        np.random.set_state(state)


@contextlib.contextmanager
def route_all(rng: RandomSource | None) -> Iterator[Draws]:
    """`route_torch`, `route_random` and `route_numpy` together, sharing one book of draws, and
    `casspec_ref.proof.triton_draws.route_triton` when triton has been imported (the checked
    code launches Triton kernels). ``rng`` may be None when every run calls
    ``book.reset(source)`` first (the checker does)."""
    book = Draws(rng)
    with contextlib.ExitStack() as stack:
        stack.enter_context(route_torch(rng, book))
        stack.enter_context(route_random(rng, book))
        stack.enter_context(route_numpy(rng, book))
        if "triton" in sys.modules:  # the checked code launches Triton kernels
            from casspec_ref.proof.triton_draws import route_triton

            stack.enter_context(route_triton(book))
        yield book
