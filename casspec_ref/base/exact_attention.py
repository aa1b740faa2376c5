"""Attention whose rows are the same bits at any row count: each new token's attention is one call
of the fused kernel over that token's own keys, laid out as the naive loop's cache holds them. It
is the very call the naive loop's one-row forward makes for that token, so a verify forward
computes each token exactly as the naive loop does (docs/floating_point.md).

Why this is invariant by construction, on any CPU, library and dispatch level: a kernel chooses
its blocking, and with it the order of its sums, from the shapes of its operands and the layout
of their rows, never from their values. Token i's call has the shapes of the naive loop's call
for the same token (its G query heads, its S visible keys, the head size) and the same layout
(the query rows contiguous; the keys a prefix of one layer's cache, rows of Dh contiguous
values). Nothing of the other rows of the forward reaches the call.

The model makes two calls: `token_keys`, once per forward (which keys each new token sees), and
`attention_alone`, once per layer. A drafted tree's token sees the verified prefix and its own
ancestors, which sit among its siblings in the cache: before its call, its keys are copied, in
order, into the slots after the prefix, where the naive loop's cache holds them; after the layer
the new rows are put back in node order.

The thread count is the one thing a call's shape does not fix: torch's fused CPU kernel may split
one token's keys between its threads (in float32 it does, and rounds by the team size), and the
thread policy may change the count between forwards (`casspec_ref.accel.threads`). So on a CPU
the calls run on `ATTENTION_THREADS` threads, one: a lone thread's order of additions is the
kernel's serial one, fixed by the shapes. One token's attention is a small problem, so a team
gains little on it (results.md, "CPU, what exactness costs at each dispatch level", times the
whole forward); `casspec_ref.accel.invariance.attention_threads_agree` checks the construction on
the machine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

#: The threads one token's attention call runs on, on a CPU (None: the caller's count, which
#: the thread policy may switch between forwards).
ATTENTION_THREADS: int | None = 1


@contextmanager
def threads_at(n: int) -> Iterator[None]:
    """Run the block on ``n`` threads; the caller's count is restored."""
    previous = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


class TokenKeys(NamedTuple):
    """Which keys each of a forward's new tokens sees (`token_keys`)."""

    counts: list[int]  # token i's call reads keys 0..counts[i] - 1
    moved: list[Tensor | None]  # the keys (from slot `low` on) copied to slots low.. first
    low: int  # below this slot every token's keys are in place; the forward's length if all are


def token_keys(mask: Tensor | None, n_new: int, past: int) -> TokenKeys:
    """The keys of each of ``n_new`` new tokens after ``past`` cached ones under ``mask (T, past +
    T)``, True = may attend (None = causal: token i sees keys ``0..past + i``, all in place).
    Under a mask that leaves a gap in some token's keys (a tree's siblings), every token's keys
    from the first slot any gap reaches on are copied, in order, before its call (one host
    sync)."""
    length = past + n_new
    if mask is None:
        causal = [past + i + 1 for i in range(n_new)]
        return TokenKeys(causal, [None] * n_new, length)
    rows = mask.cpu().tolist()
    runs, counts = [_run(r) for r in rows], [sum(r) for r in rows]
    if counts == runs:  # no gaps: every token reads a prefix of the cache as it is
        return TokenKeys(counts, [None] * n_new, length)
    low = min(runs)
    moved = [
        torch.tensor([j - low for j in range(low, length) if row[j]], device=mask.device)
        if count > low
        else None
        for row, count in zip(rows, counts, strict=True)
    ]
    return TokenKeys(counts, moved, low)


def _run(row: list[bool]) -> int:
    """The length of the leading run of keys a mask row allows."""
    return row.index(False) if False in row else len(row)


def attention_alone(q: Tensor, k: Tensor, v: Tensor, keys: TokenKeys) -> Tensor:
    """Each new token's attention, one fused call per token over its own keys (`token_keys`).

    Args:
        q: ``(B, Hkv, G*T, Dh)``: query head g of token i at row ``g*T + i``.
        k, v: ``(B, Hkv, S, Dh)``: one layer's cache rows ``[0, past + T)``, the new tokens'
            written at ``[past, past + T)`` in node order (written to in place, and restored).
    Returns:
        ``(B, Hkv, G*T, Dh)``.
    """
    low = keys.low
    saved = (k[:, :, low:].clone(), v[:, :, low:].clone()) if low < k.shape[-2] else (k, v)

    def attend(i: int, query: Tensor) -> Tensor:
        count, moved = keys.counts[i], keys.moved[i]
        if moved is not None:  # its keys, in order, where the naive loop's cache holds them
            k[:, :, low:count] = saved[0][:, :, moved]
            v[:, :, low:count] = saved[1][:, :, moved]
        return F.scaled_dot_product_attention(query, k[:, :, :count], v[:, :, :count])

    out = each_token(q, len(keys.counts), attend)
    if low < k.shape[-2]:
        k[:, :, low:], v[:, :, low:] = saved  # the new rows back in node order
    return out


def each_token(q: Tensor, tokens: int, attend: Callable[[int, Tensor], Tensor]) -> Tensor:
    """``attend(i, q_i)`` for each token i in order, ``q_i (B, Hkv, G, Dh)`` its G query heads
    with its rows contiguous, as the naive loop's query holds them; the results folded back
    into ``q``'s layout ``(B, Hkv, G*T, Dh)``, query head g of token i at row ``g*T + i``.
    On a CPU the calls run on `ATTENTION_THREADS` threads, whatever the caller's count."""
    threads = ATTENTION_THREADS if q.device.type == "cpu" else None
    with nullcontext() if threads is None else threads_at(threads):
        if tokens == 1:  # the naive loop's call: q's rows are its one token's, as the call reads
            return attend(0, q.contiguous())  # them (no copy to make, no results to fold back)
        n_batch, heads, rows, head_dim = q.shape
        by_token = q.view(n_batch, heads, rows // tokens, tokens, head_dim).transpose(2, 3)
        by_token = by_token.contiguous()  # (B, Hkv, T, G, Dh)
        outs = [attend(i, by_token[:, :, i]) for i in range(tokens)]  # T x (B, Hkv, G, Dh)
    return torch.stack(outs, dim=3).view(q.shape)  # (B, Hkv, G, T, Dh) -> (B, Hkv, G*T, Dh)
