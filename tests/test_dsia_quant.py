"""Activation-quantization kernels (the readable fake-quant path): error bounds, exact cases.

The real int8 kernels are checked against this path in tests/test_int8.py.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from casspec_ref.dsia.act_quant import (
    QuantKernel,
    dequantize_absmax,
    fake_quant_absmax,
    quantize_absmax,
)


@given(
    seed=st.integers(0, 2**31 - 1),
    bits=st.sampled_from([4, 8]),
    rows=st.integers(1, 5),
    group=st.sampled_from([None, 4, 8, 16]),
    spread=st.floats(1e-3, 1e3),
)
def test_fake_quant_error_within_half_a_step(
    seed: int, bits: int, rows: int, group: int | None, spread: float
) -> None:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, 16, generator=gen, dtype=torch.float64) * spread
    x[0, 3] *= 50.0  # an outlier channel, the case that makes per-token absmax coarse
    xq = fake_quant_absmax(x, bits, group)
    qmax = 2 ** (bits - 1) - 1
    g = 16 if group is None else group
    absmax = x.reshape(rows, 16 // g, g).abs().amax(-1, keepdim=True)  # (rows, G, 1)
    bound = (absmax / (2 * qmax)).expand(rows, 16 // g, g).reshape(rows, 16)
    err = (x - xq).abs()
    assert torch.all(err <= bound * (1 + 1e-12) + 1e-300)
    # The absmax element of each group is represented exactly (it maps to +-qmax).
    q, scale = quantize_absmax(x, bits, group)
    assert int(q.abs().max()) == qmax
    assert scale.shape == (rows, 16 // g)


def test_integer_grid_and_zero_rows_are_exact() -> None:
    x = torch.tensor([[0.0, 0.0, 0.0, 0.0], [127.0, -127.0, 3.0, 0.0]], dtype=torch.float64)
    assert torch.equal(fake_quant_absmax(x, 8), x)
    q, scale = quantize_absmax(x, 8)
    assert scale[0, 0] == 0 and torch.equal(q[0], torch.zeros(4, dtype=torch.int8))
    assert torch.equal(dequantize_absmax(q, scale, torch.float64), x)
    # 4 bits: values on the 7-level grid survive, others round to the nearest level.
    y = torch.tensor([[7.0, -7.0, 2.0, 2.4]], dtype=torch.float64)
    assert fake_quant_absmax(y, 4).tolist() == [[7.0, -7.0, 2.0, 2.0]]


def test_bad_bits_and_groups_are_rejected() -> None:
    x = torch.randn(2, 6)
    with pytest.raises(ValueError, match="allowed bit widths"):
        fake_quant_absmax(x, 3)
    with pytest.raises(ValueError, match="group_size"):
        fake_quant_absmax(x, 8, 4)
    with pytest.raises(ValueError, match="allowed bit widths"):
        QuantKernel(bits=16)
    with pytest.raises(ValueError, match="weight_bits"):
        QuantKernel(weight_bits=2)
    with pytest.raises(ValueError, match="unknown names"):
        QuantKernel(names=frozenset({"mlp_dwn"}))


def test_kernel_selection_leaves_other_linears_exact() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 8, generator=gen, dtype=torch.float64)
    w = torch.randn(5, 8, generator=gen, dtype=torch.float64)
    b = torch.randn(5, generator=gen, dtype=torch.float64)
    kernel = QuantKernel(bits=4, names=frozenset({"mlp_up"}), layers=frozenset({1}))
    exact = x @ w.T + b
    assert torch.equal(kernel(x, w, b, 0, "mlp_up"), exact)
    assert torch.equal(kernel(x, w, b, 1, "mlp_down"), exact)
    quant = kernel(x, w, b, 1, "mlp_up")
    assert torch.allclose(quant, fake_quant_absmax(x, 4) @ w.T + b)
    assert not torch.allclose(quant, exact)
