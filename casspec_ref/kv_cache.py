"""The static key/value cache, with the commit and rollback that speculative decoding needs.

One preallocated buffer per model, ``(L, B, H_kv, max_len, D_head)``, and an explicit
``length``: rows ``[0, length)`` hold the K/V of the verified prefix. A forward writes its new
rows after ``length`` and advances it once; after verification `commit` keeps the accepted tree
nodes (CAS-Spec §4, "compact the KV of the accepted path") and `truncate` drops draft scratch
rows. That a commit equals a fresh prefill of the accepted prefix is a tested invariant:
docs/design.md ("The KV cache is visible state").
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import torch
from torch import Tensor

from casspec_ref.base import model_checks
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
        model_checks.check_kv_cache(config, max_len, dtype, batch)
        self.config = config
        self.max_len = max_len
        shape = (config.n_layers, batch, config.n_kv_heads, max_len, config.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)  # (L, B, H_kv, max_len, D_head)
        self.v = torch.zeros(shape, dtype=dtype, device=device)  # (L, B, H_kv, max_len, D_head)
        self.length = 0

    def write(self, layer: int, k_new: Tensor, v_new: Tensor) -> tuple[Tensor, Tensor]:
        """Write one layer's new rows ``(B, H_kv, T, D_head)`` at ``[length, length + T)`` and
        return views of its rows ``[0, length + T)`` (no copy of the history). ``length`` does
        not move: the model calls `advance` once per forward."""
        # The same rules as check_cache_write, inline: this runs once per layer of every forward.
        if (
            not 0 <= layer < self.k.shape[0]
            or k_new.shape[:2] != self.k.shape[1:3]
            or k_new.shape[3:] != self.k.shape[4:]  # also true unless k_new has 4 dimensions
            or v_new.shape != k_new.shape
            or self.length + k_new.shape[2] > self.max_len
        ):
            model_checks.check_cache_write(self, layer, k_new, v_new)  # raises, naming the fault
        end = self.length + k_new.shape[2]
        self.k[layer, :, :, self.length : end] = k_new
        self.v[layer, :, :, self.length : end] = v_new
        return self.k[layer, :, :, :end], self.v[layer, :, :, :end]  # (B, H_kv, end, D_head)

    def advance(self, n: int) -> None:
        """Mark ``n`` more rows as part of the cached sequence."""
        model_checks.check_advance(self, n)
        self.length += n

    def truncate(self, n: int) -> None:
        """Forget every row from ``n`` on (draft scratch rows, a rejected suffix)."""
        model_checks.check_truncate(n, self.length)
        self.length = n

    def commit(self, base: int, keep: Sequence[int]) -> None:
        """Keep ``[0, base)`` plus rows ``base + i`` for ``i`` in ``keep`` (strictly ascending:
        the accepted path's flattened tree indices, root first), compacted in order into
        ``[base, base + len(keep))``, which becomes the new ``length``."""
        keep = [int(i) for i in keep]
        model_checks.check_commit(base, keep, self.length)
        # Identity prefix (the usual case: the accepted path is the first rows) needs no copy.
        if keep != list(range(len(keep))):
            src = torch.tensor(keep, device=self.k.device) + base
            # index_select copies before the write, so overlapping source/destination is safe.
            self.k[:, :, :, base : base + len(keep)] = self.k.index_select(3, src)
            self.v[:, :, :, base : base + len(keep)] = self.v.index_select(3, src)
        self.length = base + len(keep)

    def clone(self) -> KVCache:
        """An independent copy (buffers and length)."""
        other = copy.copy(self)
        other.k, other.v = self.k.clone(), self.v.clone()
        return other

    def __repr__(self) -> str:
        return (
            f"KVCache(length={self.length}, max_len={self.max_len}, dtype={self.k.dtype}, "
            f"shape={tuple(self.k.shape)})"
        )
