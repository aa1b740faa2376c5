"""The fixed-shape forward: every target and draft forward over W rows and the whole static cache,
its inputs copied into static buffers, captured once as a CUDA graph and replayed per step.

`Transformer.forward` computes exactly what a forward over T new tokens should, and on a GPU it
pays for that with a host that issues about a thousand small kernels per forward (the GPU idles
most of the time) and kernels whose rounding depends on T. `StaticForward` computes the same rows
over one fixed shape:

- **W rows.** A forward over T <= W new tokens is padded to W rows by repeating its last row
  (the same token, position and mask row, so the copies compute the same bits and write the same
  K/V to the same cache slot). Every product then runs at one shape, so a row's result cannot
  depend on how many rows its step had: shape invariance by construction, in any dtype, on any
  device, for every forward that goes through here (the naive loop too: `StaticModel`).
- **The whole cache.** Attention reads all ``max_len`` rows of the static cache under a mask
  (the keys past the verified prefix and the new rows are masked out), and the new K/V are
  written at slots given as a tensor (`index_copy_`), so nothing in the forward depends on the
  cache's length as a Python number.
- **Static buffers, graphs.** Tokens, positions, slots and the mask are copied into buffers made
  once per (cache, plan); on CUDA the forward over those buffers is captured with
  `torch.cuda.graphs` after a warm-up and replayed (one launch per forward instead of ~1,000).
  Where capture fails (a plan's kernel that syncs with the host, an old driver), the same
  buffers run eagerly: the results are the same bits either way, only the launches differ.

On a CPU no graph is captured; the buffers and the fixed-shape forward run as they are, which is
how the path is tested without a GPU (tests/test_static_forward.py: the same bits as the eager
forward in bfloat16, and as itself across widths in float32). `torch.compile` is not used.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
from torch import Tensor, nn

from casspec_ref.base.exact_attention import each_token
from casspec_ref.kv_cache import KVCache
from casspec_ref.model import ForwardPass, Transformer, Weights, attention, rope
from casspec_ref.plan import IDENTITY, ExecutionPlan


class _Buffers:
    """One (cache, plan)'s static inputs and output, and its graph once captured."""

    def __init__(self, model: Transformer, cache: KVCache, width: int) -> None:
        dev = cache.k.device
        self.tokens = torch.zeros(1, width, dtype=torch.long, device=dev)  # (1, W)
        self.positions = torch.zeros(1, width, dtype=torch.long, device=dev)  # (1, W)
        self.slots = torch.zeros(width, dtype=torch.long, device=dev)  # (W,)
        self.mask = torch.zeros(width, cache.max_len, dtype=torch.bool, device=dev)  # (W, S)
        self.cache_k = weakref.ref(cache.k)  # which cache these buffers (and graph) write
        self.logits: Tensor | None = None
        self.graph: Any = None
        self.eager_runs = 0


class StaticForward:
    """Forwards of one model over ``width`` rows and a whole static cache (module docstring)."""

    def __init__(self, model: Transformer, width: int, capture: bool = True) -> None:
        if not 1 <= width <= model.config.max_seq_len:
            raise ValueError(f"width must be in 1..{model.config.max_seq_len}, got {width}")
        self.model, self.width, self.capture = model, width, capture
        self._buffers: dict[tuple[int, ExecutionPlan], _Buffers] = {}
        self.captured = 0  # graphs captured (CUDA only)
        self.fallbacks = 0  # captures that failed; those buffers run eagerly

    def __call__(
        self,
        tokens: Tensor,
        cache: KVCache,
        positions: Tensor | None = None,
        attn_mask: Tensor | None = None,
        plan: ExecutionPlan | None = None,
    ) -> Tensor:
        """`Transformer.forward`'s result ``(1, T, V)`` for ``T <= width`` new tokens (batch 1,
        a cache required), computed at the fixed shape; ``cache.length`` advances by ``T``."""
        n_new, past = tokens.shape[1], cache.length
        if tokens.shape[0] != 1 or not 1 <= n_new <= self.width:
            raise ValueError(f"the static forward takes (1, T) tokens, T in 1..{self.width}")
        plan = IDENTITY if plan is None else plan
        buffers = self._buffers.get((id(cache.k), plan))
        if buffers is None or buffers.cache_k() is not cache.k:  # new, or an id reused
            self._forget_dead()
            buffers = _Buffers(self.model, cache, self.width)
            self._buffers[(id(cache.k), plan)] = buffers
        self._fill(buffers, tokens, positions, attn_mask, past)
        logits = self._run(buffers, cache, plan)
        cache.advance(n_new)
        return logits[:, :n_new]  # (1, T, V)

    def _forget_dead(self) -> None:
        """Drop the buffers (and graphs) of caches that no longer exist."""
        for key in [k for k, b in self._buffers.items() if b.cache_k() is None]:
            del self._buffers[key]

    def _fill(
        self, b: _Buffers, tokens: Tensor, positions: Tensor | None, mask: Tensor | None, past: int
    ) -> None:
        """Copy one step's inputs into the buffers, the last row repeated up to the width."""
        n_new = tokens.shape[1]
        last = [
            min(i, n_new - 1) for i in range(self.width)
        ]  # row i of the width reads row last[i]
        if positions is None:
            positions = torch.arange(past, past + n_new, device=tokens.device).unsqueeze(0)
        if mask is None:  # causal
            mask = torch.ones(n_new, past + n_new, dtype=torch.bool, device=tokens.device)
            mask[:, past:] = torch.ones(n_new, n_new, dtype=torch.bool, device=tokens.device).tril()
        b.tokens.copy_(tokens[:, last])
        b.positions.copy_(positions[:, last])
        b.slots.copy_(torch.tensor([past + i for i in last], device=b.slots.device))
        b.mask.zero_()
        b.mask[:, : past + n_new] = mask[last]

    def _run(self, b: _Buffers, cache: KVCache, plan: ExecutionPlan) -> Tensor:
        on_cuda = cache.k.device.type == "cuda"
        if b.graph is None and on_cuda and self.capture and b.eager_runs >= 2:
            b.graph = self._capture(b, cache, plan)  # after two eager warm-up runs
        if b.graph is not None and b.graph is not False:
            b.graph.replay()
            assert b.logits is not None
            return b.logits.clone()  # the next replay overwrites the graph's output
        b.eager_runs += 1
        b.logits = fixed_shape_forward(self.model, b, cache, plan)
        return b.logits

    def _capture(self, b: _Buffers, cache: KVCache, plan: ExecutionPlan) -> Any:
        """The forward over ``b`` as a CUDA graph; False where capture fails (eager from then)."""
        try:
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                b.logits = fixed_shape_forward(self.model, b, cache, plan)
        except RuntimeError:
            self.fallbacks += 1
            return False
        self.captured += 1
        return graph


@torch.no_grad()
def fixed_shape_forward(
    model: Transformer, b: _Buffers, cache: KVCache, plan: ExecutionPlan
) -> Tensor:
    """`Transformer.forward` over the buffers' W rows against all ``max_len`` cache rows; the
    same layer code (`ForwardPass.linear`, `rope`, `attention`), the plan read as the model
    reads it."""
    c = model.config
    dtype = model.tok_emb.weight.dtype if plan.compute_dtype is None else plan.compute_dtype
    n_run = c.n_layers if plan.exit_after is None else plan.exit_after
    exact = model.shape_invariant and plan.is_identity  # as `Transformer.forward` decides
    w = model.weights_in(dtype)
    _, cos, sin = model._tables(dtype, b.tokens.device)
    x = w.tok_emb.weight[b.tokens]  # (1, W, D)
    if c.family == "llama":
        cos, sin = cos[b.positions].unsqueeze(1), sin[b.positions].unsqueeze(1)  # (1, 1, W, Dh)
    else:
        x = x + w.pos_emb.weight[b.positions]
    bias = torch.zeros(b.mask.shape, dtype=dtype, device=x.device).masked_fill_(~b.mask, -torch.inf)
    bias = bias.repeat(c.n_heads // c.n_kv_heads, 1)  # (G*W, S)
    fp = ForwardPass(plan, exact, cache, bias, b.tokens.shape[1], cos, sin)
    for i, block in enumerate(w.layers[:n_run]):
        if i not in plan.skip_attention:
            x = x + _attention(model, model._norm(x, block.attn_norm), block.attn, i, fp, b.slots)
        if i not in plan.skip_mlp:
            x = x + model._mlp(model._norm(x, block.mlp_norm), block.mlp, i, fp)
    x = model._norm(x, w.norm)
    return fp.linear(x, w.tok_emb if c.tie_embeddings else w.head, -1, "head")  # (1, W, V)


def _attention(
    model: Transformer, h: Tensor, attn: Weights, layer: int, fp: ForwardPass, slots: Tensor
) -> Tensor:
    """`Transformer._attention` with the new K/V written at ``slots`` and all cache rows read
    under ``fp.keys``, the mask as a bias."""
    c = model.config
    width = h.shape[1]
    q = fp.linear(h, attn.q, layer, "attn_q")
    k = fp.linear(h, attn.k, layer, "attn_k")
    v = fp.linear(h, attn.v, layer, "attn_v")
    q = q.view(1, width, c.n_heads, c.head_dim).transpose(1, 2)  # (1, H, W, Dh)
    k = k.view(1, width, c.n_kv_heads, c.head_dim).transpose(1, 2)  # (1, Hkv, W, Dh)
    v = v.view(1, width, c.n_kv_heads, c.head_dim).transpose(1, 2)  # (1, Hkv, W, Dh)
    if c.family == "llama":
        q, k = rope(q, fp.cos, fp.sin), rope(k, fp.cos, fp.sin)
    assert fp.cache is not None and isinstance(fp.keys, Tensor)  # its cache, the mask's bias
    keys, values = fp.cache.k[layer], fp.cache.v[layer]  # (1, Hkv, S, Dh), the whole buffer
    keys.index_copy_(2, slots, k.to(keys.dtype))
    values.index_copy_(2, slots, v.to(values.dtype))
    if keys.dtype != q.dtype:  # a draft in another precision reads the target's cache
        keys, values = keys.to(q.dtype), values.to(q.dtype)
    q = q.reshape(1, c.n_kv_heads, -1, c.head_dim)  # (1, Hkv, G*W, Dh)
    out = attention_by_row(q, keys, values, fp.keys, width)  # (1, Hkv, G*W, Dh)
    out = out.reshape(1, c.n_heads, width, c.head_dim).transpose(1, 2)  # (1, W, H, Dh)
    out = out.reshape(1, width, c.d_model)  # (1, W, D)
    return fp.linear(out, attn.o, layer, "attn_o")


def attention_by_row(q: Tensor, k: Tensor, v: Tensor, bias: Tensor, width: int) -> Tensor:
    """The static path's attention: one fused call per row (a token's G query heads) over all S
    cache rows under its rows of ``bias (G*W, S)``; ``q (1, Hkv, G*W, Dh)`` with query head g of
    row i at ``g*W + i``. Every call has one shape in every forward through this path, and a
    token's heads sit in their call as in a one-token forward's: a fused kernel may round a row
    by its place among a call's rows (torch's CPU kernel does: two equal rows of one call, two
    results)."""
    return each_token(q, width, lambda i, query: attention(query, k, v, bias[i::width]))


class StaticModel(Transformer):
    """The same model (the very parameters and caches of derived tensors, shared) whose
    forwards with a cache and batch 1 run through `StaticForward`: a forward over more than
    ``width`` new tokens (a prompt) as consecutive ``width``-row chunks, so every row of every
    forward, the naive loop's and a verify forward's alike, is computed at one shape. Pass it
    wherever a `Transformer` goes (`generate_ar`, `generate_speculative`)."""

    def __init__(self, model: Transformer, width: int, capture: bool = True) -> None:
        nn.Module.__init__(self)
        self.__dict__.update(model.__dict__)  # shares the parameters, buffers and caches
        self.static = StaticForward(self, width, capture)

    def forward(  # type: ignore[override]
        self,
        tokens: Tensor,
        positions: Tensor | None = None,
        cache: KVCache | None = None,
        attn_mask: Tensor | None = None,
        plan: ExecutionPlan | None = None,
        *,
        last_only: bool = False,
    ) -> Tensor:
        if cache is None or tokens.shape[0] != 1:
            return super().forward(tokens, positions, cache, attn_mask, plan, last_only=last_only)
        width, past, n_new = self.static.width, cache.length, tokens.shape[1]
        chunks = []
        for start in range(0, n_new, width):
            end = min(start + width, n_new)
            pos = None if positions is None else positions[:, start:end]
            mask = None if attn_mask is None else attn_mask[start:end, : past + end]
            chunks.append(self.static(tokens[:, start:end], cache, pos, mask, plan))
        logits = torch.cat(chunks, dim=1) if len(chunks) > 1 else chunks[0]  # (1, T, V)
        return logits[:, -1:] if last_only else logits
