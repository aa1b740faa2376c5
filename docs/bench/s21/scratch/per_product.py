"""Time of every product inside target forwards over T tokens (after 256 cached), by weight shape and
T, and the forward less its products; medians over 15 forwards per T, T interleaved."""
import os, statistics, time, collections
os.environ.setdefault("CASSPEC_KERNELS", "auto")
import torch
import casspec_ref.model as M
from casspec_ref.base import kernels as K
from casspec_ref.io.weights import load_model
from casspec_ref.kv_cache import KVCache
from casspec_ref.accel import kernel_table as KT
model, _ = load_model()
KT.prepare(KT.model_shapes(model), torch.float32)
cfg = model.config
cache = KVCache(cfg, 400, torch.float32, "cpu")
orig = K.exact_linear
acc = collections.defaultdict(float)
def timed(x, w, b):
    t = time.perf_counter(); out = orig(x, w, b); acc[tuple(w.shape)] += time.perf_counter() - t; return out
M.exact_linear = timed
sizes = [int(s) for s in os.environ.get("SIZES", "2 3 4 5 6 7 8").split()]
per = {T: collections.defaultdict(list) for T in sizes}
with torch.no_grad():
    model.forward(torch.randint(0, cfg.vocab_size, (1, 256)), cache=cache); cache.length = 256
    for rep in range(15):
        for T in sizes:
            x = torch.randint(0, cfg.vocab_size, (1, T)); acc.clear()
            t = time.perf_counter(); model.forward(x, cache=cache); total = time.perf_counter() - t
            cache.length = 256
            for k, v in acc.items(): per[T][k].append(v)
            per[T]["total"].append(total); per[T]["rest"].append(total - sum(acc.values()))
tab = K.active_table()
keys = sorted({k for T in sizes for k in per[T] if k not in ("total", "rest")}) + ["rest", "total"]
print("ms per forward (median of 15); form chosen in brackets")
print(f"{'':12s}" + "".join(f"{T:>16d}" for T in sizes))
for k in keys:
    cells = []
    for T in sizes:
        f = "" if isinstance(k, str) else str(tab.form_for(k[0], k[1], torch.float32, T))
        cells.append(f"{1000*statistics.median(per[T][k]):7.2f} {f[:8]:>8s}")
    print(f"{str(k):12s}" + "".join(cells))
