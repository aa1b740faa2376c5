"""Real int8 kernels for the W8A8 draft: the fast counterpart of the readable fake-quant kernel.

`casspec_ref.dsia.act_quant.QuantKernel` with ``bits=8, weight_bits=8`` *simulates* W8A8: it
rounds activations (per token) and weights (per output channel) to the symmetric absmax grid of
`quantize_absmax` and multiplies in float. `Int8Kernel` computes the same product with integer
kernels, using that same `quantize_absmax` for the weights, and keeps **one int8 copy of each
quantized weight** in the kernel object: about 128 MiB for all linears of SmolLM2-135M
including the tied head (a quarter of its fp32 weights). Two backends:

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
from functools import partial
from typing import Any

import torch

from casspec_ref.base.dsia_checks import check_names
from casspec_ref.base.kernels import exact_linear
from casspec_ref.dsia.act_quant import quantize_absmax
from casspec_ref.plan import LINEAR_NAMES, ExecutionPlan

BACKENDS = ("auto", "fbgemm", "int_mm")
#: Linears a block calls one after the other on the same input, each name mapped to its group.
GROUP_OF = {name: g for g in (("attn_q", "attn_k", "attn_v"), ("mlp_gate", "mlp_up")) for name in g}


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
            VNNI to avoid saturating 16-bit accumulations).
    """

    names: frozenset[str] = frozenset(LINEAR_NAMES)
    layers: frozenset[int] | None = None
    backend: str = "auto"
    reduce_range: bool = False
    #: (layer, name) -> (transposed int8 weight (D_in, D_out), its scale (D_out,), stamp)
    _int8: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor, tuple]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )
    #: (layer, name) -> (fbgemm's prepacked weight, stamp, int8 bytes it holds)
    _packed: dict[tuple[int, str], tuple[Any, tuple, int]] = field(
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
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1])  # (rows, D_in)
        fbgemm = self.backend == "fbgemm" or (self.backend == "auto" and x2.device.type == "cpu")
        if fbgemm:
            group = GROUP_OF.get(name, ())
            if group:  # only group members are remembered and may find their output kept
                self._seen[(layer, name)] = (weight, bias)
                stashed = self._stash.pop((layer, name), None)
                if stashed is not None and stashed[0] is x:
                    if stashed[1:3] == (x._version, _stamp(weight, bias)):  # unchanged input
                        return stashed[3]  # computed by the group's first linear
            if group and name == group[0]:
                out = self._fbgemm_group(x, x2, weight, bias, layer, group)
            else:
                out = self._fbgemm_matmul(x2, weight, bias, layer, name)
                if group and name == group[-1] and (layer, "+".join(group)) not in self._packed:
                    # The group's last member: stack it now (one-time setup of the 1st forward).
                    self._group_pack(layer, group)
        else:
            out = self._int_mm_matmul(x2, weight, bias, layer, name)
        return out.reshape(*lead, weight.shape[0])  # (..., D_out)

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

    def _fbgemm_matmul(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        layer: int,
        name: str,
    ) -> torch.Tensor:
        packed = self._pack((layer, name), _stamp(weight, bias), lambda: weight, bias)
        return self._run_packed(x, packed)

    def _pack(
        self, key: tuple[int, str], stamp: tuple, weight: Callable[[], torch.Tensor], bias: Any
    ) -> Any:
        """fbgemm's prepacked int8 weight for ``key``, (re)built from ``weight()`` when it is
        missing or was made from other tensors than ``stamp`` names."""
        hit = self._packed.get(key)
        if hit is None or hit[1] != stamp:
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
            hit = (packed, stamp, w.numel())
            self._packed[key] = hit
        return hit[0]

    def _run_packed(self, x: torch.Tensor, packed: Any) -> torch.Tensor:
        """``x`` (rows, D_in) times a packed weight: (rows, D_out) in ``x``'s dtype."""
        xf = x.float()
        if xf.shape[0] == 1:
            return torch.ops.quantized.linear_dynamic(xf, packed, self.reduce_range).to(x.dtype)
        # One call per token row: fbgemm's activation scale is per call, i.e. per token here.
        rows = [
            torch.ops.quantized.linear_dynamic(xf[i : i + 1], packed, self.reduce_range)
            for i in range(xf.shape[0])
        ]  # T x (1, D_out)
        return torch.cat(rows).to(x.dtype)  # (T, D_out)

    def _group_pack(self, layer: int, group: tuple[str, ...]) -> tuple[Any, list[tuple]] | None:
        """The stacked pack of ``group`` in block ``layer`` and its members' stamps, built from
        the weights they were last called with; None unless all were seen without a bias."""
        if not all(self.applies(layer, n) and (layer, n) in self._seen for n in group):
            return None
        members = [self._seen[(layer, n)] for n in group]
        if any(b is not None for _, b in members):
            return None
        stamps = [_stamp(w, None) for w, _ in members]
        key = (layer, "+".join(group))
        if key not in self._packed:
            for n in group:  # the members' own packs are no longer needed
                self._packed.pop((layer, n), None)
        stacked = partial(torch.cat, [w for w, _ in members])  # (sum of D_out, D_in)
        return self._pack(key, tuple(stamps), stacked, None), stamps

    def _fbgemm_group(
        self,
        x: torch.Tensor,
        x2: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        layer: int,
        group: tuple[str, ...],
    ) -> torch.Tensor:
        """The group's products in one fbgemm call over the stacked weights: returns the first
        (this call's) output (rows, D_out) and stashes the others for their own calls."""
        found = self._group_pack(layer, group)
        if found is None:
            return self._fbgemm_matmul(x2, weight, bias, layer, group[0])
        packed, stamps = found
        out = self._run_packed(x2, packed)
        parts = out.split([s[0][0] for s in stamps], dim=-1)
        lead = x.shape[:-1]
        for n, part, stamp in zip(group[1:], parts[1:], stamps[1:], strict=True):
            self._stash[(layer, n)] = (x, x._version, stamp, part.reshape(*lead, part.shape[-1]))
        return parts[0]

    def int8_bytes(self) -> int:
        """Bytes held by the cached int8 weight copies (this kernel's extra memory)."""
        return sum(e[0].numel() for e in self._int8.values()) + sum(
            e[2] for e in self._packed.values()
        )


def _ptr(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.data_ptr()


def _stamp(weight: torch.Tensor, bias: torch.Tensor | None) -> tuple:
    """What identifies a weight (and bias) a pack was made from."""
    return (tuple(weight.shape), weight.dtype, weight.data_ptr(), _ptr(bias))


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
