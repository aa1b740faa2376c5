"""The verify-cost curve by context length: one SmolLM2 forward over T new tokens (causal) after
C cached tokens, median of 7, ms, with the machine's kernel table; and the attention's share
(the same forward with attention's F.scaled_dot_product_attention timed alone).
Usage: OMP_NUM_THREADS=2 python context_curve.py"""
import os, statistics, time
os.environ.setdefault("CASSPEC_KERNELS", "auto")
import torch
import torch.nn.functional as F
from casspec_ref.io.weights import load_model
from casspec_ref.kv_cache import KVCache

model, _ = load_model()
c = model.config
gen = torch.Generator().manual_seed(0)
SIZES = (1, 2, 4, 8, 16)
sdpa = F.scaled_dot_product_attention
spent = [0.0]


def timed_sdpa(*a, **k):
    t = time.perf_counter(); out = sdpa(*a, **k); spent[0] += time.perf_counter() - t
    return out


print("context  " + "".join(f"T={t:<14}" for t in SIZES) + "   (ms; in brackets: attention's ms; x: over T=1)")
for context in (256, 1024, 2048):
    ids = torch.randint(0, c.vocab_size, (1, context), generator=gen)
    cache = KVCache(c, context + 32, model.tok_emb.weight.dtype)
    with torch.no_grad():
        model(ids, cache=cache, last_only=True)
        new = torch.randint(0, c.vocab_size, (1, 16), generator=gen)
        res = {}
        for t in SIZES:
            model(new[:, :t], cache=cache); cache.truncate(context)
        for t in SIZES:
            tot, att = [], []
            for _ in range(7):
                F.scaled_dot_product_attention = timed_sdpa; spent[0] = 0.0
                s = time.perf_counter(); model(new[:, :t], cache=cache); tot.append(1e3 * (time.perf_counter() - s))
                att.append(1e3 * spent[0]); F.scaled_dot_product_attention = sdpa
                cache.truncate(context)
            res[t] = (statistics.median(tot), statistics.median(att))
    one = res[1][0]
    print(f"{context:7d}  " + "".join(f"{m:5.1f} ({a:4.1f}) x{m/one:.2f} ".ljust(16) for m, a in res.values()), flush=True)
