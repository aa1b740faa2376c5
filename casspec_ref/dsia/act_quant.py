"""Activation quantization (docs/method.md §2) as readable fake-quant kernels: each token's row is
rounded to ``bits`` with a symmetric absmax scale, then a float matmul runs. A simulation, to
measure alpha; the int8 kernels that save time are `casspec_ref.accel.int8`. See docs/dsia.md."""

from dataclasses import dataclass, field

import torch
from torch import Tensor

from casspec_ref.base.dsia_checks import check_quant_kernel, check_quantize
from casspec_ref.base.kernels import exact_linear
from casspec_ref.plan import LINEAR_NAMES, ExecutionPlan


def quantize_absmax(
    x: Tensor, bits: int = 8, group_size: int | None = None
) -> tuple[Tensor, Tensor]:
    """Symmetric absmax quantization of the last dimension, one scale per row (or per group):
    int8 ``q`` in ``[-qmax, qmax]`` and ``scale`` ``(..., n_groups)``, with ``q * scale ~ x``."""
    width = x.shape[-1]
    group = check_quantize(bits, group_size, width)
    qmax = 2 ** (bits - 1) - 1
    xg = x.reshape(*x.shape[:-1], width // group, group)  # (..., G, width/G)
    scale = xg.abs().amax(dim=-1, keepdim=True) / qmax  # absmax / qmax: (..., G, 1)
    # Zero rows: divide by 1 instead of 0 so that q = 0 exactly (no NaN), and keep scale = 0.
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.clamp(torch.round(xg / safe), -qmax, qmax).to(torch.int8)
    return q.reshape(x.shape), scale.squeeze(-1)  # (..., width), (..., G)


def dequantize_absmax(q: Tensor, scale: Tensor, dtype: torch.dtype) -> Tensor:
    """Inverse of `quantize_absmax`: ``q * scale`` with the scale broadcast over each group."""
    groups = scale.shape[-1]
    qg = q.reshape(*q.shape[:-1], groups, q.shape[-1] // groups).to(dtype)  # (..., G, width/G)
    return (qg * scale.to(dtype).unsqueeze(-1)).reshape(q.shape)  # (..., width)


def fake_quant_absmax(x: Tensor, bits: int = 8, group_size: int | None = None) -> Tensor:
    """Quantize-dequantize ``x`` per token: each element moves by at most half a step."""
    q, scale = quantize_absmax(x, bits, group_size)
    return dequantize_absmax(q, scale, x.dtype)


@dataclass(frozen=True)
class QuantKernel:
    """A `LinearKernel` (plan.py) that fake-quantizes the activations of selected linears."""

    bits: int = 8  # activation bit width (8 or 4)
    group_size: int | None = None  # channels per activation scale; None: one per token
    weight_bits: int | None = None  # None: float weights; 8 or 4: per output channel, cached
    names: frozenset[str] = frozenset(LINEAR_NAMES)  # the linears quantized; others run exactly
    layers: frozenset[int] | None = None  # the blocks quantized (None: all; the head is -1)
    _weights: dict[tuple[int, str], tuple[Tensor, tuple]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        check_quant_kernel(self, LINEAR_NAMES)

    def __call__(
        self, x: Tensor, weight: Tensor, bias: Tensor | None, layer: int, name: str
    ) -> Tensor:
        if name not in self.names or (self.layers is not None and layer not in self.layers):
            return exact_linear(x, weight, bias)  # a linear this kernel leaves exact
        xq = fake_quant_absmax(x.reshape(-1, x.shape[-1]), self.bits, self.group_size)  # (rows, in)
        w = weight
        if self.weight_bits is not None:  # per output channel, cached until the weight changes
            stamp = (tuple(weight.shape), weight.dtype, weight.data_ptr())
            hit = self._weights.get((layer, name))
            if hit is None or hit[1] != stamp:
                hit = (fake_quant_absmax(weight, self.weight_bits), stamp)
                self._weights[(layer, name)] = hit
            w = hit[0]
        return exact_linear(xq, w, bias).reshape(*x.shape[:-1], weight.shape[0])  # (..., D_out)


def quant_plan(
    bits: int = 8,
    weight_bits: int | None = None,
    exclude: frozenset[str] | set[str] | tuple[str, ...] = (),
    group_size: int | None = None,
    name: str | None = None,
) -> ExecutionPlan:
    """A plan whose linears (all but ``exclude``) quantize their input activations, e.g.
    ``quant_plan(8, 8, exclude={"mlp_down"})``: W8A8 on every linear but the MLP down projection."""
    names = frozenset(LINEAR_NAMES) - frozenset(exclude)
    kernel = QuantKernel(bits=bits, group_size=group_size, weight_bits=weight_bits, names=names)
    if name is None:
        w = "" if weight_bits is None else f"w{weight_bits}"
        ex = "" if not exclude else "-no_" + "_".join(sorted(exclude))
        name = f"{w}a{bits}{'' if group_size is None else f'g{group_size}'}{ex}"
    return ExecutionPlan(linear=kernel, name=name)
