# Solutions to the exercises of 02_kv_cache_and_naive_loop.ipynb.
# Each section replaces the notebook cell tagged exercise:NAME (see tutorials/exercises.py).

# %% exercise: greedy
def my_greedy(model, prompt_ids, n):
    dtype = next(model.parameters()).dtype
    cache = KVCache(model.config, max_len=len(prompt_ids) + n, dtype=dtype)
    out = []
    feed = torch.tensor([prompt_ids])  # the whole prompt first (prefill)
    with torch.no_grad():
        for _ in range(n):
            logits = model.forward(feed, cache=cache, last_only=True)  # (1, 1, V)
            token = int(logits[0, -1].argmax())
            out.append(token)
            feed = torch.tensor([[token]])  # then one token per forward
    return out

# %% exercise: keep-first
def keep_only_first(cache, base):
    cache.commit(base, keep=[0])  # or: cache.truncate(base + 1)
