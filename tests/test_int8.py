"""The real int8 kernels (casspec_ref.accel.int8) against the readable fake-quant W8A8 path."""

from __future__ import annotations

import pytest
import torch

from casspec_ref.accel.int8 import Int8Kernel, int8_plan
from casspec_ref.base.kernels import exact_linear
from casspec_ref.dsia.act_quant import QuantKernel, quant_plan


@pytest.mark.parametrize("rows", [1, 2, 3, 17])
@pytest.mark.parametrize("backend", ["int_mm", "fbgemm"])
def test_fast_int8_matches_readable_w8a8(rows: int, backend: str) -> None:
    gen = torch.Generator().manual_seed(rows)
    x = torch.randn(1, rows, 64, generator=gen)
    x[0, 0] *= 20.0  # one token with a much larger range: per-token scales must stay per token
    w = torch.randn(48, 64, generator=gen)
    b = torch.randn(48, generator=gen)
    fast = Int8Kernel(backend=backend)
    readable = QuantKernel(bits=8, weight_bits=8)
    out_fast = fast(x, w, b, 0, "attn_q")
    out_readable = readable(x, w, b, 0, "attn_q")
    assert out_fast.shape == (1, rows, 48)
    assert fast.int8_bytes() == 48 * 64
    exact = x @ w.T + b
    # Per-row error relative to that row's own scale: a shared (per-tensor) activation scale
    # would blow up the error of the small rows when row 0 is 20x larger.
    row_scale = exact.abs().amax(-1, keepdim=True)  # (1, rows, 1)
    assert ((out_fast - exact).abs() / row_scale).max() < 0.03
    if backend == "int_mm":
        # Same symmetric absmax math as the readable path: integer accumulation is exact, only
        # the float rescaling rounds differently.
        assert torch.allclose(out_fast, out_readable, rtol=1e-5, atol=1e-4)
    else:
        # fbgemm quantizes activations asymmetrically (affine uint8 over [min, max]): close to
        # the readable path, not equal to it.
        assert ((out_fast - out_readable).abs() / row_scale).max() < 0.03
    with pytest.raises(ValueError, match="backend"):
        Int8Kernel(backend="cuda")


@pytest.mark.parametrize("backend", ["int_mm", "fbgemm"])
def test_selection_and_plan_follow_the_readable_builder(backend: str) -> None:
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(3, 32, generator=gen)
    w = torch.randn(16, 32, generator=gen)
    plan = int8_plan(exclude={"mlp_down"}, backend=backend)
    readable = quant_plan(8, 8, exclude={"mlp_down"})
    assert plan.name == "w8a8-no_mlp_down-fast" and int8_plan().name == "w8a8-fast"
    assert isinstance(plan.linear, Int8Kernel) and isinstance(readable.linear, QuantKernel)
    assert plan.linear.names == readable.linear.names
    assert torch.equal(plan.linear(x, w, None, 2, "mlp_down"), exact_linear(x, w, None))
    assert plan.linear.int8_bytes() == 0  # nothing quantized yet
    out = plan.linear(x, w, None, 2, "mlp_up")
    assert not torch.equal(out, x @ w.T)
    scale = (x @ w.T).abs().max()
    assert (out - readable.linear(x, w, None, 2, "mlp_up")).abs().max() / scale < 0.03
    assert plan.linear.int8_bytes() == 16 * 32
    with pytest.raises(ValueError, match="unknown names"):
        Int8Kernel(names=frozenset({"mlp_dwn"}))


def _separate(x: torch.Tensor, w: torch.Tensor, name: str) -> torch.Tensor:
    """One linear alone: a fresh kernel has seen no group, so it runs this product by itself."""
    return Int8Kernel(backend="fbgemm")(x, w, None, 0, name)


@pytest.mark.parametrize("rows", [1, 3])
def test_fbgemm_groups_are_bit_for_bit_the_separate_products(rows: int) -> None:
    """q, k, v (and gate, up) in one call over stacked int8 weights: integer accumulation is
    exact and the rescaling per output element, so each output equals its own product."""
    gen = torch.Generator().manual_seed(11 + rows)
    x = torch.randn(1, rows, 64, generator=gen)
    x[0, -1] *= 9.0
    weights = {
        "attn_q": torch.randn(48, 64, generator=gen),
        "attn_k": torch.randn(16, 64, generator=gen),
        "attn_v": torch.randn(16, 64, generator=gen),
        "mlp_gate": torch.randn(40, 64, generator=gen),
        "mlp_up": torch.randn(40, 64, generator=gen),
    }
    kernel = Int8Kernel(backend="fbgemm")
    stacked = {(0, "attn_q+attn_k+attn_v"), (0, "mlp_gate+mlp_up")}
    for name, w in weights.items():  # the first pass: separate products, and a group's last
        kernel(x, w, None, 0, name)  # member stacks the group (one-time setup stays in pass 1)
    assert set(kernel._packed) == stacked
    outs = {name: kernel(x, w, None, 0, name) for name, w in weights.items()}
    assert set(kernel._packed) == stacked  # the second pass used the stacks, built nothing
    assert kernel.int8_bytes() == sum(w.numel() for w in weights.values())
    for name, w in weights.items():
        assert outs[name].shape == (1, rows, w.shape[0])
        assert torch.equal(outs[name], _separate(x, w, name)), name


def test_a_stashed_group_output_is_used_only_for_the_same_input_and_weight() -> None:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 32, generator=gen)
    wq, wk, wv = (torch.randn(8, 32, generator=gen) for _ in range(3))
    kernel = Int8Kernel(backend="fbgemm")
    for _ in range(2):
        for name, w in (("attn_q", wq), ("attn_k", wk), ("attn_v", wv)):
            kernel(x, w, None, 0, name)
    kernel(x, wq, None, 0, "attn_q")  # stashes k and v for x
    x.mul_(2.0)  # the input changed in place: the stash must not answer for it
    assert torch.equal(kernel(x, wk, None, 0, "attn_k"), _separate(x, wk, "attn_k"))
    kernel(x, wq, None, 0, "attn_q")
    wv2 = wv + 1.0  # another v weight than the one stacked
    assert torch.equal(kernel(x, wv2, None, 0, "attn_v"), _separate(x, wv2, "attn_v"))
    other = x.clone()  # equal values, another tensor: computed, and still the same numbers
    kernel(x, wq, None, 0, "attn_q")
    assert torch.equal(kernel(other, wk, None, 0, "attn_k"), _separate(x, wk, "attn_k"))


def test_a_weight_changed_in_place_is_quantized_again() -> None:
    """The packs remember the version counter of the weights they were made from (as the packed
    fp32 copies do): an in-place change, alone or in a stacked group, is seen at the next call."""
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(1, 2, 32, generator=gen)
    weights = {n: torch.randn(8, 32, generator=gen) for n in ("attn_q", "attn_k", "attn_v")}
    wo = torch.randn(16, 32, generator=gen)
    kernel = Int8Kernel(backend="fbgemm")
    for _ in range(2):  # the second pass runs q, k, v from the stack
        for name, w in weights.items():
            kernel(x, w, None, 0, name)
        kernel(x, wo, None, 0, "attn_o")
    before = kernel(x, wo, None, 0, "attn_o")
    wo.mul_(-0.5)
    weights["attn_k"].add_(1.0)
    assert not torch.equal(kernel(x, wo, None, 0, "attn_o"), before)
    assert torch.equal(kernel(x, wo, None, 0, "attn_o"), _separate(x, wo, "attn_o"))
    for _ in range(2):  # k's call sees the change and drops the stack; v's call restacks
        outs = {name: kernel(x, w, None, 0, name) for name, w in weights.items()}
        for name, w in weights.items():
            assert torch.equal(outs[name], _separate(x, w, name)), name
    # Restacked: no member runs from its own pack any more.
    assert set(kernel._packed) == {(0, "attn_q+attn_k+attn_v"), (0, "attn_o")}


def test_lacks_vnni_reads_the_cpu_flags() -> None:
    """fbgemm's 8-bit activations saturate without VNNI: the kernel then reduces their range."""
    from casspec_ref.accel.int8 import lacks_vnni

    assert lacks_vnni("flags\t\t: fpu sse2 avx2 fma\n")
    assert not lacks_vnni("flags\t\t: fpu avx2 avx512f avx512_vnni\n")
    assert not lacks_vnni("flags\t\t: fpu avx2 avx_vnni\n")
    assert not lacks_vnni("Features\t: fp asimd\n")  # not x86: no flags line
    assert Int8Kernel(reduce_range=None).reduce_range == lacks_vnni()
    assert Int8Kernel(reduce_range=False).reduce_range is False
