"""Argument checks of the model's building blocks: `ModelConfig`, `ExecutionPlan`, `KVCache`
and the inputs of `Transformer.forward`.

Each check raises `ValueError` naming the argument, its value and what is allowed. The objects
are duck-typed (this module imports nothing from `casspec_ref`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

#: The model families `ModelConfig.family` allows.
FAMILIES = ("llama", "gpt2")

_POSITIVE_INTS = ("vocab_size", "n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff")


def check_model_config(c: Any) -> None:
    """The fields of a `ModelConfig`: types, ranges and the divisibility the heads need."""
    if c.family not in FAMILIES:
        raise ValueError(f"ModelConfig.family={c.family!r}: allowed are {FAMILIES}")
    for name in (*_POSITIVE_INTS, "max_seq_len"):
        value = getattr(c, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"ModelConfig.{name}={value!r}: must be an integer >= 1")
    if c.d_model % c.n_heads != 0:
        raise ValueError(
            f"ModelConfig.d_model={c.d_model} must be divisible by n_heads={c.n_heads}"
        )
    if c.n_heads % c.n_kv_heads != 0:
        raise ValueError(
            f"ModelConfig.n_heads={c.n_heads} must be a multiple of "
            f"n_kv_heads={c.n_kv_heads} (grouped-query attention)"
        )
    if c.family == "llama" and c.head_dim % 2 != 0:
        raise ValueError(f"ModelConfig.head_dim={c.head_dim} must be even for RoPE (llama family)")
    if c.family == "gpt2" and c.n_kv_heads != c.n_heads:
        raise ValueError(
            f"ModelConfig.n_kv_heads={c.n_kv_heads} must equal n_heads={c.n_heads} "
            "for the gpt2 family (no grouped-query attention)"
        )
    if not c.norm_eps > 0:
        raise ValueError(f"ModelConfig.norm_eps={c.norm_eps!r}: must be > 0")
    if not c.rope_theta > 0:
        raise ValueError(f"ModelConfig.rope_theta={c.rope_theta!r}: must be > 0")
    if c.bos_id is not None and not 0 <= c.bos_id < c.vocab_size:
        raise ValueError(
            f"ModelConfig.bos_id={c.bos_id}: allowed are None or 0..{c.vocab_size - 1}"
        )
    bad = [i for i in c.eos_ids if not 0 <= i < c.vocab_size]
    if bad:
        raise ValueError(f"ModelConfig.eos_ids has ids {bad} out of range 0..{c.vocab_size - 1}")


def check_plan(plan: Any, n_layers: int) -> None:
    """An `ExecutionPlan` for a model with ``n_layers`` blocks."""
    n = n_layers
    for field_name in ("skip_attention", "skip_mlp"):
        bad = sorted(i for i in getattr(plan, field_name) if not 0 <= i < n)
        if bad:
            raise ValueError(
                f"ExecutionPlan.{field_name} has layer indices {bad} out of range: "
                f"allowed are 0..{n - 1} for a model with {n} layers"
            )
    if plan.exit_after is not None and not 1 <= plan.exit_after <= n:
        raise ValueError(
            f"ExecutionPlan.exit_after={plan.exit_after} is out of range: allowed are "
            f"1..{n} (the number of blocks to run) or None for all {n}"
        )
    if plan.compute_dtype is not None and not plan.compute_dtype.is_floating_point:
        raise ValueError(
            f"ExecutionPlan.compute_dtype={plan.compute_dtype} is not a floating-point dtype: "
            "allowed are torch.float64, torch.float32, torch.bfloat16, torch.float16 or None"
        )


def check_kv_cache(config: Any, max_len: Any, dtype: torch.dtype, batch: Any) -> None:
    """The arguments of `KVCache(config, max_len, dtype, device, batch)`."""
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
        raise ValueError(f"KVCache max_len={max_len!r}: must be an integer >= 1")
    if max_len > config.max_seq_len:
        raise ValueError(
            f"KVCache max_len={max_len} exceeds the model context max_seq_len={config.max_seq_len}"
        )
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ValueError(f"KVCache batch={batch!r}: must be an integer >= 1")
    if not dtype.is_floating_point:
        raise ValueError(f"KVCache dtype={dtype}: must be a floating-point dtype")


def check_cache_write(cache: Any, layer: int, k_new: torch.Tensor, v_new: torch.Tensor) -> None:
    """`KVCache.write`'s arguments: a block index, ``(B, H_kv, T, D_head)`` rows that fit."""
    n_layers = cache.k.shape[0]
    if not 0 <= layer < n_layers:
        raise ValueError(f"KVCache.write layer={layer}: allowed are 0..{n_layers - 1}")
    expected = (cache.k.shape[1], cache.k.shape[2], cache.k.shape[4])
    if k_new.dim() != 4 or (k_new.shape[0], k_new.shape[1], k_new.shape[3]) != expected:
        raise ValueError(
            f"KVCache.write: k_new has shape {tuple(k_new.shape)}, expected "
            f"(B={expected[0]}, H_kv={expected[1]}, T, D_head={expected[2]})"
        )
    if v_new.shape != k_new.shape:
        raise ValueError(
            f"KVCache.write: v_new shape {tuple(v_new.shape)} != k_new shape {tuple(k_new.shape)}"
        )
    if cache.length + k_new.shape[2] > cache.max_len:
        raise ValueError(
            f"KVCache overflow: {cache.length} cached + {k_new.shape[2]} new rows exceed "
            f"max_len={cache.max_len}"
        )


def check_advance(cache: Any, n: int) -> None:
    """`KVCache.advance`'s argument: the new length stays within ``0..max_len``."""
    if n < 0 or cache.length + n > cache.max_len:
        raise ValueError(
            f"KVCache.advance({n}): length {cache.length} + {n} must stay within "
            f"0..max_len={cache.max_len}"
        )


def check_truncate(n: int, length: int) -> None:
    """`KVCache.truncate`'s argument: a length the cache already has."""
    if not 0 <= n <= length:
        raise ValueError(
            f"KVCache.truncate({n}): allowed are 0..length={length} "
            "(truncate cannot grow the cache)"
        )


def check_commit(base: int, keep: Sequence[int], length: int) -> None:
    """`KVCache.commit`'s arguments: ``base`` within the cache, ``keep`` strictly ascending and
    within the rows after ``base``."""
    if not 0 <= base <= length:
        raise ValueError(f"KVCache.commit base={base}: allowed are 0..length={length}")
    if any(b <= a for a, b in zip(keep, keep[1:], strict=False)):
        raise ValueError(f"KVCache.commit keep={keep}: indices must be strictly ascending")
    if keep and (keep[0] < 0 or base + keep[-1] >= length):
        raise ValueError(
            f"KVCache.commit keep={keep}: allowed are 0..{length - base - 1} "
            f"(rows base={base} .. length-1={length - 1})"
        )


def check_forward_shapes(
    config: Any,
    tokens: torch.Tensor,
    positions: torch.Tensor | None,
    cache: Any,
    attn_mask: torch.Tensor | None,
) -> int:
    """Shapes, dtypes and cache room of a forward's inputs; no tensor value is read (no host
    sync). Returns ``past``, the cached length (0 without a cache)."""
    c = config
    if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.shape[1] < 1:
        shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens)
        raise ValueError(f"tokens must be a (B, T) tensor with T >= 1, got {shape}")
    if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
        raise ValueError(f"tokens must have an integer dtype, got {tokens.dtype}")
    n_batch, n_new = tokens.shape
    past = 0
    if cache is not None:
        fits = (c.n_kv_heads, cache.max_len, c.head_dim)
        if cache.config.n_layers != c.n_layers or cache.k.shape[2:] != fits:
            raise ValueError(f"the KV cache {cache!r} does not fit this model's config")
        if cache.k.shape[1] != n_batch:
            raise ValueError(f"tokens batch {n_batch} != KV cache batch {cache.k.shape[1]}")
        past = cache.length
        if past + n_new > cache.max_len:
            raise ValueError(
                f"KV cache overflow: {past} cached + {n_new} new tokens exceed the cache's "
                f"max_len={cache.max_len}"
            )
    if positions is None:
        if past + n_new > c.max_seq_len:
            raise ValueError(
                f"{past} cached + {n_new} new tokens exceed max_seq_len={c.max_seq_len}"
            )
    else:
        if not isinstance(positions, torch.Tensor) or positions.shape != tokens.shape:
            shape = tuple(positions.shape) if isinstance(positions, torch.Tensor) else None
            raise ValueError(
                f"positions must have the shape of tokens {tuple(tokens.shape)}, got {shape}"
            )
        if positions.dtype.is_floating_point or positions.dtype == torch.bool:
            raise ValueError(f"positions must have an integer dtype, got {positions.dtype}")
    if attn_mask is not None:
        if not isinstance(attn_mask, torch.Tensor) or attn_mask.dtype != torch.bool:
            raise ValueError("attn_mask must be a bool tensor (True = may attend)")
        if tuple(attn_mask.shape) != (n_new, past + n_new):
            raise ValueError(
                f"attn_mask has shape {tuple(attn_mask.shape)}, expected (T, S) = "
                f"({n_new}, {past + n_new}) (S = cached length + new tokens)"
            )
    return past


def check_forward_inputs(
    config: Any,
    tokens: torch.Tensor,
    positions: torch.Tensor | None = None,
    cache: Any = None,
    attn_mask: torch.Tensor | None = None,
    plan: Any = None,
) -> None:
    """Everything `check_forward_shapes` checks, plus values (token and position ranges, mask
    rows that allow no key) and the plan. Reads tensors back to the host: call it once where
    inputs enter, not in the hot loop."""
    c = config
    if plan is not None:
        check_plan(plan, c.n_layers)
    check_forward_shapes(c, tokens, positions, cache, attn_mask)
    lo, hi = int(tokens.min()), int(tokens.max())
    if lo < 0 or hi >= c.vocab_size:
        raise ValueError(
            f"token ids must be in 0..{c.vocab_size - 1} (vocab_size), got min {lo}, max {hi}"
        )
    if positions is not None:
        lo, hi = int(positions.min()), int(positions.max())
        if lo < 0 or hi >= c.max_seq_len:
            raise ValueError(
                f"positions must be in 0..{c.max_seq_len - 1} (max_seq_len), got min {lo}, max {hi}"
            )
    if attn_mask is not None:
        empty = (~attn_mask.any(dim=1)).nonzero().flatten().tolist()
        if empty:
            raise ValueError(f"attn_mask rows {empty} allow no key at all (softmax undefined)")
