"""The from-scratch decoder-only Transformer (Llama and GPT-2 families) that reads an ExecutionPlan.

Scope: one `Transformer` class whose `forward` runs new tokens against a `KVCache`, with an
arbitrary boolean attention mask (so a whole token tree is verified in one forward, CAS-Spec §4 /
docs/method.md §4: each node sees the verified prefix and its ancestors, position = prefix length +
depth) and an `ExecutionPlan` (docs/method.md §2: layer sparsity, early exit, activation
quantization via a `LinearKernel`, precision switching). The target and all its virtual drafts are
this one object with one set of weights.

Families:
- Llama: RMSNorm, rotary embeddings in the Hugging Face "rotate half" convention (so GGUF Q/K rows
  must be un-permuted by the loader, see docs/smollm2.md), grouped-query attention, SwiGLU MLP,
  tied or untied LM head, no biases unless ``config.attention_bias``.
- GPT-2: LayerNorm, learned positions, GELU (tanh approximation) MLP, biases, tied head.

Notable choices:
- Parameters live in `nn.Linear` / `nn.Embedding` / norm modules only so that names and layouts
  match the loaders (``(out, in)``); the forward never calls those modules. Every linear goes
  through the module-level `linear`, so the naive loop and every speculative path use the same
  kernels, and a plan can swap the kernel in one place.
- `exact_linear` (in `casspec_ref.base.kernels`) computes each product in the formulation a
  per-machine table chose for its weight shape, dtype and row count; every forward (naive loop,
  drafts, verification) reads the same table.
- Grouped-query attention without copying K/V: the G query heads that share one KV head are
  folded into the query-length axis, ``(B, H, T, D) -> (B, H_kv, G*T, D)``, and the mask is
  tiled G times (once per forward, as an additive bias), so `F.scaled_dot_product_attention`
  reads the cache in place (a repeat/expand of K/V would copy the whole history every layer of
  every decode step).
- ``compute_dtype`` runs on weight copies cast once and cached by `weights_in` (an explicit extra
  copy per dtype, refreshed when a parameter changes); the cache's K/V rows are cast on read.
- The forward trusts its inputs' values: it checks shapes and cache room (plain integer
  comparisons) but reads no tensor value back to the host. `validate_inputs` checks everything
  (token and position ranges, mask rows, plan) and is called once at the public boundary.
- ``last_only=True`` computes the LM head for the last position only (prefill needs no more).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from casspec_ref.base.kernels import exact_linear
from casspec_ref.config import ModelConfig
from casspec_ref.kv_cache import KVCache
from casspec_ref.plan import ExecutionPlan

__all__ = [
    "Transformer",
    "count_parameters",
    "exact_linear",
    "linear",
    "random_init_",
    "rms_norm",
    "rotate_half",
]


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    layer: int,
    name: str,
    plan: ExecutionPlan | None,
) -> torch.Tensor:
    """Every linear layer of the model: the plan's kernel when it has one, else `exact_linear`.

    ``layer`` is the block index (-1 for the LM head) and ``name`` one of
    `casspec_ref.plan.LINEAR_NAMES`.
    """
    if plan is not None and plan.linear is not None:
        return plan.linear(x, weight, bias, layer, name)
    return exact_linear(x, weight, bias)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm, statistics in at least float32 as Hugging Face's LlamaRMSNorm does."""
    stat_dtype = torch.promote_types(x.dtype, torch.float32)
    xs = x.to(stat_dtype)
    xs = xs * torch.rsqrt((xs * xs).mean(-1, keepdim=True) + eps)
    return weight * xs.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x1, x2) -> (-x2, x1)`` on the two halves of the last axis (HF "rotate half")."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Transformer(nn.Module):
    """A decoder-only Transformer of the Llama or GPT-2 family (see the module docstring)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        llama = c.family == "llama"
        bias = c.attention_bias
        kv_width = c.n_kv_heads * c.head_dim
        self.tok_emb = nn.Embedding(c.vocab_size, c.d_model)
        if not llama:
            self.pos_emb = nn.Embedding(c.max_seq_len, c.d_model)
        norm_cls = _RMSNormParams if llama else nn.LayerNorm
        self.layers = nn.ModuleList()
        for _ in range(c.n_layers):
            block = nn.Module()
            block.attn_norm = norm_cls(c.d_model)
            block.attn = nn.Module()
            block.attn.q = nn.Linear(c.d_model, c.d_model, bias=bias)
            block.attn.k = nn.Linear(c.d_model, kv_width, bias=bias)
            block.attn.v = nn.Linear(c.d_model, kv_width, bias=bias)
            block.attn.o = nn.Linear(c.d_model, c.d_model, bias=bias)
            block.mlp_norm = norm_cls(c.d_model)
            block.mlp = nn.Module()
            if llama:
                block.mlp.gate = nn.Linear(c.d_model, c.d_ff, bias=False)
                block.mlp.up = nn.Linear(c.d_model, c.d_ff, bias=False)
                block.mlp.down = nn.Linear(c.d_ff, c.d_model, bias=False)
            else:
                block.mlp.fc = nn.Linear(c.d_model, c.d_ff)
                block.mlp.proj = nn.Linear(c.d_ff, c.d_model)
            self.layers.append(block)
        self.norm = norm_cls(c.d_model)
        if not c.tie_embeddings:
            self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)
        # Derived tensors, computed on first use (nothing is touched at construction):
        # dtype -> (cast sources, their fingerprint, name -> weight);
        # (dtype, device) -> (cos, sin); device -> arange(max_seq_len).
        self._weights_cache: dict[
            torch.dtype, tuple[list[torch.Tensor], tuple, dict[str, torch.Tensor]]
        ] = {}
        self._rope_cache: dict[tuple[torch.dtype, torch.device], tuple[torch.Tensor, ...]] = {}
        self._index_cache: dict[torch.device, torch.Tensor] = {}
        #: The draft hierarchy the loader chose for this checkpoint (cheapest level first), or
        #: None for the generic default (`casspec_ref.speculative.default_drafts`).
        self.preset_drafts: tuple[ExecutionPlan, ...] | None = None

    # ----------------------------------------------------------------------------- weights
    def weights_in(self, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """All parameters by state-dict name, in ``dtype``.

        For the parameters' own dtype these are the parameters themselves (no copy), collected
        once. For another dtype they are copies cast once and kept (one extra copy of the model
        per dtype used by a plan's ``compute_dtype``), recast when a parameter was modified in
        place since (its version counter moved). ``.to()``, ``load_state_dict`` and
        `clear_weight_cache` drop the cache; replacing a parameter object by assignment needs
        `clear_weight_cache`.
        """
        cached = self._weights_cache.get(dtype)
        if cached is not None:
            sources, fingerprint, weights = cached
            if not sources or _fingerprint(sources) == fingerprint:
                return weights
        with torch.no_grad():
            params = list(self.named_parameters())
            weights = {n: p if p.dtype == dtype else p.detach().to(dtype) for n, p in params}
        # Parameters in their own dtype are read live; cast copies remember what they copied.
        cast: list[torch.Tensor] = [p for n, p in params if weights[n] is not p]
        self._weights_cache[dtype] = (cast, _fingerprint(cast), weights)
        return weights

    def clear_weight_cache(self) -> None:
        """Drop the collected/cast weights, rotary tables and index vectors (rebuilt on demand)."""
        self._weights_cache.clear()
        self._rope_cache.clear()
        self._index_cache.clear()

    def _apply(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.clear_weight_cache()  # .to(), .float(), .cuda() move or recast the parameters
        return super()._apply(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.clear_weight_cache()
        return super().load_state_dict(*args, **kwargs)

    def _rope_tables(self, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, ...]:
        """cos/sin tables ``(max_seq_len, D_head)``, computed in float64 then cast once."""
        key = (dtype, device)
        if key not in self._rope_cache:
            c = self.config
            half = c.head_dim // 2
            inv_freq = c.rope_theta ** (-torch.arange(half, dtype=torch.float64) * 2 / c.head_dim)
            angles = torch.outer(torch.arange(c.max_seq_len, dtype=torch.float64), inv_freq)
            angles = torch.cat((angles, angles), dim=-1)  # (max_seq_len, D_head)
            self._rope_cache[key] = (
                angles.cos().to(dtype=dtype, device=device),
                angles.sin().to(dtype=dtype, device=device),
            )
        return self._rope_cache[key]

    # ----------------------------------------------------------------------------- forward
    @torch.no_grad()
    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        attn_mask: torch.Tensor | None = None,
        plan: ExecutionPlan | None = None,
        *,
        last_only: bool = False,
    ) -> torch.Tensor:
        """Run ``T`` new tokens; return their logits.

        Args:
            tokens: ``(B, T)`` integer token ids.
            positions: ``(B, T)`` positions; ``None`` = ``past + arange(T)`` where ``past`` is
                ``cache.length`` (0 without a cache).
            cache: K/V of the ``past`` earlier tokens; the new tokens' K/V are written at
                ``[past, past + T)`` and ``cache.length`` advances by ``T``.
            attn_mask: ``(T, S)`` bool with ``S = past + T``; ``attn_mask[i, j]`` lets new token
                ``i`` attend to key ``j``. ``None`` = causal.
            plan: the execution plan; ``None`` (or the identity plan) runs the target exactly.
            last_only: compute logits for the last position only (returns ``(B, 1, V)``).
        Returns:
            logits ``(B, T, V)`` (or ``(B, 1, V)``), in the compute dtype.

        Shapes are checked; values (token ids, positions, mask rows, the plan) are trusted, as
        the hot loops call this for every draft and verify step: see `validate_inputs`.
        """
        c = self.config
        positions, past = self._check_shapes(tokens, positions, cache, attn_mask)
        n_batch, n_new = tokens.shape
        mask = self._causal_mask(n_new, past, tokens.device) if attn_mask is None else attn_mask

        # ========================= EXECUTION PLAN =========================================
        # The one place the forward reads the plan (besides `linear`, which asks the plan for
        # its kernel): which blocks run, which sub-layers they skip, and the compute dtype.
        own_dtype = self.tok_emb.weight.dtype
        dtype = own_dtype if plan is None or plan.compute_dtype is None else plan.compute_dtype
        n_run = c.n_layers if plan is None or plan.exit_after is None else plan.exit_after
        skip_attention = frozenset() if plan is None else plan.skip_attention
        skip_mlp = frozenset() if plan is None else plan.skip_mlp
        # ==================================================================================

        w = self.weights_in(dtype)
        x, cos, sin = self._embed(tokens, positions, w)
        bias = None if mask is None else self._attention_bias(mask, dtype)  # (G*T, S)

        for i in range(n_run):
            p = f"layers.{i}."
            if i not in skip_attention:
                h = self._norm(x, w, p + "attn_norm")
                h = self._attention(h, w, p, i, plan, cache, bias, cos, sin)
                x = x + h
            if i not in skip_mlp:
                h = self._norm(x, w, p + "mlp_norm")
                x = x + self._mlp(h, w, p, i, plan)

        if cache is not None:
            cache.advance(n_new)
        if last_only:
            x = x[:, -1:]  # (B, 1, D)
        x = self._norm(x, w, "norm")
        head = w["tok_emb.weight"] if c.tie_embeddings else w["head.weight"]
        return linear(x, head, None, -1, "head", plan)  # (B, T, V)

    def _embed(
        self, tokens: torch.Tensor, positions: torch.Tensor, w: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """Token embeddings ``(B, T, D)`` and the rotary tables ``(B, 1, T, D_head)`` of the
        positions (Llama), or embeddings with learned positions added and no tables (GPT-2)."""
        x = w["tok_emb.weight"][tokens]  # (B, T, D)
        if self.config.family != "llama":
            return x + w["pos_emb.weight"][positions], None, None
        cos_table, sin_table = self._rope_tables(x.dtype, tokens.device)
        return x, cos_table[positions].unsqueeze(1), sin_table[positions].unsqueeze(1)

    def _norm(self, x: torch.Tensor, w: dict[str, torch.Tensor], name: str) -> torch.Tensor:
        if self.config.family == "llama":
            return rms_norm(x, w[name + ".weight"], self.config.norm_eps)
        return F.layer_norm(
            x, (x.shape[-1],), w[name + ".weight"], w[name + ".bias"], self.config.norm_eps
        )

    def _mlp(
        self, h: torch.Tensor, w: dict[str, torch.Tensor], p: str, layer: int,
        plan: ExecutionPlan | None,
    ) -> torch.Tensor:  # fmt: skip
        """SwiGLU (Llama) or GELU (GPT-2) MLP of block ``layer`` (``p`` = its name prefix)."""
        if self.config.family == "llama":
            gate = linear(h, w[p + "mlp.gate.weight"], None, layer, "mlp_gate", plan)
            up = linear(h, w[p + "mlp.up.weight"], None, layer, "mlp_up", plan)
            return linear(
                F.silu(gate) * up, w[p + "mlp.down.weight"], None, layer, "mlp_down", plan
            )
        h = linear(h, w[p + "mlp.fc.weight"], w[p + "mlp.fc.bias"], layer, "mlp_fc", plan)
        h = F.gelu(h, approximate="tanh")
        return linear(h, w[p + "mlp.proj.weight"], w[p + "mlp.proj.bias"], layer, "mlp_proj", plan)

    def _attention(
        self,
        h: torch.Tensor,
        w: dict[str, torch.Tensor],
        p: str,
        layer: int,
        plan: ExecutionPlan | None,
        cache: KVCache | None,
        bias: torch.Tensor | None,
        cos: torch.Tensor | None,
        sin: torch.Tensor | None,
    ) -> torch.Tensor:
        c = self.config
        n_batch, n_new, _ = h.shape
        group = c.n_heads // c.n_kv_heads
        q = linear(h, w[p + "attn.q.weight"], w.get(p + "attn.q.bias"), layer, "attn_q", plan)
        k = linear(h, w[p + "attn.k.weight"], w.get(p + "attn.k.bias"), layer, "attn_k", plan)
        v = linear(h, w[p + "attn.v.weight"], w.get(p + "attn.v.bias"), layer, "attn_v", plan)
        q = q.view(n_batch, n_new, c.n_heads, c.head_dim).transpose(1, 2)  # (B, H, T, Dh)
        k = k.view(n_batch, n_new, c.n_kv_heads, c.head_dim).transpose(1, 2)  # (B, Hkv, T, Dh)
        v = v.view(n_batch, n_new, c.n_kv_heads, c.head_dim).transpose(1, 2)  # (B, Hkv, T, Dh)
        if cos is not None and sin is not None:
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
        if cache is not None:
            k, v = cache.write(layer, k, v)  # (B, Hkv, S, Dh) views of the cache
            if k.dtype != q.dtype:  # a draft in another precision reads the target's cache
                k, v = k.to(q.dtype), v.to(q.dtype)
        # Fold the G query heads of each KV head into the query axis: K/V are read in place.
        q = q.reshape(n_batch, c.n_kv_heads, group * n_new, c.head_dim)  # (B, Hkv, G*T, Dh)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # (B, Hkv, G*T, Dh)
        out = out.reshape(n_batch, c.n_heads, n_new, c.head_dim)  # (B, H, T, Dh)
        out = out.transpose(1, 2).reshape(n_batch, n_new, c.d_model)  # (B, T, D)
        return linear(out, w[p + "attn.o.weight"], w.get(p + "attn.o.bias"), layer, "attn_o", plan)

    # ----------------------------------------------------------------------------- checks
    def validate_inputs(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        cache: KVCache | None = None,
        attn_mask: torch.Tensor | None = None,
        plan: ExecutionPlan | None = None,
    ) -> None:
        """Check a forward's arguments completely; raise `ValueError` naming what is wrong.

        `forward` itself checks only shapes and cache room; this also reads values (token and
        position ranges, mask rows with no key) and validates the plan. Call it once where
        inputs enter from outside (the generation loops check their prompts and plans).
        """
        c = self.config
        if plan is not None:
            plan.validate(c)
        self._check_shapes(tokens, positions, cache, attn_mask)
        lo, hi = int(tokens.min()), int(tokens.max())
        if lo < 0 or hi >= c.vocab_size:
            raise ValueError(
                f"token ids must be in 0..{c.vocab_size - 1} (vocab_size), got min {lo}, max {hi}"
            )
        if positions is not None:
            lo, hi = int(positions.min()), int(positions.max())
            if lo < 0 or hi >= c.max_seq_len:
                raise ValueError(
                    f"positions must be in 0..{c.max_seq_len - 1} (max_seq_len), got min {lo}, "
                    f"max {hi}"
                )
        if attn_mask is not None:
            empty = (~attn_mask.any(dim=1)).nonzero().flatten().tolist()
            if empty:
                raise ValueError(f"attn_mask rows {empty} allow no key at all (softmax undefined)")

    def _check_shapes(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None,
        cache: KVCache | None,
        attn_mask: torch.Tensor | None,
    ) -> tuple[torch.Tensor, int]:
        """Shape, dtype and cache-room checks (no tensor value is read); returns the positions
        (``past + arange(T)`` when None) and ``past``, the cached length."""
        c = self.config
        if not isinstance(tokens, torch.Tensor) or tokens.dim() != 2 or tokens.shape[1] < 1:
            shape = tuple(tokens.shape) if isinstance(tokens, torch.Tensor) else type(tokens)
            raise ValueError(f"tokens must be a (B, T) tensor with T >= 1, got {shape}")
        if tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
            raise ValueError(f"tokens must have an integer dtype, got {tokens.dtype}")
        n_batch, n_new = tokens.shape
        past = 0
        if cache is not None:
            if cache.config.n_layers != c.n_layers or cache.k.shape[2:] != (
                c.n_kv_heads,
                cache.max_len,
                c.head_dim,
            ):
                raise ValueError(f"the KV cache {cache!r} does not fit this model's config")
            if cache.batch != n_batch:
                raise ValueError(f"tokens batch {n_batch} != KV cache batch {cache.batch}")
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
            positions = self._arange(past + n_new, tokens.device)[past:]
            positions = positions.expand(n_batch, n_new)  # (B, T)
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
        return positions, past

    def _arange(self, n: int, device: torch.device) -> torch.Tensor:
        """``arange(n)`` as a view of a cached ``arange(max_seq_len)`` (positions, masks)."""
        index = self._index_cache.get(device)
        if index is None:
            index = torch.arange(self.config.max_seq_len, device=device)
            self._index_cache[device] = index
        return index[:n]

    def _attention_bias(self, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The bool mask as the additive bias attention applies (0 = may attend, -inf = not),
        tiled once for the G query heads folded into each KV head: ``(T, S) -> (G*T, S)``.
        Built once per forward rather than in every layer; the same numbers the attention
        would derive from the bool mask itself."""
        bias = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        bias.masked_fill_(~mask, float("-inf"))
        group = self.config.n_heads // self.config.n_kv_heads
        return bias.repeat(group, 1) if group > 1 else bias

    def _causal_mask(self, n_new: int, past: int, device: torch.device) -> torch.Tensor | None:
        """New token ``i`` sees keys ``0..past + i``: ``(T, S)`` bool, or None when T == 1."""
        if n_new == 1:
            return None
        keys = self._arange(past + n_new, device)  # (S,)
        return keys.unsqueeze(0) <= keys[past:].unsqueeze(1)  # (T, S)


def _fingerprint(params: list[torch.Tensor]) -> tuple[tuple[int, int], ...]:
    """What changes when a parameter is modified in place or given new storage."""
    return tuple((p._version, p.data_ptr()) for p in params)


class _RMSNormParams(nn.Module):
    """Holds an RMSNorm weight under the name ``weight`` (computed by `rms_norm`)."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))


def count_parameters(model: Transformer) -> int:
    """Number of distinct parameters (a tied head is counted once)."""
    return sum(p.numel() for p in model.parameters())


def random_init_(
    model: Transformer, seed: int, std: float = 1.5, emb_std: float = 0.1
) -> Transformer:
    """Fill every parameter with seeded Gaussian noise, for tests.

    Matrices get ``std / sqrt(fan_in)``, embeddings ``emb_std``, norm weights ``1 + 0.1 N(0, 1)``,
    biases ``0.5 N(0, 1)``. These scales keep tiny models' next-token laws neither one-hot nor
    uniform (entropy about 2.7-3.9 nats for V of about 60), so tests are sensitive to mistakes.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float64)
            if name.endswith("norm.weight"):
                value = 1.0 + 0.1 * noise
            elif "emb" in name:
                value = emb_std * noise
            elif p.dim() == 2:
                value = std / math.sqrt(p.shape[-1]) * noise
            else:
                value = 0.5 * noise
            p.copy_(value.to(p.dtype))
    return model
