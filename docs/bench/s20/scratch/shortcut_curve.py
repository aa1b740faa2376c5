"""The target's forward over T new tokens after 256 cached, with `apply_form`'s packed shortcut
(this stop's `_packed_rows`) and without it (every packed product through `run_form`, as at stop
19), interleaved in every repeat; medians in ms. Also checks the two give the same logits bit
for bit. Usage: shortcut_curve.py [REPEATS]."""
import os, sys, time, statistics
os.environ.setdefault("CASSPEC_KERNELS", "auto")
import torch
from casspec_ref.io.weights import load_model
from casspec_ref.kv_cache import KVCache
from casspec_ref.base import kernels as K

model, tok = load_model()
cfg = model.config
new_apply = K.apply_form
def old_apply(form, x, weight, bias):
    if form.base == "packed" and not form.pad_to:
        return K.run_form(form, x, weight, bias)
    return new_apply(form, x, weight, bias)
cache = KVCache(cfg, 400, torch.float32, "cpu")
sizes = (1, 2, 3, 4, 6, 8, 12, 16)
repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 15
res = {(m, T): [] for m in ("old", "new") for T in sizes}
with torch.no_grad():
    model.forward(torch.randint(0, cfg.vocab_size, (1, 256)), cache=cache)
    cache.length = 256
    for T in sizes:
        x = torch.randint(0, cfg.vocab_size, (1, T))
        K.apply_form = old_apply; a = model.forward(x, cache=cache); cache.length = 256
        K.apply_form = new_apply; b = model.forward(x, cache=cache); cache.length = 256
        assert torch.equal(a, b), T
    print("same logits bit for bit at every T")
    for rep in range(repeats):
        for T in sizes:
            x = torch.randint(0, cfg.vocab_size, (1, T))
            for mode in (("old", "new") if rep % 2 else ("new", "old")):
                K.apply_form = old_apply if mode == "old" else new_apply
                t = time.perf_counter(); model.forward(x, cache=cache); dt = time.perf_counter() - t
                cache.length = 256
                res[(mode, T)].append(dt)
K.apply_form = new_apply
print("T      " + " ".join(f"{T:>6}" for T in sizes))
for mode in ("old", "new"):
    med = [1000 * statistics.median(res[(mode, T)]) for T in sizes]
    print(f"{mode:6} " + " ".join(f"{m:6.1f}" for m in med) + "   x T=1: " + " ".join(f"{m / med[0]:.2f}" for m in med[1:]))
print("new/old " + " ".join(f"{statistics.median(res[('new', T)]) / statistics.median(res[('old', T)]):6.3f}" for T in sizes))
