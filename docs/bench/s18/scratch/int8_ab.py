"""A/B the int8 draft forward (scratch, stop 18): the package's Int8Kernel against a commit's (argv[1], loaded from git; default HEAD), T = 1 and 2 after 256 cached, interleaved, same logits asserted."""
import os, statistics, subprocess, sys, time, types, importlib.util
import torch
os.environ.setdefault("CASSPEC_KERNELS", "auto")
from casspec_ref.io.weights import load_model
from casspec_ref.kv_cache import KVCache
from casspec_ref.speculative import default_drafts
from casspec_ref.accel import int8 as NEW
src = subprocess.check_output(["git", "show", f"{sys.argv[1] if len(sys.argv) > 1 else 'HEAD'}:casspec_ref/accel/int8.py"], text=True)
OLD = types.ModuleType("old_int8"); sys.modules["old_int8"] = OLD; exec(compile(src, "old_int8.py", "exec"), OLD.__dict__)
model, tok = load_model()
c = model.config
ctx = torch.randint(0, c.vocab_size, (1, 256))
cache = KVCache(c, 300, torch.float32)
model(ctx, cache=cache, last_only=True)
new = torch.randint(0, c.vocab_size, (1, 4))
plans = {"old": OLD.int8_plan(), "new": NEW.int8_plan()}
def fw(p, t=1):
    out = model(new[:, :t], cache=cache, plan=p); cache.truncate(256); return out
for t in (1, 3):
    a, b = fw(plans["old"], t), fw(plans["new"], t)
    a, b = fw(plans["old"], t), fw(plans["new"], t)
    assert torch.equal(a, b), t
print("same logits at T = 1, 3")
for t in (1, 2):
    res = {k: [] for k in plans}
    for rep in range(60):
        for name in (list(plans) if rep % 2 else list(plans)[::-1]):
            s = time.perf_counter(); fw(plans[name], t); res[name].append(time.perf_counter() - s)
    o, n = (statistics.median(res[k]) * 1e3 for k in ("old", "new"))
    print(f"int8 draft forward T={t}: old {o:.2f} ms, new {n:.2f} ms, old/new {o / n:.3f}")
