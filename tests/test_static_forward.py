"""The fixed-shape, static-buffer forward (`casspec_ref.accel.static_forward`) on CPU, where it
runs without graph capture: every forward through it at one shape, so a T-row forward's rows
are the same bits as T one-row forwards through it (logits and K/V, any width, chunked prompts,
bfloat16 and float32), and every method through it equals the naive loop through
it (shape invariance by construction). All checks are exact."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from casspec_ref.accel.static_forward import StaticForward, StaticModel
from casspec_ref.base.random_weights import random_init_
from casspec_ref.config import tiny_gpt2, tiny_llama
from casspec_ref.generate import generate_ar
from casspec_ref.kv_cache import KVCache
from casspec_ref.model import Transformer
from casspec_ref.plan import ExecutionPlan
from casspec_ref.speculative import METHODS, generate_speculative

#: The shipped model's head size (SmolLM2: 64). At head size 8, oneDNN's bfloat16 product of the
#: attention weights and V was seen to round a row differently among 48 rows than among 2
#: (docs/floating_point.md, "What is measured, not proven").
HEAD_64 = {"d_model": 128, "n_heads": 2, "n_kv_heads": 1}


def _model(family: str, seed: int, dtype: torch.dtype) -> Transformer:
    make = tiny_llama if family == "llama" else tiny_gpt2
    heads = HEAD_64 if family == "llama" else {**HEAD_64, "n_kv_heads": 2}
    return random_init_(Transformer(make(max_seq_len=128, **heads)), seed=seed).to(dtype)


def _drafts(model: Transformer) -> tuple[ExecutionPlan, ...]:
    n = model.config.n_layers
    return (
        ExecutionPlan(exit_after=n - 1, name="exit"),
        ExecutionPlan(skip_mlp=frozenset({n - 1}), name="skipmlp"),
    )


@settings(max_examples=25)
@given(
    family=st.sampled_from(["llama", "gpt2"]),
    width=st.integers(1, 16),
    past=st.integers(1, 40),
    n_new=st.integers(1, 16),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from([torch.bfloat16, torch.float32]),
)
def test_a_static_forwards_rows_are_its_one_row_forwards_bits(
    family: str, width: int, past: int, n_new: int, seed: int, dtype: torch.dtype
) -> None:
    """A prompt of ``past`` tokens (chunked when longer than the width), then ``n_new`` tokens
    in one target forward and one by one: logits and K/V. (A draft's rows run the plain
    products, which may round a row by its place among the call's rows: a draft only
    proposes.)"""
    model = _model(family, seed % 3, dtype)
    static = StaticModel(model, width)
    gen = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    prompt = torch.randint(0, vocab, (1, past), generator=gen)  # (1, past)
    new = torch.randint(0, vocab, (1, n_new), generator=gen)  # (1, T)
    caches = [KVCache(model.config, past + n_new, dtype) for _ in range(2)]
    for cache in caches:
        static(prompt, cache=cache)
    together = static(new, cache=caches[0])[0]  # (T, V)
    alone = [static(new[:, t : t + 1], cache=caches[1])[0, 0] for t in range(n_new)]
    assert all(torch.equal(together[t], alone[t]) for t in range(n_new))
    assert caches[0].length == caches[1].length == past + n_new
    assert torch.equal(caches[0].k, caches[1].k) and torch.equal(caches[0].v, caches[1].v)


@pytest.mark.parametrize("method", METHODS)
def test_every_method_through_the_static_path_equals_its_naive_loop_in_bfloat16(
    method: str,
) -> None:
    for family, seed in (("llama", 0), ("gpt2", 1)):
        model = _model(family, seed, torch.bfloat16)
        static = StaticModel(model, 8)
        for prompt in ([3, 5, 7, 9, 3, 5, 7, 11], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]):
            want = generate_ar(static, prompt, 24).tokens
            got = generate_speculative(static, prompt, 24, method=method, drafts=_drafts(model))
            assert got.tokens == want, f"{method} through the static path diverged"


@pytest.mark.parametrize("method", ["pld", "chain", "vchc", "static-tree", "cas-spec"])
def test_in_float32_the_static_path_is_shape_invariant_by_construction(method: str) -> None:
    """Every forward at one shape: a method equals the naive loop through the same path, in
    float32 too, where the eager forward's products round by row count on common BLAS."""
    for family, seed in (("llama", 2), ("gpt2", 3)):
        model = _model(family, seed, torch.float32)
        static = StaticModel(model, 6)
        for prompt in ([3, 5, 7, 9, 3, 5, 7, 11], [30, 30, 4, 30, 30, 4, 30]):
            want = generate_ar(static, prompt, 30).tokens
            got = generate_speculative(static, prompt, 30, method=method, drafts=_drafts(model))
            assert got.tokens == want, f"{method} through the static path diverged in float32"


def test_static_model_shares_the_parameters_and_captures_nothing_on_cpu() -> None:
    model = _model("llama", 0, torch.bfloat16)
    static = StaticModel(model, 4)
    assert static.tok_emb.weight is model.tok_emb.weight
    generate_ar(static, [1, 2, 3, 4, 5, 6], 8)
    assert static.static.captured == 0 and static.static.fallbacks == 0
    with torch.no_grad():
        model.tok_emb.weight.mul_(2.0)  # an in-place change is seen through the shared weights
    assert generate_ar(static, [1, 2, 3], 8).tokens == generate_ar(model, [1, 2, 3], 8).tokens


def test_bad_widths_and_inputs_are_refused() -> None:
    model = _model("llama", 0, torch.float32)
    with pytest.raises(ValueError, match="width must be in 1..128"):
        StaticForward(model, 0)
    forward = StaticForward(model, 2)
    cache = KVCache(model.config, 8, torch.float32)
    with pytest.raises(ValueError, match=r"T in 1..2"):
        forward(torch.tensor([[1, 2, 3]]), cache)
