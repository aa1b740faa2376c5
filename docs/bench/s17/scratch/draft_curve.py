"""Each draft level's forward cost by new tokens T (after 256 cached), beside the target's."""
import statistics, time, torch, sys
sys.path.insert(0, "benchmarks")
from casspec_ref.io.weights import load_model
from casspec_ref.kv_cache import KVCache
from casspec_ref.speculative import default_drafts
model, _ = load_model()
levels = list(default_drafts(model))
cfg = model.config
cache = KVCache(cfg, 300, next(model.parameters()).dtype, "cpu")
def timed(T, plan=None, repeats=11):
    ts = []
    for _ in range(repeats + 2):
        x = torch.randint(0, cfg.vocab_size, (1, T))
        s = time.perf_counter(); model.forward(x, cache=cache, plan=plan); ts.append(time.perf_counter() - s)
        cache.truncate(256)
    return statistics.median(ts[2:]) * 1e3
with torch.no_grad():
    model.forward(torch.randint(0, cfg.vocab_size, (1, 256)), cache=cache)
    for name, plan in [("target", None)] + [(p.name, p) for p in levels]:
        print(f"{name:24s}", " ".join(f"T{T}:{timed(T, plan):5.1f}" for T in (1, 2, 3, 4, 5, 6, 8, 12)), flush=True)
