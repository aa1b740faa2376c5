"""Model configuration: the shape of a Transformer, as a frozen, validated dataclass.

Scope: the hyper-parameters of the two model families the reference runs, Llama (RMSNorm, RoPE,
grouped-query attention, SwiGLU) and GPT-2 (LayerNorm, learned positions, GELU MLP, biases), plus
a few named presets. This is not part of the CAS-Spec algorithm itself (arXiv 2510.26843); it is
the target model the algorithm accelerates. Every virtual draft model shares this configuration:
a DSIA strategy changes how a forward runs (`casspec_ref.plan`), never the model's shape.

Notable choices:
- Validation happens in ``__post_init__`` and raises `ValueError` naming the field and the
  allowed range, so a bad config fails at construction, not deep inside torch.
- ``rope_theta`` is ignored by the GPT-2 family (learned positions) but still validated.
- The tiny presets are small enough for float64 exactness tests (vocab <= 64, width <= 64,
  <= 4 layers); ``smollm2_135m`` matches the embedded GGUF (see docs/smollm2.md).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

FAMILIES = ("llama", "gpt2")


@dataclass(frozen=True)
class ModelConfig:
    """The shape of a decoder-only Transformer.

    Attributes:
        family: ``"llama"`` or ``"gpt2"``.
        vocab_size: number of token ids, V.
        n_layers: number of blocks, L.
        d_model: residual width, D.
        n_heads: query heads, H.
        n_kv_heads: key/value heads (grouped-query attention); must divide ``n_heads``.
        d_ff: hidden width of the MLP.
        max_seq_len: the context length (positions ``0 .. max_seq_len - 1``).
        norm_eps: epsilon of RMSNorm / LayerNorm.
        rope_theta: RoPE base frequency (Llama only).
        tie_embeddings: the LM head reuses the token embedding matrix.
        attention_bias: the attention projections have biases. GPT-2 always has them, so the
            gpt2 family normalizes this flag to ``True`` at construction.
        bos_id: beginning-of-sequence id, or ``None``.
        eos_ids: end-of-sequence ids (generation stops after emitting one of them).
    """

    family: Literal["llama", "gpt2"]
    vocab_size: int
    n_layers: int
    d_model: int
    n_heads: int
    n_kv_heads: int
    d_ff: int
    max_seq_len: int
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_embeddings: bool = True
    attention_bias: bool = False
    bos_id: int | None = None
    eos_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"ModelConfig.family={self.family!r}: allowed are {FAMILIES}")
        for name in (
            "vocab_size",
            "n_layers",
            "d_model",
            "n_heads",
            "n_kv_heads",
            "d_ff",
            "max_seq_len",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ModelConfig.{name}={value!r}: must be an integer >= 1")
        if self.d_model % self.n_heads != 0:
            raise ValueError(
                f"ModelConfig.d_model={self.d_model} must be divisible by n_heads={self.n_heads}"
            )
        if self.n_heads % self.n_kv_heads != 0:
            raise ValueError(
                f"ModelConfig.n_heads={self.n_heads} must be a multiple of "
                f"n_kv_heads={self.n_kv_heads} (grouped-query attention)"
            )
        if self.family == "llama" and self.head_dim % 2 != 0:
            raise ValueError(
                f"ModelConfig.head_dim={self.head_dim} must be even for RoPE (llama family)"
            )
        if self.family == "gpt2" and self.n_kv_heads != self.n_heads:
            raise ValueError(
                f"ModelConfig.n_kv_heads={self.n_kv_heads} must equal n_heads={self.n_heads} "
                "for the gpt2 family (no grouped-query attention)"
            )
        if self.family == "gpt2" and not self.attention_bias:
            # GPT-2 always has biases; accept the flag but keep it truthful.
            object.__setattr__(self, "attention_bias", True)
        if not self.norm_eps > 0:
            raise ValueError(f"ModelConfig.norm_eps={self.norm_eps!r}: must be > 0")
        if not self.rope_theta > 0:
            raise ValueError(f"ModelConfig.rope_theta={self.rope_theta!r}: must be > 0")
        if self.bos_id is not None and not 0 <= self.bos_id < self.vocab_size:
            raise ValueError(
                f"ModelConfig.bos_id={self.bos_id}: allowed are None or 0..{self.vocab_size - 1}"
            )
        object.__setattr__(self, "eos_ids", tuple(self.eos_ids))
        bad = [i for i in self.eos_ids if not 0 <= i < self.vocab_size]
        if bad:
            raise ValueError(
                f"ModelConfig.eos_ids has ids {bad} out of range 0..{self.vocab_size - 1}"
            )

    @property
    def head_dim(self) -> int:
        """Width of one attention head, ``d_model // n_heads``."""
        return self.d_model // self.n_heads


def tiny_llama(**overrides: Any) -> ModelConfig:
    """A tiny Llama-family config for tests (GQA with 2 query heads per KV head, untied head)."""
    base = ModelConfig(
        family="llama", vocab_size=61, n_layers=3, d_model=32, n_heads=4, n_kv_heads=2, d_ff=48,
        max_seq_len=64, norm_eps=1e-5, rope_theta=10000.0, tie_embeddings=False,
        attention_bias=False, bos_id=1, eos_ids=(2,),
    )  # fmt: skip
    return replace(base, **overrides)


def tiny_gpt2(**overrides: Any) -> ModelConfig:
    """A tiny GPT-2-family config for tests (tied head, biases everywhere)."""
    base = ModelConfig(
        family="gpt2", vocab_size=53, n_layers=3, d_model=32, n_heads=4, n_kv_heads=4, d_ff=64,
        max_seq_len=64, norm_eps=1e-5, tie_embeddings=True, attention_bias=True, bos_id=None,
        eos_ids=(0,),
    )  # fmt: skip
    return replace(base, **overrides)


def smollm2_135m() -> ModelConfig:
    """SmolLM2-135M-Instruct, as stored in the embedded GGUF (see docs/smollm2.md)."""
    return ModelConfig(
        family="llama", vocab_size=49152, n_layers=30, d_model=576, n_heads=9, n_kv_heads=3,
        d_ff=1536, max_seq_len=8192, norm_eps=1e-5, rope_theta=100000.0, tie_embeddings=True,
        attention_bias=False, bos_id=1, eos_ids=(2,),
    )  # fmt: skip
