"""Exact matmul kernels: one product, several ways to ask for it, a per-machine table chooses.

Every linear layer computes ``y = x W^T + b`` for a few rows of ``x`` (1 for the naive loop, the
tree size for a verify forward). The same product can be asked of the BLAS library in several
*forms*, and which one runs fastest depends on the CPU, the BLAS build and the thread count:

- ``linear``: ``F.linear(x, W, b)``;
- ``wxt``: ``(W @ x^T)^T + b``, the transposed product (``W`` is the left operand);
- ``split``: the rows of ``W`` cut into two blocks, both products asked for in one batched call
  (``torch.bmm``); a BLAS that runs a matrix-vector product on one thread runs the two
  problems of a batch on two, so a one-row product can read the weight twice as fast;
- ``packed``: oneDNN's inner product against a copy of ``W`` reordered once, at its first use,
  into the blocked layout the library's kernels read (`packed_weight`). It costs a second copy of
  the weight in memory, and pays where BLAS does not: its kernels for a few rows read the weight
  once and do all the rows' arithmetic on it, where a BLAS product of 5-16 rows turns
  compute-bound. Only on a CPU build with oneDNN, for float32 and bfloat16 (`packed_available`);
- ``linear@k`` / ``wxt@k`` / ``split@k`` / ``packed@k``: the ``n`` rows copied into a
  zero-filled ``(k, in)`` buffer (``k > n``), the base form applied, the first ``n`` output rows
  kept.

All forms compute every output element as the same dot product of the same numbers: output row
``i`` depends on input row ``i`` only, so padding rows change nothing but the cost. Only the
order of the floating-point additions may differ, i.e. the rounding. To keep the naive loop and
the speculative paths comparable, the form depends only on (weight shape, dtype, number of rows):
every forward reads the one active `KernelTable`, so one row count always rounds the same way.

An empty table means the default forms everywhere. How a table is measured on a machine and
cached is not part of the method: see `casspec_ref.accel.kernel_table`.

The table chooses per row count, so one row may round differently alone (the naive loop) than
among a verify forward's rows, and a greedy argmax can flip at a near-tie. The target's own
forwards therefore run *tiled* (`exact_linear(..., shape_invariant=True)`, `tiled_linear`): the
rows are cut into tiles of a fixed number of rows R, the last tile zero-padded, and each tile is
one library call of shape ``(R, in) x (in, out)``. Every call a target forward makes then has the
same shape, whatever its row count, so the library picks the same kernel, blocking and order of
additions for every call: that is invariant by construction. What a construction cannot fix is
whether a row's bits depend on its place inside the tile; every blocked matrix kernel computes
the rows of one register block alike, and the machine's check confirms it per weight shape
(`casspec_ref.accel.invariance`), choosing each shape's tile (base form and R) and keeping it in
the table's ``invariant`` entries. In float32, and in bfloat16 where the machine's timings make
it the naive loop's cheapest product, the check first tries the one-row constructions
(`one_row_tiles`), the cheapest one-row product first: `ROWS` (`one_row_products`: every row its
own problem of one batched call) and the one-row tiles (``linear@1``: every row its own call), so
the naive loop keeps the one-row kernel's speed. A shape without a checked tile runs one row per
call (`ROW_BY_ROW`): every call the same one-row shape, invariant without any check
(docs/floating_point.md).
"""

from __future__ import annotations

import functools
import weakref
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

#: The most rows a table entry covers one by one (and the most a form pads to).
MAX_ROWS = 16
#: Larger row counts share an entry per class: the smallest class at or above them (the last for
#: anything larger), timed at the class's own size: a tree of 17-32 nodes and a prompt's prefill
#: run in a measured form too, not in the default (docs/design.md, "Row counts above 16").
ROW_CLASSES = (32, 128, 512)
#: The base products a form can use (padding is added on top of one).
BASE_FORMS = ("linear", "wxt", "split", "packed")
#: The dtypes oneDNN's packed inner product takes.
PACKED_DTYPES = (torch.float32, torch.bfloat16)

#: (out, in, dtype, rows) -> form; what `exact_linear` consults.
Key = tuple[int, int, torch.dtype, int]


def table_rows(rows: int) -> int:
    """The row count of the table entry for a product over ``rows`` rows: ``rows`` itself up to
    `MAX_ROWS`, else its class in `ROW_CLASSES`."""
    if rows <= MAX_ROWS:
        return rows
    return next((c for c in ROW_CLASSES if rows <= c), ROW_CLASSES[-1])


@dataclass(frozen=True)
class Form:
    """One exact formulation: a base product and the row count it pads to (0 = no padding)."""

    base: str
    pad_to: int = 0

    @staticmethod
    def parse(text: str) -> Form:
        """``"linear"``, ``"wxt"``, ``"split"``, ``"wxt@2"``, ...; `ValueError` otherwise."""
        base, _, pad = text.partition("@")
        if base not in BASE_FORMS or (pad and not (pad.isdigit() and 1 < int(pad) <= MAX_ROWS)):
            raise ValueError(
                f"kernel form {text!r} is not one of {BASE_FORMS}, optionally followed by "
                f"'@k' with k in 2..{MAX_ROWS} (pad to k rows)"
            )
        return Form(base, int(pad) if pad else 0)

    def __str__(self) -> str:
        return f"{self.base}@{self.pad_to}" if self.pad_to else self.base


#: The tile sizes the machine's check tries (`casspec_ref.accel.invariance`): a larger tile makes
#: a one-row product (the naive loop's) cost more and a many-row one (a verify forward's) less.
TILE_ROWS = (2, 4, 8)
#: The construction of a shape no check has covered: one row per call, in the dtype's one-row
#: form (`default_form`). Every call has the one-row shape, so no check is needed.
ROW_BY_ROW = None
#: The one-row-products construction (`one_row_products`): each row multiplied by the weight on
#: its own, all rows in one batched call; with the one-row tiles (`one_row_tiles`), what the check
#: tries first in float32.
ROWS = Form("rows")


def one_row_tiles(dtype: torch.dtype) -> list[Form]:
    """The constructions whose every product is a one-row product, the naive loop's own: `ROWS`,
    then each base form one row per call (``linear@1``, ``wxt@1``, ``packed@1``: a tile of one
    row, `tiled_linear`). ``split``'s one-row product is `ROWS`'s for a lone row, so it is not
    repeated. A verify forward of T rows pays T such products: one batched call for `ROWS`, T
    calls for a one-row tile; which one-row product is cheapest depends on the machine (a BLAS
    that runs a lone row on one thread favours `ROWS`'s two half problems)."""
    return [ROWS, *(Form(f.base, 1) for f in base_forms(dtype) if f.base != "split")]


def default_form(dtype: torch.dtype, rows: int) -> Form:
    """The form used without a table entry: ``F.linear`` for float32/64, the transposed product
    for 16-bit floats (with one row padded to two, as a matrix-vector product is slower there)."""
    if dtype in (torch.bfloat16, torch.float16):
        return Form("wxt", 2 if rows == 1 else 0)
    return Form("linear")


@functools.cache
def _onednn_built() -> bool:
    """Whether this torch build has oneDNN's linear (asked once: the answer cannot change)."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def packed_available(dtype: torch.dtype, device: torch.device | str = "cpu") -> bool:
    """Whether the ``packed`` form can run for ``dtype`` on ``device`` (oneDNN's bfloat16
    product also needs CPU instructions some x86 CPUs lack: `_packs`)."""
    if torch.device(device).type != "cpu" or dtype not in PACKED_DTYPES:
        return False
    return _onednn_built() and _packs(dtype)


@functools.cache
def _packs(dtype: torch.dtype) -> bool:
    """Whether oneDNN packs a weight of ``dtype`` on this CPU (tried once, on a tiny weight)."""
    try:
        torch.ops.mkldnn._reorder_linear_weight(torch.zeros(2, 2, dtype=dtype))
    except RuntimeError:
        return False
    return True


def base_forms(dtype: torch.dtype) -> list[Form]:
    """The unpadded forms a CPU can run in ``dtype`` (``packed`` only where oneDNN takes it)."""
    return [Form(b) for b in BASE_FORMS if b != "packed" or packed_available(dtype)]


def tensor_stamp(t: torch.Tensor) -> tuple:
    """What a copy made from ``t`` must match to still stand for it: the storage (a replaced
    tensor moves it), the version counter (an in-place change moves it; an inference tensor,
    made under `torch.inference_mode`, has none: -1), the shape and the dtype."""
    version = -1 if t.is_inference() else t._version
    return (t.data_ptr(), version, tuple(t.shape), t.dtype)


#: id(weight) -> (what the weight was when packed, its packed copy); leaves with its weight.
_PACKED: dict[int, tuple[tuple, torch.Tensor]] = {}


def packed_weight(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` reordered into oneDNN's blocked layout: made on first use, then reused until the
    weight is changed in place or replaced (`tensor_stamp`; an in-place change to an inference
    tensor inside inference mode is not seen)."""
    stamp = tensor_stamp(weight)
    hit = _PACKED.get(id(weight))
    if hit is None:
        weakref.finalize(weight, _PACKED.pop, id(weight), None)
    if hit is None or hit[0] != stamp:
        hit = (stamp, torch.ops.mkldnn._reorder_linear_weight(weight.detach()))
        _PACKED[id(weight)] = hit
    return hit[1]


def run_form(
    form: Form, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """``x @ weight.T + bias`` computed in ``form``. x: ``(..., in)``; returns ``(..., out)``."""
    if form.base == "packed" and not packed_available(x.dtype, x.device):
        raise ValueError(
            f"kernel form 'packed' needs a CPU build of torch with oneDNN and one of "
            f"{PACKED_DTYPES}; got {x.dtype} on {x.device.type}"
        )
    # Row-major rows, as calibrated: a transposed view (the output of a `wxt` product feeding
    # the next one) sends the same product down a BLAS path several times slower.
    rows = x.reshape(-1, x.shape[-1]).contiguous()  # (N, in)
    n = rows.shape[0]
    if form.pad_to > n:
        padded = rows.new_zeros(form.pad_to, rows.shape[1])  # (k, in), contiguous
        padded[:n] = rows
        rows = padded
    if form.base == "linear":
        out = F.linear(rows, weight, bias)  # (k, out)
    elif form.base == "wxt":
        out = (weight @ rows.T).T  # (k, out)
    elif form.base == "packed":
        out = _linear_pointwise()(rows, packed_weight(weight), None, "none", [], "")
    else:  # split: (2, out/2, in) blocks times the same (in, k) rows, one batched call
        out_f = weight.shape[0]
        if out_f % 2:
            raise ValueError(f"kernel form 'split' needs an even number of outputs, got {out_f}")
        blocks = weight.view(2, out_f // 2, weight.shape[1])  # (2, out/2, in)
        out = torch.bmm(blocks, rows.T.expand(2, -1, -1)).reshape(out_f, -1).T  # (k, out)
    if bias is not None and form.base != "linear":
        out = out + bias
    if form.pad_to > n:
        out = out[:n]  # (N, out)
    return out.reshape(*x.shape[:-1], weight.shape[0])  # (..., out)


@dataclass
class KernelTable:
    """The chosen form per (out, in, dtype, rows); a missing entry means `default_form`."""

    forms: dict[Key, Form] = field(default_factory=dict)
    #: (out, in, dtype) -> the form whose rows were checked to be the same bits at every row
    #: count, position and thread count on this machine (`casspec_ref.accel.invariance`).
    invariant: dict[tuple[int, int, torch.dtype], Form] = field(default_factory=dict, kw_only=True)

    def form_for(self, out_features: int, in_features: int, dtype: torch.dtype, rows: int) -> Form:
        form = self.forms.get((out_features, in_features, dtype, table_rows(rows)))
        return default_form(dtype, rows) if form is None else form


_ACTIVE = KernelTable()


def active_table() -> KernelTable:
    """The table `exact_linear` consults (empty = default forms everywhere)."""
    return _ACTIVE


def use_table(table: KernelTable | None) -> KernelTable:
    """Install ``table`` (None = empty) for every forward; return the previous one."""
    global _ACTIVE
    previous = _ACTIVE
    _ACTIVE = KernelTable() if table is None else table
    return previous


def exact_linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    shape_invariant: bool = False,
) -> torch.Tensor:
    """``x @ weight.T + bias`` in the form the active table chose for this shape and row count;
    with ``shape_invariant``, on a CPU, tiled (`tiled_linear`) in the shape's checked tile
    (`KernelTable.invariant`), or row by row where the shape has none (`ROW_BY_ROW`).

    Args:
        x: ``(..., in)``; weight: ``(out, in)``; bias: ``(out,)`` or None.
    Returns:
        ``(..., out)``.
    """
    if shape_invariant and x.device.type == "cpu":
        tile = _ACTIVE.invariant.get((weight.shape[0], weight.shape[1], x.dtype), ROW_BY_ROW)
        return tiled_linear(tile, x, weight, bias)
    rows = x.numel() // x.shape[-1]
    form = _ACTIVE.forms.get((weight.shape[0], weight.shape[1], x.dtype, table_rows(rows)))
    if form is None:
        # The defaults were measured on CPUs. On a GPU a small model's forward waits for the
        # host to launch kernels, and F.linear is one launch where a padded form is four.
        form = default_form(x.dtype, rows) if x.device.type == "cpu" else Form("linear")
    return apply_form(form, x, weight, bias)


def tile_rows(tile: Form | None) -> int:
    """The rows of one call of ``tile`` (`tiled_linear`): its ``pad_to``; 1 row by row (``tile``
    None, or a one-row tile such as ``linear@1``)."""
    return 1 if tile is None else max(tile.pad_to, 1)


def tiled_linear(
    tile: Form | None, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """``x @ weight.T + bias`` with every library call of one shape: the rows cut into tiles of
    R = ``tile.pad_to`` rows, the last zero-padded to R, each tile one call in ``tile.base``
    (``tile`` None: one row per call, in the dtype's one-row form). A row's output depends on
    its own row, the shapes and its place in the tile, never on how many rows the call holds.

    Args:
        x: ``(..., in)``; weight: ``(out, in)``; bias: ``(out,)`` or None.
    Returns:
        ``(..., out)``.
    """
    if tile == ROWS:
        return one_row_products(x, weight, bias)
    call, size = _tile_call(tile, x.dtype)
    rows = x.reshape(-1, x.shape[-1])  # (N, in)
    n = rows.shape[0]
    if n == size:  # one whole tile (the naive loop's product when R = 1)
        out = apply_form(call, rows.contiguous(), weight, bias)
    elif n < size:  # one padded tile (the naive loop's product, a small tree's)
        padded = torch.cat((rows, _zeros(size - n, rows.shape[1], x.dtype, x.device)))  # (R, in)
        out = apply_form(call, padded, weight, bias)[:n]
    else:
        if n % size:  # a forward padded once (`row_multiple`) already has whole tiles
            rows = F.pad(rows, (0, 0, 0, -n % size))  # (N', in), N' a multiple of R
        rows = rows.contiguous()
        tiles = [apply_form(call, rows[s : s + size], weight, bias) for s in range(0, n, size)]
        out = torch.cat(tiles)[:n]  # (N, out)
    return out.reshape(*x.shape[:-1], weight.shape[0])  # (..., out)


def one_row_products(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """``x @ weight.T + bias`` as one-row products (`ROWS`): one batched call (``torch.bmm``)
    whose every problem is one row times ``weight.T``, a ``(1, in) x (in, out)`` product; a
    single row is cut into its two halves of outputs instead, two problems, so that two threads
    share the weight's read as the naive loop's fastest product does (`split`). Each output is
    one dot product of a row and a weight row, summed by a matrix-vector kernel in an order it
    picks from the problem's shape: no other row and no row count enter it. That the library
    keeps each problem of a batch to itself at every batch size and thread count, and sums an
    output alike in a half-width problem and a whole one, is what the machine's check confirms
    (`casspec_ref.accel.invariance`). In float32 this is the fast exact form: the fastest
    one-row product is a matrix-vector kernel, whose rounding no many-row product shares.

    Args:
        x: ``(..., in)``; weight: ``(out, in)``; bias: ``(out,)`` or None.
    Returns:
        ``(..., out)``.
    """
    rows = x.reshape(-1, x.shape[-1]).contiguous()  # (N, in)
    (n, in_f), out_f = rows.shape, weight.shape[0]
    if n == 1 and out_f % 2 == 0 and weight.is_contiguous():  # each half of W^T: two problems
        half = out_f // 2
        w_t = weight.as_strided((2, in_f, half), (half * in_f, 1, in_f), weight.storage_offset())
        lhs = rows.as_strided((2, 1, in_f), (0, in_f, 1), rows.storage_offset())  # (2, 1, in)
    else:  # each row times the whole W^T: N problems
        w_t = weight.T.expand(n, in_f, out_f)  # (N, in, out), a view
        lhs = rows.unsqueeze(1)  # (N, 1, in)
    out = torch.bmm(lhs, w_t).view(*x.shape[:-1], out_f)  # (..., out)
    return out if bias is None else out + bias


def row_multiple(dtype: torch.dtype) -> int:
    """The rows a target forward in ``dtype`` pads to a multiple of, once, so that its products
    need no padding of their own: the smallest tile's rows. Products in that tile run whole
    tiles; a shape with a larger tile pads its own (padding every product to the largest tile
    would make the smaller tiles' products two calls)."""
    sizes = [tile_rows(t) for (_, _, d), t in _ACTIVE.invariant.items() if d == dtype]
    return min(sizes, default=1)


@functools.cache
def _zeros(rows: int, cols: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A ``(rows, cols)`` block of zeros, made once and only ever read (a tile's padding)."""
    return torch.zeros(rows, cols, dtype=dtype, device=device)


@functools.cache
def _tile_call(tile: Form | None, dtype: torch.dtype) -> tuple[Form, int]:
    """The form of each of ``tile``'s calls, and its rows (`tile_rows`)."""
    return (default_form(dtype, 1) if tile is None else Form(tile.base)), tile_rows(tile)


def apply_form(
    form: Form, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """``x @ weight.T + bias`` in ``form`` as decoding asks for it (and calibration times it):
    `run_form`, except for the three most frequent products, called directly: an unpadded
    ``linear``, a one-row ``split`` (the naive loop's every product) and an unpadded ``packed``
    whose weight is already packed (most products of a verify forward)."""
    if form.pad_to:
        return run_form(form, x, weight, bias)
    if form.base == "linear":
        return F.linear(x, weight, bias)
    if form.base == "split" and weight.shape[0] % 2 == 0:
        if x.numel() == x.shape[-1] and x.is_contiguous():  # one row
            return _split_one_row(x, weight, bias)
    if form.base == "packed":
        return _packed_rows(x, weight, bias)
    return run_form(form, x, weight, bias)  # (which refuses an odd split)


def _split_one_row(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None
) -> torch.Tensor:
    """`run_form`'s ``split`` for one contiguous row, without its general bookkeeping (the naive
    loop's every product, where that bookkeeping is a measurable share of a forward:
    docs/design.md, "The three most frequent products"). The same batched call on operands of the
    same layout (the row seen as a column of strides (1, in) for both blocks), so the same bits
    (tested)."""
    out_f, in_f = weight.shape
    column = x.as_strided((2, in_f, 1), (0, 1, in_f), x.storage_offset())  # (2, in, 1), a view
    out = torch.bmm(weight.view(2, out_f // 2, in_f), column).view(*x.shape[:-1], out_f)
    return out if bias is None else out + bias


@functools.cache
def _linear_pointwise() -> torch._ops.OpOverload:
    """oneDNN's inner product, resolved once (asked for only after `packed_available`, or for a
    weight already packed)."""
    return torch.ops.mkldnn._linear_pointwise.default


def _packed_rows(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """`run_form`'s unpadded ``packed`` product without its general bookkeeping, for a weight
    packed before and unchanged since (otherwise `run_form`, which packs it and checks that the
    form can run): most products of a verify forward, where that bookkeeping is a measurable
    share (docs/design.md, "The three most frequent products"). The same call on the same
    operands (tested)."""
    hit = _PACKED.get(id(weight))
    if hit is None or hit[0] != tensor_stamp(weight) or not x.is_cpu or x.dtype != weight.dtype:
        return run_form(Form("packed"), x, weight, bias)
    rows = x.reshape(-1, x.shape[-1]).contiguous()  # (N, in), row-major as calibrated
    out = _linear_pointwise()(rows, hit[1], None, "none", [], "")  # (N, out)
    out = out if bias is None else out + bias
    return out.view(*x.shape[:-1], weight.shape[0])  # (..., out)
