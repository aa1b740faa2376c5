"""The from-scratch decoder-only Transformer (Llama and GPT-2 families) that reads an ExecutionPlan.

`forward` runs new tokens against a `KVCache` under any boolean attention mask, so a whole token
tree is verified in one forward (CAS-Spec §4), and under an `ExecutionPlan` (§2), so the target
and all its virtual drafts are one object with one set of weights (docs/design.md, "Strategies are
data").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from casspec_ref.base.elementwise import rowwise
from casspec_ref.base.exact_attention import TokenKeys, attention_alone, token_keys
from casspec_ref.base.kernels import exact_linear, row_multiple
from casspec_ref.base.model_checks import check_forward_inputs, check_forward_shapes
from casspec_ref.config import ModelConfig
from casspec_ref.kv_cache import KVCache
from casspec_ref.plan import IDENTITY, ExecutionPlan


def linear(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None,
    layer: int,
    name: str,
    plan: ExecutionPlan,
    shape_invariant: bool = False,
) -> Tensor:
    """Every linear layer of the model: the plan's kernel when it has one, else `exact_linear`
    (``layer`` is the block index, -1 for the LM head; ``name`` one of `plan.LINEAR_NAMES`;
    ``shape_invariant``: a row's bits must not depend on how many rows the forward runs)."""
    if plan.linear is not None:
        return plan.linear(x, weight, bias, layer, name)
    return exact_linear(x, weight, bias, shape_invariant)


def rms_norm(x: Tensor, weight: Tensor, eps: float) -> Tensor:
    """RMSNorm, statistics in at least float32 as Hugging Face's LlamaRMSNorm does."""
    xs = x.to(torch.promote_types(x.dtype, torch.float32))
    xs = xs * rowwise(torch.rsqrt, (xs * xs).mean(-1, keepdim=True) + eps)  # no scalar tail
    return weight * xs.to(x.dtype)


def attention(q: Tensor, k: Tensor, v: Tensor, keys: TokenKeys | Tensor | None) -> Tensor:
    """Scaled dot-product attention; ``q (B, H, N, Dh)``, ``k, v (B, H, S, Dh)``. The target's
    rows (``keys``: which keys each token sees, `token_keys`) run `attention_alone`, one call
    per token over its own keys: the same bits at any row count. A draft's rows run one fused
    call under ``keys``, the mask as a bias ``(N, S)`` (0 = may attend, -inf = not; None = every
    key), whose summation order depends on N."""
    if isinstance(keys, TokenKeys):
        return attention_alone(q, k, v, keys)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keys)


def rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Rotary embedding, HF's "rotate half" form: ``x cos + (-x2, x1) sin``, ``x = (x1, x2)``.
    The sign lives in the table (`_tables`): ``(-x2, x1) sin = (x2, x1) (-sin1, sin2)``, a roll."""
    return x * cos + x.roll(x.shape[-1] // 2, dims=-1) * sin


class Weights(SimpleNamespace):
    """A model's parameters in one dtype, by attribute, in the shape of its module tree:
    ``w.tok_emb.weight``, ``w.layers[i].attn.q.weight``, ``w.layers[i].mlp_norm.weight``,
    ``w.norm.weight``, ``w.head.weight`` (`Transformer.weights_in`). An absent bias is None."""


@dataclass(frozen=True)
class ForwardPass:
    """What every block of one forward reads besides its own weights: the execution plan,
    whether the rows are the target's (``exact``: the shape-invariant forms), the cache, which
    keys each new token sees (`token_keys`, or the mask as a bias), the number T of new tokens,
    and the rotary tables of their positions."""

    plan: ExecutionPlan
    exact: bool
    cache: KVCache | None
    keys: TokenKeys | Tensor | None
    n_new: int
    cos: Tensor
    sin: Tensor

    def linear(self, x: Tensor, weights: Weights, layer: int, name: str) -> Tensor:
        """`linear` with a layer's ``weights`` (``.weight``, and ``.bias`` where it has one: a
        tied head is the embedding's) under this pass."""
        bias = getattr(weights, "bias", None)
        return linear(x, weights.weight, bias, layer, name, self.plan, self.exact)

    def elementwise(self, fn: Callable[[Tensor], Tensor], x: Tensor) -> Tensor:
        """``fn(x)``; on the target's rows with no scalar tail (`rowwise`)."""
        return rowwise(fn, x) if self.exact else fn(x)


class Transformer(nn.Module):
    """A decoder-only Transformer of the Llama or GPT-2 family. Its modules only hold the
    parameters (the loaders' names and layouts); `forward` reads them, in the compute dtype,
    through `weights_in`."""

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
        # Derived tensors, built on first use, kept until the parameters move or change: per dtype
        # `weights_in`'s (cast sources, fingerprint, `Weights`), per (dtype, device) `_tables`.
        self._derived: dict[object, tuple] = {}
        #: The loader's draft hierarchy for this checkpoint; None = `speculative.default_drafts`.
        self.preset_drafts: tuple[ExecutionPlan, ...] | None = None
        #: The target's forwards (the identity plan) in the shape-invariant forms of `attention`
        #: (token by token), `exact_linear` (tiled) and `rowwise`: a row's logits do not depend
        #: on how many rows its forward runs.
        #: False = the plain forms (fused attention, the fastest product per row count), whose
        #: rounding does. Drafts always run the plain forms: a draft only proposes tokens.
        self.shape_invariant = True
        #: The most rows one forward of a prompt runs (`casspec_ref.generate.run_prompt`); None =
        #: the whole prompt at once. A thread policy that switches counts sets it to the row
        #: counts it checked (`casspec_ref.accel.threads.watch`).
        self.prompt_rows: int | None = None

    def weights_in(self, dtype: torch.dtype) -> Weights:
        """All parameters in ``dtype``, by attribute (`Weights`): the parameters themselves in
        their own dtype, else copies cast once and kept until a parameter changes."""
        cached = self._derived.get(dtype)
        if cached is not None:
            sources, fingerprint, weights = cached
            if not sources or _fingerprint(sources) == fingerprint:
                return weights
        copies: dict[int, Tensor] = {}  # id(parameter) -> its copy in dtype (a tied one: once)

        def cast(p: Tensor | None) -> Tensor | None:
            if p is None or p.dtype == dtype:
                return p  # in its own dtype a parameter is read live
            if id(p) not in copies:
                copies[id(p)] = p.detach().to(dtype)
            return copies[id(p)]

        weights = _weights_of(self, cast)
        sources = [p for p in self.parameters() if id(p) in copies]  # what the copies copied
        self._derived[dtype] = (sources, _fingerprint(sources), weights)
        return weights

    def clear_weight_cache(self) -> None:
        """Drop the collected/cast weights and the position tables (rebuilt on demand)."""
        self._derived.clear()

    def _apply(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.clear_weight_cache()  # .to(), .float(), .cuda() move or recast the parameters
        return super()._apply(*args, **kwargs)

    def load_state_dict(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self.clear_weight_cache()
        return super().load_state_dict(*args, **kwargs)

    def _tables(self, dtype: torch.dtype, device: torch.device) -> tuple[Tensor, Tensor, Tensor]:
        """Default positions ``arange(max_seq_len)`` and the rotary tables cos, sin ``(max_seq_len,
        D_head)``, sin's first half negated (`rope`); float64, cast once (GPT-2 ignores them)."""
        key = (dtype, device)
        if key not in self._derived:
            c = self.config
            half = c.head_dim // 2
            inv_freq = c.rope_theta ** (-torch.arange(half, dtype=torch.float64) * 2 / c.head_dim)
            angles = torch.outer(torch.arange(c.max_seq_len, dtype=torch.float64), inv_freq)
            cos = torch.cat((angles.cos(), angles.cos()), dim=-1).to(device, dtype)  # (S, D_head)
            sin = torch.cat((-angles.sin(), angles.sin()), dim=-1).to(device, dtype)  # (S, D_head)
            self._derived[key] = (torch.arange(c.max_seq_len, device=device), cos, sin)
        return self._derived[key]

    @torch.no_grad()
    def forward(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
        attn_mask: Tensor | None = None,
        plan: ExecutionPlan | None = None,
        *,
        last_only: bool = False,
    ) -> Tensor:
        """Run ``T`` new tokens; return their logits ``(B, T, V)`` (or ``(B, 1, V)``) in the
        compute dtype. Values are trusted (see `validate_inputs`).

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
        """
        c = self.config
        past = check_forward_shapes(c, tokens, positions, cache, attn_mask)
        n_batch, n_new = tokens.shape

        # ========================= EXECUTION PLAN =========================================
        # The one place the forward reads the plan (besides `linear`, which asks the plan for
        # its kernel): which blocks run, which sub-layers they skip, and the compute dtype.
        plan = IDENTITY if plan is None else plan
        dtype = self.tok_emb.weight.dtype if plan.compute_dtype is None else plan.compute_dtype
        n_run = c.n_layers if plan.exit_after is None else plan.exit_after
        skip_attention, skip_mlp = plan.skip_attention, plan.skip_mlp
        exact = self.shape_invariant and plan.is_identity  # the target's rows: shape-invariant
        # ==================================================================================

        w = self.weights_in(dtype)
        index, cos, sin = self._tables(dtype, tokens.device)
        if positions is None:
            positions = index[past : past + n_new].expand(n_batch, n_new)  # (B, T)
        x = w.tok_emb.weight[tokens]  # (B, T, D)
        if c.family == "llama":  # the rotary tables of the positions, (B, 1, T, D_head)
            cos, sin = cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)
        else:  # GPT-2 adds learned positions
            x = x + w.pos_emb.weight[positions]
        # The target's products run in whole tiles (`tiled_linear`): its rows are padded here,
        # once, to a multiple of the tiles' rows (padding rows: never attended to, never
        # cached, dropped below).
        rows = n_new + (-n_new % row_multiple(dtype) if exact else 0)
        x = F.pad(x, (0, 0, 0, rows - n_new)) if rows > n_new else x  # (B, T', D)
        if exact:  # each token's attention alone, over the keys it sees
            keys: Tensor | TokenKeys | None = token_keys(attn_mask, n_new, past)
        else:  # every row's in one call, under the mask as a bias
            keys = self._attention_bias(attn_mask, n_new, past, dtype, tokens.device)

        fp = ForwardPass(plan, exact, cache, keys, n_new, cos, sin)
        for i, block in enumerate(w.layers[:n_run]):
            if i not in skip_attention:
                x = x + self._attention(self._norm(x, block.attn_norm), block.attn, i, fp)
            if i not in skip_mlp:
                x = x + self._mlp(self._norm(x, block.mlp_norm), block.mlp, i, fp)

        if cache is not None:
            cache.advance(n_new)
        x = x[:, n_new - 1 : n_new] if last_only else x[:, :n_new]  # (B, 1 or T, D)
        x = self._norm(x, w.norm)
        return fp.linear(x, w.tok_emb if c.tie_embeddings else w.head, -1, "head")  # (B, T, V)

    def _norm(self, x: Tensor, norm: Weights) -> Tensor:
        """RMSNorm (Llama) or LayerNorm (GPT-2) with ``norm``'s weight (and bias)."""
        c = self.config
        if c.family == "llama":
            return rms_norm(x, norm.weight, c.norm_eps)
        return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, c.norm_eps)

    def _mlp(self, h: Tensor, mlp: Weights, layer: int, fp: ForwardPass) -> Tensor:
        """SwiGLU (Llama) or GELU (GPT-2) MLP of block ``layer``."""
        if self.config.family == "llama":
            gate = fp.linear(h, mlp.gate, layer, "mlp_gate")
            up = fp.linear(h, mlp.up, layer, "mlp_up")
            return fp.linear(fp.elementwise(F.silu, gate) * up, mlp.down, layer, "mlp_down")
        h = fp.linear(h, mlp.fc, layer, "mlp_fc")
        return fp.linear(fp.elementwise(_gelu, h), mlp.proj, layer, "mlp_proj")

    def _attention(self, h: Tensor, attn: Weights, layer: int, fp: ForwardPass) -> Tensor:
        """Grouped-query attention of block ``layer``: the G query heads that share a KV head
        are folded into the query axis, so K/V are read from the cache in place (``h`` may
        carry tile padding after the T new tokens' rows)."""
        c = self.config
        n_batch, rows, _ = h.shape
        n_new = fp.n_new
        q = fp.linear(h, attn.q, layer, "attn_q")[:, :n_new]  # (B, T, D)
        k = fp.linear(h, attn.k, layer, "attn_k")[:, :n_new]  # (B, T, D_kv)
        v = fp.linear(h, attn.v, layer, "attn_v")[:, :n_new]  # (B, T, D_kv)
        q = q.view(n_batch, n_new, c.n_heads, c.head_dim).transpose(1, 2)  # (B, H, T, Dh)
        k = k.view(n_batch, n_new, c.n_kv_heads, c.head_dim).transpose(1, 2)  # (B, Hkv, T, Dh)
        v = v.view(n_batch, n_new, c.n_kv_heads, c.head_dim).transpose(1, 2)  # (B, Hkv, T, Dh)
        if c.family == "llama":
            q, k = rope(q, fp.cos, fp.sin), rope(k, fp.cos, fp.sin)
        if fp.cache is not None:
            k, v = fp.cache.write(layer, k, v)  # (B, Hkv, S, Dh) views of the cache
            if k.dtype != q.dtype:  # a draft in another precision reads the target's cache
                k, v = k.to(q.dtype), v.to(q.dtype)
        elif fp.exact:  # rows of Dh contiguous values, as a cache holds them
            k, v = k.contiguous(), v.contiguous()
        q = q.reshape(n_batch, c.n_kv_heads, -1, c.head_dim)  # (B, Hkv, G*T, Dh)
        out = attention(q, k, v, fp.keys)  # (B, Hkv, G*T, Dh)
        out = out.reshape(n_batch, c.n_heads, n_new, c.head_dim)  # (B, H, T, Dh)
        out = out.transpose(1, 2).reshape(n_batch, n_new, c.d_model)  # (B, T, D)
        out = F.pad(out, (0, 0, 0, rows - n_new)) if rows > n_new else out  # (B, T', D)
        return fp.linear(out, attn.o, layer, "attn_o")

    def validate_inputs(
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
        attn_mask: Tensor | None = None,
        plan: ExecutionPlan | None = None,
    ) -> None:
        """Check a forward's arguments fully, values and plan too (a host sync): once, at entry."""
        check_forward_inputs(self.config, tokens, positions, cache, attn_mask, plan)

    def _attention_bias(
        self, mask: Tensor | None, n_new: int, past: int, dtype: torch.dtype, device: torch.device
    ) -> Tensor | None:
        """The mask as attention's additive bias (0 = may attend, -inf = not), tiled once per
        forward for the G query heads folded into each KV head: ``(T, S) -> (G*T, S)``. No mask
        is causal (new token ``i`` sees keys ``0..past + i``), and needs no bias when T == 1."""
        if mask is not None:
            bias = torch.zeros_like(mask, dtype=dtype).masked_fill_(~mask, float("-inf"))
        elif n_new > 1:
            bias = torch.full((n_new, past + n_new), float("-inf"), dtype=dtype, device=device)
            bias.triu_(past + 1)  # -inf only on the keys after each token's own position
        else:
            return None
        group = self.config.n_heads // self.config.n_kv_heads
        return bias.repeat(group, 1) if group > 1 else bias


def _gelu(x: Tensor) -> Tensor:
    """GPT-2's GELU, the tanh approximation."""
    return F.gelu(x, approximate="tanh")


def _weights_of(module: nn.Module, cast: Callable[[Tensor | None], Tensor | None]) -> Weights:
    """``module``'s own parameters (``cast``; an absent bias: None) and its children's, as
    nested attributes; a `nn.ModuleList`'s children as a list."""
    weights = Weights(**{name: cast(p) for name, p in module._parameters.items()})
    for name, child in module.named_children():
        if isinstance(child, nn.ModuleList):
            setattr(weights, name, [_weights_of(m, cast) for m in child])
        else:
            setattr(weights, name, _weights_of(child, cast))
    return weights


def _fingerprint(params: list[nn.Parameter]) -> tuple[tuple[int, int], ...]:
    """What changes when a parameter is modified in place or given new storage."""
    return tuple((p._version, p.data_ptr()) for p in params)


def _linears(bias: bool, **shapes: tuple[int, int]) -> nn.ModuleDict:
    """`nn.Linear` layers by name, ``name=(in_features, out_features)``."""
    return nn.ModuleDict({n: nn.Linear(i, o, bias=bias) for n, (i, o) in shapes.items()})


def count_parameters(model: Transformer) -> int:
    """Number of distinct parameters (a tied head is counted once)."""
    return sum(p.numel() for p in model.parameters())
