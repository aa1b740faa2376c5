# Solutions to the exercises of 02_kv_cache_and_naive_loop.ipynb.
# Each "exercise" section replaces the notebook cell tagged exercise:NAME; each "wrong" section is
# a plausible wrong answer that the check must reject (see tutorials/exercises.py).
#
# Hints to the open questions at the end of the notebook:
# 1. Without a cache step t costs O(t * D^2 + t^2 * D); with one, O(D^2 + t * D). Sum over t.
# 2. 2 (K and V) * L * H_kv * D_head * 4 bytes per token; compare with count_parameters * 4.
# 3. The next forward writes at cache.length and attends to rows [0, length): gaps would be read
#    as tokens.
# 4. Matmuls over different shapes may round differently; greedy equality needs the same argmax,
#    which a tiny rounding change can flip near a tie.

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

# %% wrong: greedy: no cache, the whole sequence re-run at every step (right tokens, n forwards)
def my_greedy(model, prompt_ids, n):
    tokens = list(prompt_ids)
    with torch.no_grad():
        for _ in range(n):
            logits = model.forward(torch.tensor([tokens]), last_only=True)  # (1, 1, V)
            tokens.append(int(logits[0, -1].argmax()))
    return tokens[len(prompt_ids):]

# %% wrong: greedy: the prompt fed one token at a time (a forward per prompt token)
def my_greedy(model, prompt_ids, n):
    cache = KVCache(model.config, max_len=len(prompt_ids) + n, dtype=torch.float64)
    out = []
    with torch.no_grad():
        for token in prompt_ids:
            logits = model.forward(torch.tensor([[token]]), cache=cache)
        for _ in range(n):
            out.append(int(logits[0, -1].argmax()))
            logits = model.forward(torch.tensor([[out[-1]]]), cache=cache)
    return out

# %% wrong: greedy: the argmax read at the first position of the prefill's logits
def my_greedy(model, prompt_ids, n):
    cache = KVCache(model.config, max_len=len(prompt_ids) + n, dtype=torch.float64)
    out, feed = [], torch.tensor([prompt_ids])
    with torch.no_grad():
        for _ in range(n):
            logits = model.forward(feed, cache=cache)  # (1, T, V)
            out.append(int(logits[0, 0].argmax()))
            feed = torch.tensor([[out[-1]]])
    return out

# %% wrong: greedy: the library's generate_ar called instead of the loop
def my_greedy(model, prompt_ids, n):
    return generate_ar(model, prompt_ids, n).tokens

# %% wrong: greedy: the timing cell's loop transcribed with the notebook's N instead of n
def my_greedy(model, prompt_ids, n):
    cache = KVCache(model.config, max_len=len(prompt_ids) + N, dtype=torch.float64)
    out = []
    with torch.no_grad():
        feed = torch.tensor([prompt_ids])
        for _ in range(N):
            logits = model.forward(feed, cache=cache, last_only=True)  # (1, 1, V)
            feed = logits[0, -1].argmax().reshape(1, 1)  # (1, 1)
            out.append(int(feed))
    return out

# %% wrong: greedy: the prefill's token dropped (each token read after feeding the previous one)
def my_greedy(model, prompt_ids, n):
    cache = KVCache(model.config, max_len=len(prompt_ids) + n + 1, dtype=torch.float64)
    with torch.no_grad():
        logits = model.forward(torch.tensor([prompt_ids]), cache=cache, last_only=True)
        token, out = int(logits[0, -1].argmax()), []
        for _ in range(n):
            logits = model.forward(torch.tensor([[token]]), cache=cache, last_only=True)
            token = int(logits[0, -1].argmax())
            out.append(token)
    return out

# %% exercise: keep-first
def keep_only_first(cache, base):
    cache.commit(base, keep=[0])  # or: cache.truncate(base + 1)

# %% wrong: keep-first: every drafted row dropped
def keep_only_first(cache, base):
    cache.truncate(base)

# %% wrong: keep-first: the second drafted row kept instead of the first
def keep_only_first(cache, base):
    cache.commit(base, keep=[1])

# %% wrong: keep-first: one row too many kept
def keep_only_first(cache, base):
    cache.truncate(base + 2)

# %% wrong: keep-first: the length hard-coded for the page's cache (truncate(6)), base ignored
def keep_only_first(cache, base):
    cache.truncate(6)

# %% wrong: keep-first: the page's commit copied (keep=[0, 1]: two drafted rows kept)
def keep_only_first(cache, base):
    cache.commit(base, keep=[0, 1])

# %% wrong: keep-first: the kept row counted from the start of the cache, not from base
def keep_only_first(cache, base):
    cache.commit(0, keep=[base])
