"""Attention whose rows are the same bits at any row count: what the target's forward runs, so
that a verify forward computes each token exactly as the naive loop's one-row forward does
(docs/floating_point.md). The model makes two calls: `tree_keys`, once per forward (where each
new token finds its keys), and `exact_attention`, once per layer, which runs one of:

- `padded_attention`: causal rows (a prompt, a chain, the naive loop's one row): keys padded to
  whole blocks of `KEY_BLOCK` and summed block by block, query rows padded to `QUERY_BLOCK`;
- `gathered_attention`: a tree's rows, each token's visible keys gathered first, in sequence
  order, so that its sums add the same terms in the same order as the naive loop's;
- `attention_token_by_token`: each token alone, where the machine's check found the batched
  forms rounding by shape (`kernels.KernelTable.attention_alone`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from casspec_ref.base.kernels import active_table


def tree_keys(
    mask: Tensor | None, n_new: int, past: int, dtype: torch.dtype, device: torch.device
) -> TreeKeys | None:
    """Where each of a forward's ``n_new`` tokens finds its keys, given ``mask (T, past + T)``
    (None = causal): None where `padded_attention` serves (causal rows), else each token's
    visible keys first, in sequence order (`gathered_attention`), for its attention alone
    where the machine's check found attention rounding by shape."""
    if n_new > 1 and dtype in active_table().attention_alone:
        causal = causal_mask(n_new, past, device) if mask is None else mask
        return visible_keys_first(causal, dtype)._replace(alone=True)
    if mask is not None:
        return visible_keys_first(mask, dtype)
    return None


def exact_attention(
    q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None, tree: TreeKeys | None
) -> Tensor:
    """Attention of ``q (B, Hkv, G*T, Dh)`` (query head g of token i at row g*T + i) over
    ``k, v (B, Hkv, S, Dh)`` in the form `tree_keys` chose: ``bias (G*T, S)`` (or None) serves
    causal rows, ``tree`` a tree's. Returns ``(B, Hkv, G*T, Dh)``."""
    if tree is None:
        return padded_attention(q, k, v, bias)
    if tree.alone:
        return attention_token_by_token(q, k, v, tree)
    return gathered_attention(q, k, v, tree)


#: The shape-invariant attention pads the keys to a multiple of this many (zero K/V, masked out):
#: a product's kernel, and with it the order of its sums, changes with the reduction length, so
#: every product runs at one of a few lengths (docs/floating_point.md)...
KEY_BLOCK = 64
#: ... and the query rows to a multiple of this many: a BLAS product of one to a few rows takes
#: a matrix-vector or small-matrix kernel that sums in another order than the many-row one, and
#: the rows left over after the kernel's row blocks are summed in yet another.
QUERY_BLOCK = 4


def padded_attention(q: Tensor, k: Tensor, v: Tensor, bias: Tensor | None) -> Tensor:
    """Scaled dot-product attention whose rows do not round by their number: Hugging Face's
    eager form (two products in the compute dtype, a softmax in at least float32) over keys
    padded to a multiple of `KEY_BLOCK` and query rows padded to a multiple of `QUERY_BLOCK`,
    summing the keys block by block, so a row's output is the same bits whether it is computed
    alone (the naive loop) or among a verify forward's rows: checked on each machine
    (`casspec_ref.accel.invariance`) and tested (docs/floating_point.md).
    ``q (B, H, N, Dh)``, ``k, v (B, H, S, Dh)``, ``bias (N, S)`` or None (no mask)."""
    n_queries, n_keys = q.shape[-2], k.shape[-2]
    bias = q.new_zeros(n_queries, n_keys) if bias is None else bias  # (N, S)
    q = _padded_rows(q)  # (B, H, N', Dh): zero rows, dropped below
    k, v = _padded_keys(k), _padded_keys(v)  # (B, H, S', Dh)
    bias = F.pad(bias, (0, k.shape[-2] - n_keys), value=float("-inf"))  # (N, S')
    bias = F.pad(bias, (0, 0, 0, q.shape[-2] - n_queries))  # (N', S')
    scores = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5 + bias  # (B, H, N', S')
    weights = _softmax(scores, q.dtype)  # (B, H, N', S')
    # The sum over keys, one block of KEY_BLOCK keys at a time, in order: every product sums
    # the same length, and a longer padded forward only adds blocks of exact zeros.
    out = weights[..., :KEY_BLOCK] @ v[..., :KEY_BLOCK, :]  # (B, H, N', Dh)
    for start in range(KEY_BLOCK, k.shape[-2], KEY_BLOCK):
        block = slice(start, start + KEY_BLOCK)
        out = out + weights[..., block] @ v[..., block, :]
    return out[..., :n_queries, :]  # (B, H, N, Dh)


class TreeKeys(NamedTuple):
    """Where each token of a tree forward finds its keys (`visible_keys_first`)."""

    order: Tensor  # (T, S): each token's visible keys first, in sequence order, then the rest
    bias: Tensor  # (T, S): 0 on each token's visible keys in that order, -inf after
    shared: int  # leading keys in the same place for every token: whole KEY_BLOCK blocks
    alone: bool = False  # each token's attention runs by itself (`attention_token_by_token`)


def visible_keys_first(mask: Tensor, dtype: torch.dtype) -> TreeKeys:
    """The `TreeKeys` of a mask ``(T, S)`` (one host sync: the shared prefix's length)."""
    order = torch.sort((~mask).to(torch.uint8), dim=-1, stable=True).indices  # (T, S)
    hidden = ~torch.gather(mask, 1, order)  # (T, S): False first, then True
    bias = torch.zeros(order.shape, dtype=dtype, device=mask.device).masked_fill_(
        hidden, -torch.inf
    )
    common = int(mask.all(0).to(torch.int64).cumprod(0).sum())  # keys every token sees, from 0
    return TreeKeys(order, bias, common // KEY_BLOCK * KEY_BLOCK)


def gathered_attention(q: Tensor, k: Tensor, v: Tensor, tree: TreeKeys) -> Tensor:
    """The shape-invariant attention of a tree's rows: `padded_attention` as each token would run it
    alone over its visible keys in sequence order (the keys the naive loop's cache holds for it,
    in the same places), so every sum adds the same terms in the same order as there.

    ``q (B, H, G*T, Dh)`` (query head ``g`` of token ``i`` at row ``g*T + i``), ``k, v (B, H, S,
    Dh)``. A score is one dot product over Dh, wherever its key sits: all scores are computed at
    once, then gathered into each token's key order. The sum over keys runs block by block as in
    `attention`: a block of the shared context holds the same keys for every token (one product
    over all rows); a later block is gathered per token (one product per token's G rows).
    """
    n_batch, heads, rows, head_dim = q.shape
    tokens = tree.order.shape[0]
    group, pad_k = rows // tokens, -k.shape[-2] % KEY_BLOCK
    k, v = _padded_keys(k), _padded_keys(v)  # (B, H, S', Dh)
    order = F.pad(tree.order, (0, pad_k)).repeat(group, 1)  # (G*T, S'); a padding key: 0
    bias = F.pad(tree.bias, (0, pad_k), value=-torch.inf).repeat(group, 1)  # (G*T, S')
    scores = _padded_rows(q) @ k.transpose(-1, -2)  # (B, H, G*T padded, S')
    scores = scores[..., :rows, :] * head_dim**-0.5  # (B, H, G*T, S'), in key order
    scores = scores.gather(-1, order.expand(n_batch, heads, -1, -1)) + bias  # each token's order
    weights = _softmax(scores, q.dtype)  # (B, H, G*T, S')
    out = None
    for start in range(0, k.shape[-2], KEY_BLOCK):
        block = weights[..., start : start + KEY_BLOCK]  # (B, H, G*T, KB)
        if start < tree.shared:  # the same keys for every token
            part = (_padded_rows(block) @ v[..., start : start + KEY_BLOCK, :])[..., :rows, :]
        else:  # each token's own keys, its G rows against them
            own = v[:, :, order[:tokens, start : start + KEY_BLOCK]]  # (B, H, T, KB, Dh)
            per_token = block.view(n_batch, heads, group, tokens, -1).transpose(2, 3)
            part = (_padded_rows(per_token) @ own)[..., :group, :]  # (B, H, T, G, Dh)
            part = part.transpose(2, 3).reshape(n_batch, heads, rows, head_dim)
        out = part if out is None else out + part
    assert out is not None  # S' >= KEY_BLOCK: at least one block
    return out  # (B, H, G*T, Dh)


def attention_token_by_token(q: Tensor, k: Tensor, v: Tensor, tree: TreeKeys) -> Tensor:
    """Each token's `padded_attention` alone over its visible keys in sequence order: the very
    call the naive loop's one-row forward makes, so the same bits on any machine. The fall-back
    where the machine's check finds the batched forms rounding by shape
    (`KernelTable.attention_alone`); one call per token. Shapes as in `gathered_attention`."""
    tokens = tree.order.shape[0]
    visible = (tree.bias == 0).sum(-1).tolist()  # each token's number of keys (one host sync)
    out = torch.empty_like(q)  # (B, H, G*T, Dh)
    for i, count in enumerate(visible):
        keys = tree.order[i, :count]  # (count,), in sequence order
        out[:, :, i::tokens] = padded_attention(
            q[:, :, i::tokens], k[:, :, keys], v[:, :, keys], None
        )
    return out


def _padded_rows(x: Tensor) -> Tensor:
    """``x (..., N, D)`` with zero rows appended up to a multiple of `QUERY_BLOCK` (the
    shape-invariant attention's query rows)."""
    return F.pad(x, (0, 0, 0, -x.shape[-2] % QUERY_BLOCK))


def _padded_keys(x: Tensor) -> Tensor:
    """Keys or values ``x (..., S, Dh)`` with zero rows appended up to a multiple of
    `KEY_BLOCK` (masked out by a -inf bias, so their weights are exact zeros)."""
    return F.pad(x, (0, 0, 0, -x.shape[-2] % KEY_BLOCK))


def _softmax(scores: Tensor, dtype: torch.dtype) -> Tensor:
    """The softmax over keys in at least float32, as Hugging Face's eager attention computes
    it, returned in the compute ``dtype``."""
    return torch.softmax(scores, dim=-1, dtype=torch.promote_types(dtype, torch.float32)).to(dtype)


def causal_mask(n_new: int, past: int, device: torch.device) -> Tensor:
    """The causal mask ``(T, past + T)``: new token ``i`` sees keys ``0..past + i``."""
    return torch.ones(n_new, past + n_new, dtype=torch.bool, device=device).tril(past)
