"""The static key/value cache, with the commit and rollback that speculative decoding needs.

Scope: one preallocated buffer per model, shaped ``(L, B, H_kv, max_len, D_head)``, and an
explicit ``length``: rows ``[0, length)`` hold the K/V of the verified prefix. A forward writes
its new tokens' K/V at ``[length, length + T)`` (`write`) and the model calls `advance` once at
the end. Speculative decoding (CAS-Spec §4 / docs/method.md §4, "compact the KV of the accepted
path and drop the rest") then uses `commit` to keep the accepted tree nodes, or `truncate` to
drop draft scratch rows.

Invariant (tested): after ``commit(base, keep)`` the cache equals a fresh prefill of the accepted
prefix. It holds because K/V of a token depend only on that token, its position and the tokens it
attends to; a tree node's position is ``prefix length + depth``, equal to its position in the
accepted sequence, and it attended exactly to its ancestors, i.e. to the accepted prefix.

Notable choices: the cache is plain visible state (no hidden cache inside attention modules);
`write` returns views, not copies, so a decode step does not copy the whole history.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from casspec_ref.config import ModelConfig


class KVCache:
    """Preallocated K/V buffers for every layer, with an explicit verified ``length``."""

    def __init__(
        self,
        config: ModelConfig,
        max_len: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
        batch: int = 1,
    ) -> None:
        if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len < 1:
            raise ValueError(f"KVCache max_len={max_len!r}: must be an integer >= 1")
        if max_len > config.max_seq_len:
            raise ValueError(
                f"KVCache max_len={max_len} exceeds the model context "
                f"max_seq_len={config.max_seq_len}"
            )
        if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
            raise ValueError(f"KVCache batch={batch!r}: must be an integer >= 1")
        if not dtype.is_floating_point:
            raise ValueError(f"KVCache dtype={dtype}: must be a floating-point dtype")
        self.config = config
        self.max_len = max_len
        shape = (config.n_layers, batch, config.n_kv_heads, max_len, config.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # (L, B, H_kv, max_len, D_head)
        self.v = torch.zeros(shape, dtype=dtype, device=device)  # (L, B, H_kv, max_len, D_head)
        self.length = 0

    @property
    def dtype(self) -> torch.dtype:
        return self.k.dtype

    @property
    def batch(self) -> int:
        return self.k.shape[1]

    def free(self) -> int:
        """Rows still available after ``length``."""
        return self.max_len - self.length

    def write(
        self, layer: int, k_new: torch.Tensor, v_new: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Write ``T`` new rows of one layer at ``[length, length + T)``; return views of
        ``[0, length + T)``. ``length`` is not moved: the model calls `advance` once per forward.

        Args:
            layer: block index.
            k_new, v_new: ``(B, H_kv, T, D_head)``.
        Returns:
            ``(k_all, v_all)``, each ``(B, H_kv, length + T, D_head)`` (views into the buffers).
        """
        if not 0 <= layer < self.k.shape[0]:
            raise ValueError(f"KVCache.write layer={layer}: allowed are 0..{self.k.shape[0] - 1}")
        expected = (self.k.shape[1], self.k.shape[2], self.k.shape[4])
        if k_new.dim() != 4 or (k_new.shape[0], k_new.shape[1], k_new.shape[3]) != expected:
            raise ValueError(
                f"KVCache.write: k_new has shape {tuple(k_new.shape)}, expected "
                f"(B={expected[0]}, H_kv={expected[1]}, T, D_head={expected[2]})"
            )
        if v_new.shape != k_new.shape:
            raise ValueError(
                f"KVCache.write: v_new shape {tuple(v_new.shape)} != k_new shape "
                f"{tuple(k_new.shape)}"
            )
        end = self.length + k_new.shape[2]
        if end > self.max_len:
            raise ValueError(
                f"KVCache overflow: {self.length} cached + {k_new.shape[2]} new rows exceed "
                f"max_len={self.max_len}"
            )
        self.k[layer, :, :, self.length : end] = k_new
        self.v[layer, :, :, self.length : end] = v_new
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]  # (B, H_kv, end, D_head)

    def advance(self, n: int) -> None:
        """Mark ``n`` more rows as part of the cached sequence."""
        if n < 0 or self.length + n > self.max_len:
            raise ValueError(
                f"KVCache.advance({n}): length {self.length} + {n} must stay within "
                f"0..max_len={self.max_len}"
            )
        self.length += n

    def truncate(self, n: int) -> None:
        """Forget every row from ``n`` on (draft scratch rows, a rejected suffix)."""
        if not 0 <= n <= self.length:
            raise ValueError(
                f"KVCache.truncate({n}): allowed are 0..length={self.length} "
                "(truncate cannot grow the cache)"
            )
        self.length = n

    def commit(self, base: int, keep: Sequence[int]) -> None:
        """Keep ``[0, base)`` plus rows ``base + i`` for ``i`` in ``keep`` (strictly ascending),
        compacted in order into ``[base, base + len(keep))``; ``length`` becomes
        ``base + len(keep)``.

        ``base`` is the verified length before the tree forward; ``keep`` lists the flattened
        tree indices of the accepted path (root first). Rows beyond the new length are stale.
        """
        keep = [int(i) for i in keep]
        if not 0 <= base <= self.length:
            raise ValueError(f"KVCache.commit base={base}: allowed are 0..length={self.length}")
        if any(b <= a for a, b in zip(keep, keep[1:], strict=False)):
            raise ValueError(f"KVCache.commit keep={keep}: indices must be strictly ascending")
        if keep and (keep[0] < 0 or base + keep[-1] >= self.length):
            raise ValueError(
                f"KVCache.commit keep={keep}: allowed are 0..{self.length - base - 1} "
                f"(rows base={base} .. length-1={self.length - 1})"
            )
        # Identity prefix (the usual case: the accepted path is the first rows) needs no copy.
        if keep != list(range(len(keep))):
            src = torch.tensor(keep, device=self.k.device) + base
            # index_select copies before the write, so overlapping source/destination is safe.
            self.k[:, :, :, base : base + len(keep)] = self.k.index_select(3, src)
            self.v[:, :, :, base : base + len(keep)] = self.v.index_select(3, src)
        self.length = base + len(keep)

    def clone(self) -> KVCache:
        """An independent copy (buffers and length)."""
        other = KVCache.__new__(KVCache)
        other.config = self.config
        other.max_len = self.max_len
        other.k = self.k.clone()
        other.v = self.v.clone()
        other.length = self.length
        return other

    def __repr__(self) -> str:
        return (
            f"KVCache(length={self.length}, max_len={self.max_len}, dtype={self.dtype}, "
            f"shape={tuple(self.k.shape)})"
        )
