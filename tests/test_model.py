"""Tests of the from-scratch Transformer (casspec_ref.model): tiny float64 models, both families.

Exactness claims use float64 and tolerances of 1e-10 (different summation orders, same maths);
bit-identity claims use ``torch.equal``.
"""

from __future__ import annotations

import pytest
import torch

from casspec_ref.base.kernels import exact_linear
from casspec_ref.base.random_weights import random_init_
from casspec_ref.config import ModelConfig, tiny_gpt2, tiny_llama
from casspec_ref.io.weights import to_hf_llama_state_dict
from casspec_ref.kv_cache import KVCache
from casspec_ref.model import Transformer, rope
from casspec_ref.plan import ExecutionPlan

FAMILIES = {"llama": tiny_llama, "gpt2": tiny_gpt2}
TOL = dict(rtol=0.0, atol=1e-10)


def make_model(family: str, seed: int = 0, **overrides: object) -> Transformer:
    config = FAMILIES[family](**overrides)
    return random_init_(Transformer(config).to(torch.float64), seed=seed)


def random_tokens(config: ModelConfig, n: int, seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, config.vocab_size, (1, n), generator=gen)  # (1, n)


def random_tree(n_nodes: int, seed: int) -> list[int]:
    """Parents of a random tree in topological order; node 0 is the root (parent -1)."""
    gen = torch.Generator().manual_seed(seed)
    return [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, n_nodes)]


def ancestors(parents: list[int], node: int) -> list[int]:
    """Root-to-node path (node included)."""
    path = [node]
    while parents[path[-1]] >= 0:
        path.append(parents[path[-1]])
    return path[::-1]


@pytest.mark.parametrize("family", FAMILIES)
def test_parameter_names_follow_the_loader_contract(family: str) -> None:
    model = make_model(family)
    c = model.config
    names = set(dict(model.named_parameters()))
    assert "tok_emb.weight" in names and "norm.weight" in names
    assert ("pos_emb.weight" in names) == (family == "gpt2")
    assert ("head.weight" in names) == (not c.tie_embeddings)
    for i in range(c.n_layers):
        for sub in ("attn.q", "attn.k", "attn.v", "attn.o"):
            assert f"layers.{i}.{sub}.weight" in names
            assert (f"layers.{i}.{sub}.bias" in names) == (family == "gpt2")
        mlp = ("gate", "up", "down") if family == "llama" else ("fc", "proj")
        for sub in mlp:
            assert f"layers.{i}.mlp.{sub}.weight" in names
    k = model.layers[0].attn.k.weight
    assert tuple(k.shape) == (c.n_kv_heads * c.head_dim, c.d_model)  # nn.Linear (out, in)


@pytest.mark.parametrize("family", FAMILIES)
def test_incremental_decoding_equals_full_forward(family: str) -> None:
    model = make_model(family)
    tokens = random_tokens(model.config, 12, seed=1)
    full = model(tokens)  # (1, 12, V)
    cache = KVCache(model.config, 16, torch.float64)
    parts = [model(tokens[:, :5], cache=cache)]
    for t in range(5, 12):
        parts.append(model(tokens[:, t : t + 1], cache=cache))
    assert cache.length == 12
    torch.testing.assert_close(torch.cat(parts, dim=1), full, **TOL)
    # A chunked continuation (T > 1 after a prefix) takes the causal-mask-with-offset path.
    cache2 = KVCache(model.config, 16, torch.float64)
    chunked = torch.cat([model(tokens[:, :4], cache=cache2), model(tokens[:, 4:], cache=cache2)], 1)
    torch.testing.assert_close(chunked, full, **TOL)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tree_masked_forward_equals_path_forwards(family: str, seed: int) -> None:
    model = make_model(family, seed=seed)
    c = model.config
    prefix = random_tokens(c, 6, seed=10 + seed)
    parents = random_tree(9, seed=seed)
    tree_tokens = random_tokens(c, 9, seed=20 + seed)
    depth = [len(ancestors(parents, i)) - 1 for i in range(9)]
    mask = torch.zeros(9, 6 + 9, dtype=torch.bool)
    mask[:, :6] = True
    for i in range(9):
        for a in ancestors(parents, i):
            mask[i, 6 + a] = True
    cache = KVCache(c, 32, torch.float64)
    model(prefix, cache=cache)
    positions = torch.tensor([[6 + d for d in depth]])
    tree_logits = model(tree_tokens, positions, cache=cache, attn_mask=mask)  # (1, 9, V)
    for i in range(9):
        path = ancestors(parents, i)
        seq = torch.cat([prefix, tree_tokens[:, path]], dim=1)
        plain = model(seq)[:, -1]  # (1, V)
        torch.testing.assert_close(tree_logits[:, i], plain, **TOL)


@pytest.mark.parametrize("family", FAMILIES)
def test_causality(family: str) -> None:
    model = make_model(family)
    tokens = random_tokens(model.config, 10, seed=3)
    changed = tokens.clone()
    changed[0, 7] = (changed[0, 7] + 1) % model.config.vocab_size
    a, b = model(tokens), model(changed)
    assert torch.equal(a[:, :7], b[:, :7])
    assert not torch.allclose(a[:, 7:], b[:, 7:])


@pytest.mark.parametrize("family", FAMILIES)
def test_identity_plan_is_bit_identical(family: str) -> None:
    model = make_model(family)
    tokens = random_tokens(model.config, 7, seed=4)
    assert torch.equal(model(tokens, plan=ExecutionPlan()), model(tokens))
    for dtype in (torch.float32, torch.bfloat16):
        m = make_model(family).to(dtype)
        assert torch.equal(m(tokens, plan=ExecutionPlan()), m(tokens))


class CountingKernel:
    """A LinearKernel that records which (layer, name) pairs ran and computes exactly."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, str]] = []

    def __call__(self, x, weight, bias, layer, name):  # type: ignore[no-untyped-def]
        self.calls.append((layer, name))
        return exact_linear(x, weight, bias)


@pytest.mark.parametrize("family", FAMILIES)
def test_counting_kernel_is_exact_and_sees_every_linear(family: str) -> None:
    model = make_model(family)
    kernel = CountingKernel()
    tokens = random_tokens(model.config, 5, seed=5)
    model.shape_invariant = False  # a plan with a kernel is a draft: it runs the plain forms
    assert torch.equal(model(tokens, plan=ExecutionPlan(linear=kernel)), model(tokens))
    per_layer = 7 if family == "llama" else 6
    assert len(kernel.calls) == model.config.n_layers * per_layer + 1
    assert kernel.calls[-1] == (-1, "head")


@pytest.mark.parametrize("family", FAMILIES)
def test_skipped_sublayers_never_execute_and_write_no_kv(family: str) -> None:
    model = make_model(family)
    c = model.config
    kernel = CountingKernel()
    plan = ExecutionPlan(skip_attention=frozenset({1}), skip_mlp=frozenset({0, 2}), linear=kernel)
    cache = KVCache(c, 16, torch.float64)
    cache.k[1].fill_(7.0)  # sentinel: a skipped attention must not overwrite layer 1's rows
    tokens = random_tokens(c, 4, seed=6)
    logits = model(tokens, cache=cache, plan=plan)
    assert not any(layer == 1 and name.startswith("attn") for layer, name in kernel.calls)
    assert not any(layer in (0, 2) and name.startswith("mlp") for layer, name in kernel.calls)
    assert any(layer == 0 and name == "attn_q" for layer, name in kernel.calls)
    assert torch.all(cache.k[1] == 7.0)
    assert not torch.all(cache.k[0, :, :, :4] == 0.0)
    # The skipped forward differs from the full one (the plan had an effect).
    assert not torch.allclose(logits, model(tokens))


@pytest.mark.parametrize("family", FAMILIES)
def test_exit_after_uses_the_shared_head(family: str) -> None:
    model = make_model(family)
    c = model.config
    tokens = random_tokens(c, 5, seed=7)
    exited = model(tokens, plan=ExecutionPlan(exit_after=2))
    # Oracle: the same model with only the first two blocks kept and the same head/norm.
    shallow = Transformer(ModelConfig(**{**c.__dict__, "n_layers": 2})).to(torch.float64)
    state = {k: v for k, v in model.state_dict().items() if not k.startswith("layers.2.")}
    shallow.load_state_dict(state)
    torch.testing.assert_close(exited, shallow(tokens), **TOL)
    kernel = CountingKernel()
    model(tokens, plan=ExecutionPlan(exit_after=1, linear=kernel))
    assert {layer for layer, _ in kernel.calls} == {0, -1}


@pytest.mark.parametrize("family", FAMILIES)
def test_compute_dtype_uses_cached_cast_weights(family: str) -> None:
    model = make_model(family)
    tokens = random_tokens(model.config, 5, seed=8)
    plan = ExecutionPlan(compute_dtype=torch.float32)
    out = model(tokens, plan=plan)
    assert out.dtype == torch.float32
    reference_model = make_model(family).to(torch.float32)
    reference_model.shape_invariant = False  # a plan that changes the dtype is a draft: plain
    torch.testing.assert_close(out, reference_model(tokens), rtol=0, atol=0)
    first = model.weights_in(torch.float32)
    assert model.weights_in(torch.float32) is first  # cast once, kept
    with torch.no_grad():
        model.norm.weight.mul_(2.0)  # a parameter change invalidates the cast copy
    assert model.weights_in(torch.float32) is not first
    assert not torch.equal(model(tokens, plan=plan), out)


def test_bf16_draft_reads_an_fp32_cache() -> None:
    model = make_model("llama").to(torch.float32)
    c = model.config
    tokens = random_tokens(c, 8, seed=9)
    cache = KVCache(c, 16, torch.float32)
    model(tokens[:, :6], cache=cache)
    out = model(tokens[:, 6:], cache=cache, plan=ExecutionPlan(compute_dtype=torch.bfloat16))
    full = model(tokens)[:, 6:]
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float(), full, rtol=0.1, atol=0.15)


def test_exact_linear_formulations_agree() -> None:
    gen = torch.Generator().manual_seed(0)
    w = torch.randn(40, 24, generator=gen)
    b = torch.randn(40, generator=gen)
    for rows in (1, 2, 3, 8):
        x = torch.randn(1, rows, 24, generator=gen)
        ref = x.double() @ w.double().T + b.double()
        for dtype, tol in ((torch.float32, 1e-5), (torch.bfloat16, 0.3)):
            out = exact_linear(x.to(dtype), w.to(dtype), b.to(dtype))
            assert out.shape == (1, rows, 40) and out.dtype == dtype
            torch.testing.assert_close(out.double(), ref, rtol=0.05, atol=tol)


@pytest.mark.parametrize("family", FAMILIES)
def test_bad_inputs_raise_clear_errors(family: str) -> None:
    """Shapes are checked by every forward; values (ids, positions, mask rows, the plan) by
    `validate_inputs`, which the public entry points call once."""
    model = make_model(family)
    c = model.config
    tokens = random_tokens(c, 3, seed=0)
    model.validate_inputs(tokens, torch.arange(3).unsqueeze(0), plan=ExecutionPlan())  # valid
    with pytest.raises(ValueError, match="token ids must be in"):
        model.validate_inputs(torch.tensor([[0, c.vocab_size]]))
    with pytest.raises(ValueError, match="token ids must be in"):
        model.validate_inputs(torch.tensor([[-1]]))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        model(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match=r"\(B, T\)"):
        model.validate_inputs(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="integer dtype"):
        model(torch.zeros(1, 2))
    with pytest.raises(ValueError, match="positions must be in"):
        model.validate_inputs(tokens, torch.tensor([[0, 1, c.max_seq_len]]))
    with pytest.raises(ValueError, match="shape of tokens"):
        model(tokens, torch.tensor([[0, 1]]))
    with pytest.raises(ValueError, match=r"expected \(T, S\)"):
        model(tokens, attn_mask=torch.ones(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="bool"):
        model(tokens, attn_mask=torch.ones(3, 3))
    with pytest.raises(ValueError, match="allow no key"):
        model.validate_inputs(tokens, attn_mask=torch.zeros(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="exit_after"):
        model.validate_inputs(tokens, plan=ExecutionPlan(exit_after=c.n_layers + 1))
    with pytest.raises(ValueError, match="skip_mlp"):
        model.validate_inputs(tokens, plan=ExecutionPlan(skip_mlp=frozenset({c.n_layers})))
    cache = KVCache(c, 4, torch.float64)
    model(tokens, cache=cache)
    with pytest.raises(ValueError, match="overflow"):
        model(tokens[:, :2], cache=cache)
    assert cache.length == 3  # a refused forward leaves the cache untouched
    with pytest.raises(ValueError, match="max_seq_len"):
        model(torch.zeros(1, c.max_seq_len + 1, dtype=torch.long))


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="family"):
        tiny_llama(family="bert")
    with pytest.raises(ValueError, match="n_kv_heads"):
        tiny_llama(n_kv_heads=3)
    with pytest.raises(ValueError, match="divisible"):
        tiny_llama(d_model=30)
    with pytest.raises(ValueError, match="vocab_size"):
        tiny_llama(vocab_size=0)
    with pytest.raises(ValueError, match="eos_ids"):
        tiny_llama(eos_ids=(999,))
    assert tiny_gpt2(attention_bias=False).attention_bias  # GPT-2 always has biases
    assert tiny_llama().head_dim == 8


def test_llama_rope_depends_only_on_relative_positions() -> None:
    """Shifting every position by a constant leaves llama logits unchanged (RoPE is relative)."""
    model = make_model("llama")
    tokens = random_tokens(model.config, 8, seed=11)
    shifted = torch.arange(8).unsqueeze(0) + 29  # (1, 8)
    torch.testing.assert_close(model(tokens, shifted), model(tokens), **TOL)
    gpt2 = make_model("gpt2")  # learned positions are absolute: the shift must matter
    assert not torch.allclose(gpt2(tokens % 53, shifted), gpt2(tokens % 53))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_rope_roll_with_signed_table_is_the_rotate_half_form_bit_for_bit(dtype) -> None:
    """`rope` rolls x against a sin table whose first half is negated; written out with the
    plain table, HF's form is ``x cos + (-x2, x1) sin``: the same products, the same bits."""
    model = make_model("llama")
    _, cos, signed_sin = model._tables(dtype, torch.device("cpu"))
    half = cos.shape[-1] // 2
    sin = torch.cat((signed_sin[:, half:], signed_sin[:, half:]), dim=-1)  # (S, D_head)
    assert torch.equal(signed_sin[:, :half], -sin[:, :half])
    x = torch.randn(2, 3, 5, 2 * half, dtype=torch.float64).to(dtype)  # (B, H, T, D_head)
    positions = torch.tensor([0, 1, 7, 30, 63])
    c, s = cos[positions], sin[positions]  # (T, D_head)
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    assert torch.equal(rope(x, c, signed_sin[positions]), x * c + rotated * s)


@pytest.mark.parametrize("tied", [False, True])
def test_llama_matches_transformers(tied: bool) -> None:
    """An independent oracle for RMSNorm, rotate-half RoPE, GQA and SwiGLU (skipped if absent)."""
    transformers = pytest.importorskip("transformers")
    model = make_model("llama", seed=5, tie_embeddings=tied, rope_theta=500.0)
    c = model.config
    hf_config = transformers.LlamaConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.d_model,
        intermediate_size=c.d_ff,
        num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads,
        num_key_value_heads=c.n_kv_heads,
        max_position_embeddings=c.max_seq_len,
        rms_norm_eps=c.norm_eps,
        rope_theta=c.rope_theta,
        tie_word_embeddings=c.tie_embeddings,
        attention_bias=False,
    )
    hf_config.rope_parameters = {"rope_type": "default", "rope_theta": c.rope_theta}
    hf = transformers.LlamaForCausalLM(hf_config).to(torch.float64).eval()
    hf_state = to_hf_llama_state_dict(model.state_dict())
    missing, unexpected = hf.load_state_dict(hf_state, strict=False)
    assert not unexpected and all("lm_head" in m or "rotary" in m for m in missing)
    tokens = random_tokens(c, 10, seed=12)
    with torch.no_grad():
        expected = hf(tokens).logits
    # transformers builds its RoPE frequencies in float32 (ours: float64), hence ~4e-7, not 1e-12;
    # a wrong rotation convention or GQA head order gives differences of order 1.
    torch.testing.assert_close(model(tokens), expected, rtol=0, atol=1e-5)
