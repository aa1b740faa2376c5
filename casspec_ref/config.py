"""Model configuration: the shape of a Transformer, as a frozen, validated dataclass.

The target model CAS-Spec accelerates, in one of two families: Llama (RMSNorm, RoPE,
grouped-query attention, SwiGLU) or GPT-2 (LayerNorm, learned positions, GELU MLP, biases).
Every virtual draft shares this shape: a DSIA strategy changes how a forward runs
(`casspec_ref.plan`), never the model. The presets are below; the architectures left out of scope:
docs/design.md ("Scope, and what was left out").
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from casspec_ref.base.model_checks import check_model_config


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a decoder-only Transformer (a bad field raises `ValueError` at once)."""

    family: Literal["llama", "gpt2"]
    vocab_size: int  # V, the number of token ids
    n_layers: int  # L, the number of blocks
    d_model: int  # D, the residual width
    n_heads: int  # H, query heads
    n_kv_heads: int  # key/value heads (grouped-query attention); divides n_heads
    d_ff: int  # hidden width of the MLP
    max_seq_len: int  # the context: positions 0 .. max_seq_len - 1
    norm_eps: float = 1e-5  # epsilon of RMSNorm / LayerNorm
    rope_theta: float = 10000.0  # RoPE base frequency (Llama only)
    tie_embeddings: bool = True  # the LM head reuses the token embedding matrix
    attention_bias: bool = False  # biases on the attention projections (always on for GPT-2)
    bos_id: int | None = None  # beginning-of-sequence id
    eos_ids: tuple[int, ...] = ()  # generation stops after emitting one of these

    def __post_init__(self) -> None:
        object.__setattr__(self, "eos_ids", tuple(self.eos_ids))
        if self.family == "gpt2":  # GPT-2 always has biases: accept the flag, keep it truthful
            object.__setattr__(self, "attention_bias", True)
        check_model_config(self)

    @property
    def head_dim(self) -> int:
        """Width of one attention head, ``d_model // n_heads``."""
        return self.d_model // self.n_heads


def tiny_llama(**overrides: Any) -> ModelConfig:
    """A tiny Llama-family config for tests (GQA with 2 query heads per KV head, untied head)."""
    return replace(
        ModelConfig(
            family="llama",
            vocab_size=61,
            n_layers=3,
            d_model=32,
            n_heads=4,
            n_kv_heads=2,
            d_ff=48,
            max_seq_len=64,
            tie_embeddings=False,
            bos_id=1,
            eos_ids=(2,),
        ),
        **overrides,
    )


def tiny_gpt2(**overrides: Any) -> ModelConfig:
    """A tiny GPT-2-family config for tests (tied head, biases everywhere)."""
    return replace(
        ModelConfig(
            family="gpt2",
            vocab_size=53,
            n_layers=3,
            d_model=32,
            n_heads=4,
            n_kv_heads=4,
            d_ff=64,
            max_seq_len=64,
            tie_embeddings=True,
            attention_bias=True,
            bos_id=None,
            eos_ids=(0,),
        ),
        **overrides,
    )


def smollm2_135m() -> ModelConfig:
    """SmolLM2-135M-Instruct, as stored in the embedded GGUF (see docs/smollm2.md)."""
    return ModelConfig(
        family="llama",
        vocab_size=49152,
        n_layers=30,
        d_model=576,
        n_heads=9,
        n_kv_heads=3,
        d_ff=1536,
        max_seq_len=8192,
        norm_eps=1e-5,
        rope_theta=100000.0,
        tie_embeddings=True,
        attention_bias=False,
        bos_id=1,
        eos_ids=(2,),
    )
