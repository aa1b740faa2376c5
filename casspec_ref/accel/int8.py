"""Real int8 kernels for the W8A8 draft: the fast counterpart of the readable fake-quant kernel.

`casspec_ref.dsia.act_quant.QuantKernel` with ``bits=8, weight_bits=8`` *simulates* W8A8: it
rounds activations (per token) and weights (per output channel) to the symmetric absmax grid of
`quantize_absmax` and multiplies in float. `Int8Kernel` computes the same product with integer
kernels, using that same `quantize_absmax` for the weights, and keeps **one int8 copy of each
quantized weight** in the kernel object: about 128 MiB for all linears of SmolLM2-135M
including the tied head (a quarter of its fp32 weights), remade when its weight is changed in
place or replaced (`casspec_ref.base.kernels.tensor_stamp`). Two backends:

- ``"fbgemm"`` (CPU default): PyTorch's dynamic quantized linear
  (``torch.ops.quantized.linear_dynamic`` on a prepacked per-channel weight), called once per
  token row so that the activation scale is per token. Its activation quantization is
  *asymmetric* (affine uint8 over the row's [min, max]), not the readable path's symmetric
  absmax: the two agree closely, not bit for bit (tested; measured in docs/dsia.md), and the
  kernel reads a quarter of the bytes of fp32 (timings in docs/dsia.md).
- ``"int_mm"`` (CUDA default; also runs on CPU): ``torch._int_mm`` int8 x int8 -> int32, then
  ``* scale_x * scale_w``: exactly the readable path's math. On the CPUs measured it was barely
  faster than fp32 for one row (docs/dsia.md), so it is not the CPU default.

On the fbgemm backend the linears that read the same input one after the other in a block
(q, k, v; gate, up) run as **one** product over their stacked int8 weights: the first call of a
group computes the group and keeps the others' outputs for their own calls. Integer accumulation
is exact and the rescaling is per output element, so every output is bit for bit what the
separate products give (tested); a fbgemm call costs ~15 us before it reads a byte, and this
saves three of the seven calls per block. The stacks are built during the first forward, by
each group's last member, so that all one-time setup stays in the draft's first call.

Choose it per forward by picking the plan (`int8_plan`).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from pathlib import Path
from typing import Any, NamedTuple

import torch

from casspec_ref.base.dsia_checks import check_names
from casspec_ref.base.kernels import exact_linear, tensor_stamp
from casspec_ref.dsia.act_quant import quantize_absmax
from casspec_ref.plan import LINEAR_NAMES, ExecutionPlan

BACKENDS = ("auto", "fbgemm", "int_mm")
#: Linears a block calls one after the other on the same input, each name mapped to its group.
GROUP_OF: dict[str, tuple[str, ...]] = {
    name: g for g in (("attn_q", "attn_k", "attn_v"), ("mlp_gate", "mlp_up")) for name in g
}
#: Each group -> the name its stacked pack is kept under.
GROUP_KEY: dict[tuple[str, ...], str] = {g: "+".join(g) for g in GROUP_OF.values()}


class _Pack(NamedTuple):
    """fbgemm's prepacked int8 weight and what it was made from."""

    packed: Any  # torch.ops.quantized.linear_prepack's result
    stamps: tuple[tuple, ...]  # `_stamp` of each weight stacked in it (one, or a group's)
    sizes: tuple[int, ...]  # each stacked weight's D_out
    n_bytes: int  # int8 bytes it holds


@dataclass(frozen=True)
class Int8Kernel:
    """A `LinearKernel` running W8A8 with real int8 kernels on selected linear layers.

    Attributes:
        names: which linears (see `LINEAR_NAMES`) are quantized; the others run exactly.
        layers: which block indices are quantized (``None`` = all); the head is layer -1.
        backend: ``"fbgemm"`` (CPU): PyTorch's dynamic quantized linear, called one token row
            at a time so that the activation scale stays per token; ``"int_mm"``:
            ``torch._int_mm`` (CUDA, and CPU); ``"auto"``: fbgemm on CPU tensors, int_mm
            elsewhere.
        reduce_range: fbgemm only: quantize activations to 7 bits (needed on CPUs without
            VNNI to avoid saturating 16-bit accumulations); ``None`` = exactly on those CPUs
            (`lacks_vnni`).
    """

    names: frozenset[str] = frozenset(LINEAR_NAMES)
    layers: frozenset[int] | None = None
    backend: str = "auto"
    reduce_range: bool | None = None
    #: (layer, name) -> (transposed int8 weight (D_in, D_out), its scale (D_out,), stamp)
    _int8: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor, tuple]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )
    #: (layer, name or a group's key) -> its fbgemm pack
    _packed: dict[tuple[int, str], _Pack] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )
    #: (layer, name) -> the weight and bias it was last called with (references, not copies):
    #: what lets the first linear of a group stack the group's weights.
    _seen: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor | None]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )
    #: (layer, name) -> (input, its version, weight stamp, output): a group member's output,
    #: computed by the group's first linear, waiting for the member's own call.
    _stash: dict[tuple[int, str], tuple[torch.Tensor, int, tuple, torch.Tensor]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if self.reduce_range is None:  # frozen: set once, here
            object.__setattr__(self, "reduce_range", lacks_vnni())
        if self.backend not in BACKENDS:
            raise ValueError(f"Int8Kernel.backend={self.backend!r}: allowed are {BACKENDS}")
        check_names(self.names, LINEAR_NAMES, "Int8Kernel.names")

    def applies(self, layer: int, name: str) -> bool:
        """Whether this kernel quantizes linear ``name`` of block ``layer``."""
        return name in self.names and (self.layers is None or layer in self.layers)

    def __call__(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        layer: int,
        name: str,
    ) -> torch.Tensor:
        if not self.applies(layer, name):
            return exact_linear(x, weight, bias)
        x2 = x.reshape(-1, x.shape[-1])  # (rows, D_in)
        if self.backend == "int_mm" or (self.backend == "auto" and not x2.is_cpu):
            out = self._int_mm_matmul(x2, weight, bias, layer, name)
        else:
            stamp = _stamp(weight, bias)
            group = GROUP_OF.get(name)
            if group is None:
                out = self._fbgemm_alone(x2, weight, bias, stamp, (layer, name))
            else:
                out = self._fbgemm_member(x, x2, weight, bias, stamp, layer, name, group)
        return out.reshape(*x.shape[:-1], weight.shape[0])  # (..., D_out)

    def _int_mm_matmul(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        layer: int,
        name: str,
    ) -> torch.Tensor:
        key = (layer, name)
        stamp = _stamp(weight, None)  # the bias is added after the integer product
        hit = self._int8.get(key)
        if hit is None or hit[2] != stamp:
            q, scale = quantize_absmax(weight, 8)  # (D_out, D_in) int8, (D_out, 1)
            # int8 x int8 needs the transposed weight contiguous: (D_in, D_out).
            hit = (q.T.contiguous(), scale.squeeze(-1), stamp)
            self._int8[key] = hit
        qw_t, scale_w = hit[0], hit[1]
        qx, scale_x = quantize_absmax(x.float(), 8)  # (rows, D_in) int8, (rows, 1)
        rows = qx.shape[0]
        if rows <= 16:
            # torch._int_mm takes more than 16 rows: pad with zero rows (each output row depends
            # on its own input row only, so the first `rows` rows are unchanged).
            qx = torch.cat((qx, qx.new_zeros(17 - rows, qx.shape[1])))  # (17, D_in)
        acc = torch._int_mm(qx, qw_t)[:rows]  # (rows, D_out) int32
        out = (acc.float() * scale_x * scale_w.float()).to(x.dtype)  # (rows, D_out)
        return out if bias is None else out + bias

    def _fbgemm_alone(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        stamp: tuple,
        key: tuple[int, str],
    ) -> torch.Tensor:
        """``x`` (rows, D_in) times ``weight``'s own pack (made or remade when needed)."""
        hit = self._packed.get(key)
        if hit is None or hit.stamps[0] != stamp:
            hit = self._pack(key, (stamp,), (weight.shape[0],), lambda: weight, bias)
        return self._run_packed(x, hit.packed)

    def _fbgemm_member(
        self,
        x: torch.Tensor,
        x2: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        stamp: tuple,
        layer: int,
        name: str,
        group: tuple[str, ...],
    ) -> torch.Tensor:
        """A group member's product. The first member runs the whole group in one call over the
        stacked pack and stashes the others' outputs; each other member takes its stashed output
        if it was computed from this very input (same tensor, same version) and this weight
        (same stamp), and otherwise computes alone. A member whose weight is not the one stacked
        drops the stack, and the group's last member stacks the weights seen since."""
        self._seen[(layer, name)] = (weight, bias)
        key = (layer, GROUP_KEY[group])
        if name == group[0]:
            hit = self._packed.get(key)
            if hit is None or hit.stamps[0] != stamp:
                hit = self._group_pack(layer, group, key)
                if hit is None:  # not all members seen yet, or one has a bias
                    return self._fbgemm_alone(x2, weight, bias, stamp, (layer, name))
            parts = self._run_packed(x2, hit.packed).split_with_sizes(hit.sizes, dim=-1)
            for n, part, s in zip(group[1:], parts[1:], hit.stamps[1:], strict=True):
                self._stash[(layer, n)] = (x, x._version, s, part)
            return parts[0]
        stashed = self._stash.pop((layer, name), None)
        if stashed is not None:
            if stashed[2] != stamp:
                self._packed.pop(key, None)  # the stack holds another weight than this one
            elif stashed[0] is x and stashed[1] == x._version:
                return stashed[3]
        out = self._fbgemm_alone(x2, weight, bias, stamp, (layer, name))
        if name == group[-1] and key not in self._packed:
            self._group_pack(layer, group, key)  # one-time setup, in the first forward
        return out

    def _pack(
        self,
        key: tuple[int, str],
        stamps: tuple[tuple, ...],
        sizes: tuple[int, ...],
        weight: Callable[[], torch.Tensor],
        bias: Any,
    ) -> _Pack:
        """Quantize ``weight()`` (per output channel) and prepack it for fbgemm under ``key``."""
        w = weight()
        q, scale = quantize_absmax(w.float(), 8)  # (D_out, D_in) int8, (D_out, 1)
        zeros = torch.zeros(w.shape[0], dtype=torch.long)
        with warnings.catch_warnings():
            # PyTorch marks quantized-tensor creation as deprecated; the packed int8 GEMM
            # it feeds is still the CPU's fastest int8 path (see the module docstring).
            warnings.simplefilter("ignore", UserWarning)
            qweight = torch._make_per_channel_quantized_tensor(
                q, scale.squeeze(-1).double(), zeros, 0
            )
            packed = torch.ops.quantized.linear_prepack(
                qweight, None if bias is None else bias.float()
            )
        hit = _Pack(packed, stamps, sizes, w.numel())
        self._packed[key] = hit
        return hit

    def _run_packed(self, x: torch.Tensor, packed: Any) -> torch.Tensor:
        """``x`` (rows, D_in) times a packed weight: (rows, D_out) in ``x``'s dtype."""
        xf = x if x.dtype == torch.float32 else x.float()
        if xf.shape[0] == 1:
            out = _linear_dynamic()(xf, packed, self.reduce_range)
        else:  # one call per token row: fbgemm's activation scale is per call, i.e. per token
            out = torch.cat(
                [
                    _linear_dynamic()(xf[i : i + 1], packed, self.reduce_range)
                    for i in range(xf.shape[0])
                ]
            )  # (T, D_out)
        return out if out.dtype == x.dtype else out.to(x.dtype)

    def _group_pack(self, layer: int, group: tuple[str, ...], key: tuple[int, str]) -> _Pack | None:
        """The stacked pack of ``group`` in block ``layer``, built from the weights its members
        were last called with; None unless all were seen, none with a bias."""
        seen = [self._seen.get((layer, n)) for n in group]
        if any(s is None or s[1] is not None for s in seen):
            return None
        weights = [s[0] for s in seen if s is not None]
        for n in group:  # the members' own packs are no longer needed
            self._packed.pop((layer, n), None)
        stamps = tuple(_stamp(w, None) for w in weights)
        sizes = tuple(w.shape[0] for w in weights)
        return self._pack(key, stamps, sizes, partial(torch.cat, weights), None)

    def int8_bytes(self) -> int:
        """Bytes held by the cached int8 weight copies (this kernel's extra memory)."""
        return sum(e[0].numel() for e in self._int8.values()) + sum(
            e.n_bytes for e in self._packed.values()
        )


@cache
@cache
def lacks_vnni(cpuinfo: str | None = None) -> bool:
    """Whether this x86 CPU lacks VNNI (no ``avx512_vnni``/``avx_vnni`` flag in /proc/cpuinfo):
    there fbgemm multiplies 8-bit pairs into saturating 16-bit sums, and 8-bit activations
    overflow them. False where the flags cannot be read or the CPU is not x86."""
    try:
        text = Path("/proc/cpuinfo").read_text() if cpuinfo is None else cpuinfo
    except OSError:
        return False
    flags = next(
        (line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")),
        None,
    )
    if flags is None:
        return False
    return not {"avx512_vnni", "avx_vnni"} & set(flags)


def _linear_dynamic() -> Any:
    """fbgemm's dynamic quantized linear as a resolved overload, called without the operator
    packet's per-call scan of its arguments (a measurable share of a small product,
    docs/design.md, "fbgemm is called through its resolved overload")."""
    return torch.ops.quantized.linear_dynamic.default


def _stamp(weight: torch.Tensor, bias: torch.Tensor | None) -> tuple:
    """What identifies a weight (and bias) a pack was made from (`tensor_stamp`)."""
    return (tensor_stamp(weight), None if bias is None else tensor_stamp(bias))


def int8_plan(
    exclude: frozenset[str] | set[str] | tuple[str, ...] = (),
    name: str | None = None,
    backend: str = "auto",
) -> ExecutionPlan:
    """W8A8 with real int8 kernels on every linear but ``exclude``.

    The same draft as ``quant_plan(8, 8, exclude=exclude)`` (the readable fake-quant kernel), up
    to fbgemm's activation rounding; named ``w8a8[-no_<excluded>]-fast`` unless ``name`` is given.
    """
    kernel = Int8Kernel(names=frozenset(LINEAR_NAMES) - frozenset(exclude), backend=backend)
    if name is None:
        name = "w8a8" + ("" if not exclude else "-no_" + "_".join(sorted(exclude))) + "-fast"
    return ExecutionPlan(linear=kernel, name=name)
