"""Tests of the static KV cache (casspec_ref.kv_cache): write/advance, commit, truncate, clone.

The central invariant (docs/method.md §5): after verifying a token tree and committing the accepted
path, the cache equals a fresh prefill of the accepted prefix (float64, tolerance 1e-10).
"""

from __future__ import annotations

import pytest
import torch

from casspec_ref.base.random_weights import random_init_
from casspec_ref.config import tiny_gpt2, tiny_llama
from casspec_ref.kv_cache import KVCache
from casspec_ref.model import Transformer

FAMILIES = {"llama": tiny_llama, "gpt2": tiny_gpt2}


def filled_cache(length: int, max_len: int = 12) -> KVCache:
    """A cache whose row r of every layer/head holds the value r (easy to track rows)."""
    cache = KVCache(tiny_llama(), max_len, torch.float64)
    rows = torch.arange(max_len, dtype=torch.float64).view(1, 1, 1, max_len, 1)
    cache.k.copy_(rows.expand_as(cache.k))
    cache.v.copy_(-rows.expand_as(cache.v))
    cache.length = length
    return cache


def row_ids(cache: KVCache) -> list[int]:
    return [int(x) for x in cache.k[0, 0, 0, : cache.length, 0]]


def test_write_returns_views_of_the_whole_prefix_and_advance_moves_length() -> None:
    config = tiny_llama()
    cache = KVCache(config, 8, torch.float64)
    assert cache.k.shape == (config.n_layers, 1, config.n_kv_heads, 8, config.head_dim)
    k_new = torch.randn(1, config.n_kv_heads, 3, config.head_dim, dtype=torch.float64)
    k_all, v_all = cache.write(1, k_new, 2 * k_new)
    assert k_all.shape == (1, config.n_kv_heads, 3, config.head_dim)
    assert torch.equal(k_all, k_new) and torch.equal(v_all, 2 * k_new)
    assert k_all.data_ptr() == cache.k[1].data_ptr()  # a view, not a copy
    assert cache.length == 0
    cache.advance(3)
    k_all, _ = cache.write(1, k_new[:, :, :2], k_new[:, :, :2])
    assert k_all.shape[2] == 5 and torch.equal(k_all[:, :, 3:], k_new[:, :, :2])


def test_commit_compacts_kept_rows_in_order() -> None:
    cache = filled_cache(length=10)
    cache.commit(4, [0, 2, 5])
    assert cache.length == 7
    assert row_ids(cache) == [0, 1, 2, 3, 4, 6, 9]
    assert [int(x) for x in -cache.v[2, 0, 1, :7, 3]] == [0, 1, 2, 3, 4, 6, 9]
    cache = filled_cache(length=10)
    cache.commit(4, [0, 1, 2])  # the prefix case needs no copy and keeps rows as they are
    assert row_ids(cache) == [0, 1, 2, 3, 4, 5, 6]
    cache.commit(7, [])
    assert cache.length == 7


def test_truncate_and_clone() -> None:
    cache = filled_cache(length=9)
    twin = cache.clone()
    cache.truncate(5)
    assert cache.length == 5 and twin.length == 9
    cache.k.zero_()
    assert row_ids(twin) == list(range(9))  # independent buffers
    cache.truncate(0)
    assert cache.length == 0


def test_bad_indices_raise_clear_errors() -> None:
    cache = filled_cache(length=6, max_len=8)
    with pytest.raises(ValueError, match="strictly ascending"):
        cache.commit(2, [1, 1])
    with pytest.raises(ValueError, match="strictly ascending"):
        cache.commit(2, [2, 1])
    with pytest.raises(ValueError, match="allowed are 0..3"):
        cache.commit(2, [0, 4])
    with pytest.raises(ValueError, match="base"):
        cache.commit(7, [])
    with pytest.raises(ValueError, match="truncate"):
        cache.truncate(7)
    with pytest.raises(ValueError, match="advance"):
        cache.advance(3)
    k_new = torch.zeros(1, 2, 3, 8, dtype=torch.float64)
    with pytest.raises(ValueError, match="overflow"):
        cache.write(0, k_new, k_new)
    with pytest.raises(ValueError, match="expected"):
        cache.write(0, torch.zeros(1, 3, 1, 8), torch.zeros(1, 3, 1, 8))
    with pytest.raises(ValueError, match="layer"):
        cache.write(5, k_new[:, :, :1], k_new[:, :, :1])
    with pytest.raises(ValueError, match="v_new shape"):
        cache.write(0, k_new[:, :, :1], k_new[:, :, :2])
    with pytest.raises(ValueError, match="max_seq_len"):
        KVCache(tiny_llama(), 10_000)
    with pytest.raises(ValueError, match="max_len"):
        KVCache(tiny_llama(), 0)
    assert cache.length == 6  # refused operations leave the cache as it was


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_commit_after_tree_forward_equals_fresh_prefill(family: str, seed: int) -> None:
    """Verify a random tree in one forward, commit a random root-to-node path, compare."""
    config = FAMILIES[family]()
    model = random_init_(Transformer(config).to(torch.float64), seed=seed)
    gen = torch.Generator().manual_seed(seed)
    prefix = torch.randint(0, config.vocab_size, (1, 5), generator=gen)  # (1, 5)
    n = 10
    parents = [-1] + [int(torch.randint(0, i, (1,), generator=gen)) for i in range(1, n)]
    tree_tokens = torch.randint(0, config.vocab_size, (1, n), generator=gen)  # (1, n)
    paths = []
    for i in range(n):
        path = [i]
        while parents[path[-1]] >= 0:
            path.append(parents[path[-1]])
        paths.append(path[::-1])
    mask = torch.zeros(n, 5 + n, dtype=torch.bool)
    mask[:, :5] = True
    for i, path in enumerate(paths):
        mask[i, [5 + a for a in path]] = True
    positions = torch.tensor([[5 + len(p) - 1 for p in paths]])

    cache = KVCache(config, 32, torch.float64)
    model(prefix, cache=cache)
    model(tree_tokens, positions, cache=cache, attn_mask=mask)
    leaf = int(torch.randint(1, n, (1,), generator=gen))
    accepted = paths[leaf]
    cache.commit(5, accepted)

    fresh = KVCache(config, 32, torch.float64)
    model(torch.cat([prefix, tree_tokens[:, accepted]], dim=1), cache=fresh)
    assert cache.length == fresh.length == 5 + len(accepted)
    end = cache.length
    torch.testing.assert_close(cache.k[..., :end, :], fresh.k[..., :end, :], rtol=0, atol=1e-10)
    torch.testing.assert_close(cache.v[..., :end, :], fresh.v[..., :end, :], rtol=0, atol=1e-10)
    # Decoding on from the committed cache equals decoding on from the fresh prefill.
    nxt = torch.tensor([[3]])
    torch.testing.assert_close(model(nxt, cache=cache), model(nxt, cache=fresh), rtol=0, atol=1e-10)
