"""Where a one-token forward's time goes, for the target and the int8 draft (w8a8-fast), after
256 cached tokens; medians of 40 forwards, ms. For each: the forward; the forward with every
linear replaced by a preallocated zero output (the rest: norms, rotary, attention, cache writes,
residuals, and the Python around them); for the draft also the time inside fbgemm's products
and inside `Int8Kernel.__call__` (the products plus their bookkeeping). Usage:
forward_anatomy.py. Patches the model's `linear` and the int8 kernel in its own process."""
import os, statistics, time
os.environ.setdefault("CASSPEC_KERNELS", "auto")
import torch
import casspec_ref.accel.int8 as I
import casspec_ref.model as M
from casspec_ref.io.weights import load_model
from casspec_ref.kv_cache import KVCache
from casspec_ref.speculative import default_drafts

model, tok = load_model()
cfg = model.config
int8 = default_drafts(model)[-1]
cache = KVCache(cfg, 400, torch.float32, "cpu")
def med(plan, T=1, n=40):
    x = torch.randint(0, cfg.vocab_size, (1, T)); ts = []
    for _ in range(n):
        t = time.perf_counter(); model.forward(x, cache=cache, plan=plan); ts.append(time.perf_counter() - t)
        cache.length = 256
    return 1000 * statistics.median(ts)
zeros = {}
def no_matmul(x, w, b, layer, name, plan):
    key = (tuple(x.shape), w.shape[0])
    if key not in zeros:
        zeros[key] = torch.zeros(*x.shape[:-1], w.shape[0])
    return zeros[key]
with torch.no_grad():
    model.forward(torch.randint(0, cfg.vocab_size, (1, 256)), cache=cache); cache.length = 256
    med(int8, n=3)
    for T in (1, 4, 8):
        real = med(None, T)
        M.linear, real_linear = no_matmul, M.linear
        rest = med(None, T)
        M.linear = real_linear
        print(f"target T={T}: forward {real:.1f} ms, without the products {rest:.1f} ms ({rest / real:.0%})")
    spent = {"fbgemm": 0.0, "kernel": 0.0}
    run_packed, call = I.Int8Kernel._run_packed, I.Int8Kernel.__call__
    def timed_packed(self, x, packed):
        t = time.perf_counter(); r = run_packed(self, x, packed); spent["fbgemm"] += time.perf_counter() - t; return r
    def timed_call(self, *a):
        t = time.perf_counter(); r = call(self, *a); spent["kernel"] += time.perf_counter() - t; return r
    total = med(int8)
    I.Int8Kernel._run_packed, I.Int8Kernel.__call__ = timed_packed, timed_call
    timed_total = med(int8)
    I.Int8Kernel._run_packed, I.Int8Kernel.__call__ = run_packed, call
    M.linear, real_linear = no_matmul, M.linear
    rest = med(int8)
    M.linear = real_linear
    print(f"int8 draft T=1: forward {total:.1f} ms (timed run {timed_total:.1f}); fbgemm products "
          f"{1000 * spent['fbgemm'] / 40:.1f} ms, Int8Kernel calls {1000 * spent['kernel'] / 40:.1f} ms; "
          f"without the products {rest:.1f} ms; target T=1 {med(None):.1f} ms")
