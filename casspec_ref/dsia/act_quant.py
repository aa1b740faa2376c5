"""Activation quantization as a DSIA strategy: the readable fake-quant kernels and a fast int8 path.

Scope: docs/method.md §2 ("Activation quantization"); the seed article's 8-bit drafts (L2, L3).
A `QuantKernel` is a `LinearKernel` (plan.py): it is handed ``x``, the layer's weight and bias,
the block index and the linear's name, and decides whether to quantize.

Two paths computing the same thing (they agree to float rounding; a test checks it):
- Readable (``fast=False``): *fake* quantization. ``fake_quant_absmax`` rounds each token's
  activation row to ``bits`` with a symmetric absmax scale (optionally per group of
  ``group_size`` channels), returns it dequantized, and an ordinary float matmul follows. With
  ``weight_bits=8`` the weight is also fake-quantized per output channel (W8A8). This path is a
  simulation: it costs at least as much as the target and only measures alpha.
- Fast (``fast=True``, 8-bit activations and 8-bit weights only): real integer kernels, with the
  weights quantized once per output channel (symmetric absmax) and cached in the kernel object:
  **one int8 copy of each quantized weight**, about 128 MiB for all linears of SmolLM2-135M
  including the tied head (a quarter of its fp32 weights). Two backends:
  - ``"fbgemm"`` (CPU default): PyTorch's dynamic quantized linear
    (``torch.ops.quantized.linear_dynamic`` on a prepacked per-channel weight), called once per
    token row so that the activation scale is per token. Its activation quantization is
    *asymmetric* (affine uint8 over the row's [min, max]), not the readable path's symmetric
    absmax: the two agree closely, not bit for bit (tested; measured in docs/dsia.md), and the
    kernel reads a quarter of the bytes of fp32 (timings in docs/dsia.md).
  - ``"int_mm"`` (CUDA default; also runs on CPU): ``torch._int_mm`` int8 x int8 -> int32, then
    ``* scale_x * scale_w``: exactly the readable path's math. On the CPUs measured it was
    barely faster than fp32 for one row (docs/dsia.md), so it is not the CPU default.
  Choose it per forward by picking the plan.

Error bound (tested): for a row with absmax ``m`` and ``qmax = 2**(bits-1) - 1``, every element
of ``fake_quant_absmax`` is within ``m / (2 * qmax)`` of the input (half a quantization step).

Deviations and notes: PyTorch's dynamic quantization with a per-*tensor* activation scale kept
only ~0.45 argmax agreement on SmolLM2 (docs/smollm2.md); per-*token* scales are the form
docs/method.md names and are what we implement; which linears to quantize is the ``names`` /
``layers`` selection (the MLP down projection sees the widest activation range). 4-bit uses the
same symmetric absmax rule; per-token 4-bit is coarse, so ``group_size`` (e.g. 32) is offered.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Any

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


def _ptr(t: torch.Tensor | None) -> int:
    return 0 if t is None else t.data_ptr()


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
            quantizes the weight per output channel too (fake-quant on the readable path).
        names: which linears (see `LINEAR_NAMES`) are quantized; the others run exactly.
        layers: which block indices are quantized (``None`` = all); the head is layer -1.
        fast: use a real int8 kernel (needs ``bits == 8``, ``weight_bits == 8`` and no
            ``group_size``); the int8 weight copies are cached in this object.
        backend: the fast kernel. ``"fbgemm"`` (CPU): PyTorch's dynamic quantized linear,
            called one token row at a time so that the activation scale stays per token;
            ``"int_mm"``: ``torch._int_mm`` (CUDA, and CPU); ``"auto"``: fbgemm on CPU
            tensors, int_mm elsewhere.
        reduce_range: fbgemm only: quantize activations to 7 bits (needed on CPUs without
            VNNI to avoid saturating 16-bit accumulations; this CPU has VNNI).
    """

    bits: int = 8
    group_size: int | None = None
    weight_bits: int | None = None
    names: frozenset[str] = frozenset(LINEAR_NAMES)
    layers: frozenset[int] | None = None
    fast: bool = False
    backend: str = "auto"
    reduce_range: bool = False
    _packed: dict[tuple[int, str], tuple[Any, tuple]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )
    _weights: dict[tuple[int, str], tuple[torch.Tensor, torch.Tensor, tuple]] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )
    _scales: dict[tuple[int, str], torch.Tensor] = field(
        default_factory=dict, repr=False, compare=False, hash=False
    )

    def __post_init__(self) -> None:
        if self.backend not in ("auto", "fbgemm", "int_mm"):
            raise ValueError(
                f"QuantKernel.backend={self.backend!r}: allowed are 'auto', 'fbgemm', 'int_mm'"
            )
        _check_bits(self.bits, "QuantKernel.bits")
        if self.weight_bits is not None:
            _check_bits(self.weight_bits, "QuantKernel.weight_bits")
        if self.group_size is not None and self.group_size < 1:
            raise ValueError(f"QuantKernel.group_size must be >= 1 or None, got {self.group_size}")
        unknown = sorted(set(self.names) - set(LINEAR_NAMES))
        if unknown:
            raise ValueError(
                f"QuantKernel.names has unknown names {unknown}: allowed are {LINEAR_NAMES}"
            )
        if self.fast and (self.bits != 8 or self.weight_bits != 8 or self.group_size is not None):
            raise ValueError(
                "QuantKernel(fast=True) needs bits=8, weight_bits=8 and group_size=None (the "
                f"int8 x int8 kernel); got bits={self.bits}, weight_bits={self.weight_bits}, "
                f"group_size={self.group_size}"
            )

    def applies(self, layer: int, name: str) -> bool:
        """Whether this kernel quantizes linear ``name`` of block ``layer``."""
        return name in self.names and (self.layers is None or layer in self.layers)

    def _weight(self, weight: torch.Tensor, layer: int, name: str) -> torch.Tensor:
        """The quantized weight of one linear, cached per (layer, name).

        Fast path: the transposed int8 weight ``(D_in, D_out)`` and its per-output-channel
        scale (only the int8 copy is kept). Readable path: the fake-quantized float weight.
        """
        key = (layer, name)
        hit = self._weights.get(key)
        if hit is not None and hit[2] == (tuple(weight.shape), weight.dtype, weight.data_ptr()):
            return hit[0]
        assert self.weight_bits is not None
        q, scale = quantize_absmax(weight, self.weight_bits)  # (D_out, D_in), (D_out, 1)
        if self.fast:
            # int8 x int8 needs the transposed weight contiguous: (D_in, D_out).
            self._scales[key] = scale.squeeze(-1)  # (D_out,)
            stored = q.T.contiguous()
        else:
            stored = dequantize_absmax(q, scale, weight.dtype)  # (D_out, D_in)
        self._weights[key] = (stored, scale, (tuple(weight.shape), weight.dtype, weight.data_ptr()))
        return stored

    def __call__(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        layer: int,
        name: str,
    ) -> torch.Tensor:
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1])  # (rows, D_in)
        if not self.applies(layer, name):
            out = exact_linear(x2, weight, bias)
        elif self.fast:
            use_fbgemm = self.backend == "fbgemm" or (
                self.backend == "auto" and x2.device.type == "cpu"
            )
            if use_fbgemm:
                out = self._fbgemm_matmul(x2, weight, bias, layer, name)
            else:
                out = self._int8_matmul(x2, weight, bias, layer, name)
        else:
            xq = fake_quant_absmax(x2, self.bits, self.group_size)
            w = weight if self.weight_bits is None else self._weight(weight, layer, name)
            out = exact_linear(xq, w, bias)
        return out.reshape(*lead, weight.shape[0])  # (..., D_out)

    def _int8_matmul(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        layer: int,
        name: str,
    ) -> torch.Tensor:
        qw_t = self._weight(weight, layer, name)
        scale_w = self._scales[(layer, name)]
        qx, scale_x = quantize_absmax(x.float(), 8)  # (rows, D_in) int8, (rows, 1)
        acc = torch._int_mm(qx, qw_t)  # (rows, D_out) int32
        out = acc.float() * scale_x * scale_w.float()  # (rows, D_out)
        out = out.to(x.dtype)
        return out if bias is None else out + bias

    def _fbgemm_matmul(
        self,
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor | None,
        layer: int,
        name: str,
    ) -> torch.Tensor:
        key = (layer, name)
        stamp = (tuple(weight.shape), weight.dtype, weight.data_ptr(), _ptr(bias))
        hit = self._packed.get(key)
        if hit is None or hit[1] != stamp:
            q, scale = quantize_absmax(weight.float(), 8)  # (D_out, D_in) int8, (D_out, 1)
            zeros = torch.zeros(weight.shape[0], dtype=torch.long)
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
            hit = (packed, stamp)
            self._packed[key] = hit
            self._scales[key] = torch.tensor(float(weight.numel()))  # int8 bytes, for int8_bytes
        packed = hit[0]
        xf = x.float()
        # One call per token row: fbgemm's activation scale is per call, i.e. per token here.
        rows = [
            torch.ops.quantized.linear_dynamic(xf[i : i + 1], packed, self.reduce_range)
            for i in range(xf.shape[0])
        ]  # T x (1, D_out)
        return torch.cat(rows).to(x.dtype)  # (T, D_out)

    def int8_bytes(self) -> int:
        """Bytes held by the cached int8 weight copies (the fast path's extra memory)."""
        if not self.fast:
            return 0
        return sum(e[0].numel() for e in self._weights.values()) + sum(
            int(self._scales[k]) for k in self._packed
        )


def quant_plan(
    bits: int = 8,
    weight_bits: int | None = None,
    exclude: frozenset[str] | set[str] | tuple[str, ...] = (),
    group_size: int | None = None,
    fast: bool = False,
    name: str | None = None,
    backend: str = "auto",
) -> ExecutionPlan:
    """A plan whose linears (all but ``exclude``) quantize their input activations.

    ``weight_bits=8`` with ``fast=True`` is the real int8 path (W8A8); otherwise the readable
    fake-quant path. Example: ``quant_plan(8, 8, exclude={"mlp_down"}, fast=True)``.
    """
    names = frozenset(LINEAR_NAMES) - frozenset(exclude)
    kernel = QuantKernel(
        bits=bits,
        group_size=group_size,
        weight_bits=weight_bits,
        names=names,
        fast=fast,
        backend=backend,
    )
    if name is None:
        w = "" if weight_bits is None else f"w{weight_bits}"
        ex = "" if not exclude else "-no_" + "_".join(sorted(exclude))
        name = f"{w}a{bits}{'' if group_size is None else f'g{group_size}'}{ex}" + (
            "-fast" if fast else ""
        )
    return ExecutionPlan(linear=kernel, name=name)
