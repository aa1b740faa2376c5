"""The from-scratch decoder-only Transformer (Llama and GPT-2 families) that reads an ExecutionPlan.

`forward` runs new tokens against a `KVCache` under any boolean attention mask, so a whole token
tree is verified in one forward (CAS-Spec §4), and under an `ExecutionPlan` (§2), so the target
and all its virtual drafts are this one object with one set of weights. Families and choices:
docs/design.md, `model.py`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from casspec_ref.base.kernels import exact_linear
from casspec_ref.base.model_checks import check_forward_inputs, check_forward_shapes
from casspec_ref.config import ModelConfig
from casspec_ref.kv_cache import KVCache
from casspec_ref.plan import ExecutionPlan


def linear(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, layer: int, name: str,
    plan: ExecutionPlan | None,
) -> torch.Tensor:  # fmt: skip
    """Every linear layer of the model: the plan's kernel when it has one, else `exact_linear`
    (``layer`` is the block index, -1 for the LM head; ``name`` one of `plan.LINEAR_NAMES`)."""
    if plan is not None and plan.linear is not None:
        return plan.linear(x, weight, bias, layer, name)
    return exact_linear(x, weight, bias)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm, statistics in at least float32 as Hugging Face's LlamaRMSNorm does."""
    xs = x.to(torch.promote_types(x.dtype, torch.float32))
    xs = xs * torch.rsqrt((xs * xs).mean(-1, keepdim=True) + eps)
    return weight * xs.to(x.dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x1, x2) -> (-x2, x1)`` on the two halves of the last axis (HF "rotate half")."""
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Transformer(nn.Module):
    """A decoder-only Transformer of the Llama or GPT-2 family. Its modules only hold the
    parameters (the loaders' names and layouts); `forward` reads them through `weights_in`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        d, kv, ff = c.d_model, c.n_kv_heads * c.head_dim, c.d_ff
        llama = c.family == "llama"
        norm = nn.RMSNorm if llama else nn.LayerNorm  # parameters only: see `rms_norm`, `_norm`
        self.tok_emb = nn.Embedding(c.vocab_size, d)
        if not llama:
            self.pos_emb = nn.Embedding(c.max_seq_len, d)
        self.layers = nn.ModuleList()
        for _ in range(c.n_layers):
            block = nn.Module()
            block.attn_norm = norm(d)
            block.attn = _linears(c.attention_bias, q=(d, d), k=(d, kv), v=(d, kv), o=(d, d))
            block.mlp_norm = norm(d)
            if llama:
                block.mlp = _linears(False, gate=(d, ff), up=(d, ff), down=(ff, d))
            else:
                block.mlp = _linears(True, fc=(d, ff), proj=(ff, d))
            self.layers.append(block)
        self.norm = norm(d)
        if not c.tie_embeddings:
            self.head = nn.Linear(d, c.vocab_size, bias=False)
        # Derived tensors, built on first use: dtype -> (cast sources, their fingerprint,
        # name -> weight); (dtype, device) -> (cos, sin); device -> arange(max_seq_len).
        self._weights_cache: dict[
            torch.dtype, tuple[list[torch.Tensor], tuple, dict[str, torch.Tensor]]
        ] = {}
        self._rope_cache: dict[tuple[torch.dtype, torch.device], tuple[torch.Tensor, ...]] = {}
        self._index_cache: dict[torch.device, torch.Tensor] = {}
        #: The loader's draft hierarchy for this checkpoint; None = `speculative.default_drafts`.
        self.preset_drafts: tuple[ExecutionPlan, ...] | None = None

    def weights_in(self, dtype: torch.dtype) -> dict[str, torch.Tensor]:
        """All parameters by state-dict name, in ``dtype``: the parameters themselves in their
        own dtype, else copies cast once and kept until a parameter changes."""
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
            self._rope_cache[key] = (angles.cos().to(device, dtype), angles.sin().to(device, dtype))
        return self._rope_cache[key]

    @torch.no_grad()
    def forward(
        self, tokens: torch.Tensor, positions: torch.Tensor | None = None,
        cache: KVCache | None = None, attn_mask: torch.Tensor | None = None,
        plan: ExecutionPlan | None = None, *, last_only: bool = False,
    ) -> torch.Tensor:  # fmt: skip
        """Run ``T`` new tokens; return their logits. Values are trusted (see `validate_inputs`).

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
        """
        c = self.config
        past = check_forward_shapes(c, tokens, positions, cache, attn_mask)
        n_batch, n_new = tokens.shape
        if positions is None:
            positions = self._arange(past + n_new, tokens.device)[past:]
            positions = positions.expand(n_batch, n_new)  # (B, T)
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
                x = x + self._attention(h, w, p, i, plan, cache, bias, cos, sin)
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
            h = F.silu(gate) * up
            return linear(h, w[p + "mlp.down.weight"], None, layer, "mlp_down", plan)
        h = linear(h, w[p + "mlp.fc.weight"], w[p + "mlp.fc.bias"], layer, "mlp_fc", plan)
        h = F.gelu(h, approximate="tanh")
        return linear(h, w[p + "mlp.proj.weight"], w[p + "mlp.proj.bias"], layer, "mlp_proj", plan)

    def _attention(
        self, h: torch.Tensor, w: dict[str, torch.Tensor], p: str, layer: int,
        plan: ExecutionPlan | None, cache: KVCache | None, bias: torch.Tensor | None,
        cos: torch.Tensor | None, sin: torch.Tensor | None,
    ) -> torch.Tensor:  # fmt: skip
        """Grouped-query attention of block ``layer``: the G query heads that share a KV head
        are folded into the query axis, so K/V are read from the cache in place."""
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
        q = q.reshape(n_batch, c.n_kv_heads, group * n_new, c.head_dim)  # (B, Hkv, G*T, Dh)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)  # (B, Hkv, G*T, Dh)
        out = out.reshape(n_batch, c.n_heads, n_new, c.head_dim)  # (B, H, T, Dh)
        out = out.transpose(1, 2).reshape(n_batch, n_new, c.d_model)  # (B, T, D)
        return linear(out, w[p + "attn.o.weight"], w.get(p + "attn.o.bias"), layer, "attn_o", plan)

    def validate_inputs(
        self, tokens: torch.Tensor, positions: torch.Tensor | None = None,
        cache: KVCache | None = None, attn_mask: torch.Tensor | None = None,
        plan: ExecutionPlan | None = None,
    ) -> None:  # fmt: skip
        """Check a forward's arguments completely, values and plan included (reads tensors back
        to the host): call it once where inputs enter, as the generation loops do."""
        check_forward_inputs(self.config, tokens, positions, cache, attn_mask, plan)

    def _arange(self, n: int, device: torch.device) -> torch.Tensor:
        """``arange(n)`` as a view of a cached ``arange(max_seq_len)`` (positions, masks)."""
        index = self._index_cache.get(device)
        if index is None:
            index = torch.arange(self.config.max_seq_len, device=device)
            self._index_cache[device] = index
        return index[:n]

    def _attention_bias(self, mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """The bool mask as attention's additive bias (0 = may attend, -inf = not), tiled once
        per forward for the G query heads folded into each KV head: ``(T, S) -> (G*T, S)``."""
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


def _linears(bias: bool, **shapes: tuple[int, int]) -> nn.ModuleDict:
    """`nn.Linear` layers by name, ``name=(in_features, out_features)``."""
    return nn.ModuleDict({n: nn.Linear(i, o, bias=bias) for n, (i, o) in shapes.items()})


def count_parameters(model: Transformer) -> int:
    """Number of distinct parameters (a tied head is counted once)."""
    return sum(p.numel() for p in model.parameters())
