"""Activation quantization as a DSIA strategy: readable fake-quant kernels.

Scope: docs/method.md §2 ("Activation quantization"); the seed article's 8-bit drafts (L2, L3).
A `QuantKernel` is a `LinearKernel` (plan.py): it is handed ``x``, the layer's weight and bias,
the block index and the linear's name, and decides whether to quantize.

The kernel is *fake* quantization: ``fake_quant_absmax`` rounds each token's activation row to
``bits`` with a symmetric absmax scale (optionally per group of ``group_size`` channels), returns
it dequantized, and an ordinary float matmul follows. With ``weight_bits=8`` the weight is also
fake-quantized per output channel (W8A8). This is a simulation: it costs at least as much as the
target and only measures alpha; the real int8 kernels computing the same W8A8 product are in
`casspec_ref.accel.int8`.

Error bound (tested): for a row with absmax ``m`` and ``qmax = 2**(bits-1) - 1``, every element
of ``fake_quant_absmax`` is within ``m / (2 * qmax)`` of the input (half a quantization step).

Deviations and notes: PyTorch's dynamic quantization with a per-*tensor* activation scale kept
only ~0.45 argmax agreement on SmolLM2 (docs/smollm2.md); per-*token* scales are the form
docs/method.md names and are what we implement; which linears to quantize is the ``names`` /
``layers`` selection (the MLP down projection sees the widest activation range). 4-bit uses the
same symmetric absmax rule; per-token 4-bit is coarse, so ``group_size`` (e.g. 32) is offered.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from casspec_ref.model import exact_linear
from casspec_ref.plan import LINEAR_NAMES, ExecutionPlan

#: Bit widths the kernels support: 8 (the seed article's draft) and 4.
SUPPORTED_BITS = (4, 8)


def _check_bits(bits: int, what: str) -> int:
    if bits not in SUPPORTED_BITS:
        raise ValueError(f"{what}={bits} is not supported: allowed bit widths are {SUPPORTED_BITS}")
    return 2 ** (bits - 1) - 1


def quantize_absmax(
    x: torch.Tensor, bits: int = 8, group_size: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric absmax quantization along the last dimension (per token, or per group).

    Returns ``(q, scale)`` with ``q`` integer-valued in ``[-qmax, qmax]`` (dtype int8, shape of
    ``x``) and ``scale`` of shape ``x.shape[:-1] + (n_groups,)`` such that ``q * scale`` (scale
    broadcast over each group) approximates ``x``. A row of zeros gets scale 0 and q = 0.
    """
    qmax = _check_bits(bits, "bits")
    width = x.shape[-1]
    group = width if group_size is None else group_size
    if group < 1 or width % group != 0:
        raise ValueError(
            f"group_size={group_size} must be a positive divisor of the last dimension ({width})"
        )
    xg = x.reshape(*x.shape[:-1], width // group, group)  # (..., G, width/G)
    absmax = xg.abs().amax(dim=-1, keepdim=True)  # (..., G, 1)
    scale = absmax / qmax
    # Zero rows: divide by 1 instead of 0 so that q = 0 exactly (no NaN), and keep scale = 0.
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.clamp(torch.round(xg / safe), -qmax, qmax).to(torch.int8)
    return q.reshape(x.shape), scale.squeeze(-1)  # (..., width), (..., G)


def dequantize_absmax(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Inverse of `quantize_absmax`: ``q * scale`` with the scale broadcast over each group."""
    groups = scale.shape[-1]
    qg = q.reshape(*q.shape[:-1], groups, q.shape[-1] // groups).to(dtype)  # (..., G, width/G)
    return (qg * scale.to(dtype).unsqueeze(-1)).reshape(q.shape)  # (..., width)


def fake_quant_absmax(
    x: torch.Tensor, bits: int = 8, group_size: int | None = None
) -> torch.Tensor:
    """Quantize-dequantize ``x`` per token (last dimension): the readable reference."""
    q, scale = quantize_absmax(x, bits, group_size)
    return dequantize_absmax(q, scale, x.dtype)


@dataclass(frozen=True)
class QuantKernel:
    """A `LinearKernel` that quantizes the activations entering selected linear layers.

    Attributes:
        bits: activation bit width (8 or 4).
        group_size: channels per activation scale; ``None`` = one scale per token.
        weight_bits: ``None`` keeps float weights (activation-only quantization); 8 or 4
            fake-quantizes the weight per output channel too (computed once, cached here).
        names: which linears (see `LINEAR_NAMES`) are quantized; the others run exactly.
        layers: which block indices are quantized (``None`` = all); the head is layer -1.
    """

    bits: int = 8
    group_size: int | None = None
    weight_bits: int | None = None
    names: frozenset[str] = frozenset(LINEAR_NAMES)
    layers: frozenset[int] | None = None
    _weights: dict[tuple[int, str], tuple[torch.Tensor, tuple]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        _check_bits(self.bits, "QuantKernel.bits")
        if self.weight_bits is not None:
            _check_bits(self.weight_bits, "QuantKernel.weight_bits")
        if self.group_size is not None and self.group_size < 1:
            raise ValueError(f"QuantKernel.group_size must be >= 1 or None, got {self.group_size}")
        check_names(self.names, "QuantKernel.names")

    def applies(self, layer: int, name: str) -> bool:
        """Whether this kernel quantizes linear ``name`` of block ``layer``."""
        return name in self.names and (self.layers is None or layer in self.layers)

    def _weight(self, weight: torch.Tensor, layer: int, name: str) -> torch.Tensor:
        """The fake-quantized float weight of one linear, cached per (layer, name)."""
        key = (layer, name)
        stamp = (tuple(weight.shape), weight.dtype, weight.data_ptr())
        hit = self._weights.get(key)
        if hit is not None and hit[1] == stamp:
            return hit[0]
        assert self.weight_bits is not None
        q, scale = quantize_absmax(weight, self.weight_bits)  # (D_out, D_in), (D_out, 1)
        stored = dequantize_absmax(q, scale, weight.dtype)  # (D_out, D_in)
        self._weights[key] = (stored, stamp)
        return stored

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
        xq = fake_quant_absmax(x2, self.bits, self.group_size)
        w = weight if self.weight_bits is None else self._weight(weight, layer, name)
        return exact_linear(xq, w, bias).reshape(*lead, weight.shape[0])  # (..., D_out)


def check_names(names: frozenset[str], what: str) -> None:
    """`ValueError` naming ``what`` if ``names`` holds a name not in `LINEAR_NAMES`."""
    unknown = sorted(set(names) - set(LINEAR_NAMES))
    if unknown:
        raise ValueError(f"{what} has unknown names {unknown}: allowed are {LINEAR_NAMES}")


def quant_plan(
    bits: int = 8,
    weight_bits: int | None = None,
    exclude: frozenset[str] | set[str] | tuple[str, ...] = (),
    group_size: int | None = None,
    name: str | None = None,
) -> ExecutionPlan:
    """A plan whose linears (all but ``exclude``) quantize their input activations.

    Example: ``quant_plan(8, 8, exclude={"mlp_down"})`` is W8A8 on every linear but the MLP
    down projection (`casspec_ref.accel.int8.int8_plan` runs the same with int8 kernels).
    """
    names = frozenset(LINEAR_NAMES) - frozenset(exclude)
    kernel = QuantKernel(bits=bits, group_size=group_size, weight_bits=weight_bits, names=names)
    if name is None:
        w = "" if weight_bits is None else f"w{weight_bits}"
        ex = "" if not exclude else "-no_" + "_".join(sorted(exclude))
        name = f"{w}a{bits}{'' if group_size is None else f'g{group_size}'}{ex}"
    return ExecutionPlan(linear=kernel, name=name)
