"""One packed product's cost through `apply_form` (this stop's shortcut), through `run_form`
(stop 19's path for it) and the bare oneDNN call, on a 64x576 weight (small, so that the fixed
per-call costs show), for 1, 4 and 8 rows; alternated in 5 rounds, median us per call. Also
counts the packed products of one SmolLM2 forward per T. Usage: packed_call.py."""
import os, statistics, time
os.environ.setdefault("CASSPEC_KERNELS", "auto")
import torch
from casspec_ref.base import kernels as K

torch.set_num_threads(2)
def per_call(f, n=4000):
    for _ in range(200): f()
    t = time.perf_counter()
    for _ in range(n): f()
    return 1e6 * (time.perf_counter() - t) / n
W = torch.randn(64, 576)
P = K.Form("packed")
pw = K.packed_weight(W)
op = torch.ops.mkldnn._linear_pointwise.default
for rows in (1, 4, 8):
    x = torch.randn(1, rows, 576)
    xr = x.reshape(-1, 576)
    res = {"apply_form": [], "run_form": [], "bare op": []}
    for _ in range(5):
        res["apply_form"].append(per_call(lambda: K.apply_form(P, x, W, None)))
        res["run_form"].append(per_call(lambda: K.run_form(P, x, W, None)))
        res["bare op"].append(per_call(lambda: op(xr, pw, None, "none", [], "")))
    print(f"rows {rows}: " + ", ".join(f"{k} {statistics.median(v):.1f} us" for k, v in res.items()))

from casspec_ref.io.weights import load_model
from casspec_ref.kv_cache import KVCache
model, tok = load_model()
cache = KVCache(model.config, 400, torch.float32, "cpu")
counts = {}
T = 0
orig = K._packed_rows
def count(x, w, b):
    counts[T] = counts.get(T, 0) + 1
    return orig(x, w, b)
K._packed_rows = count
with torch.no_grad():
    model.forward(torch.randint(0, 1000, (1, 256)), cache=cache)
    for T in (1, 2, 3, 4, 6, 8, 12, 16):
        cache.length = 256
        model.forward(torch.randint(0, 1000, (1, T)), cache=cache)
print("packed products per forward, by T:", {T: counts.get(T, 0) for T in (1, 2, 3, 4, 6, 8, 12, 16)})
