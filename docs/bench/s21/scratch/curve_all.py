"""Forward over T = 1..16 new tokens after 256 cached (tree mask = causal), median of 9, interleaved."""
import os, statistics, sys
os.environ.setdefault("CASSPEC_KERNELS", "auto")
import torch
from casspec_ref.io.weights import load_model
from casspec_ref.tools.bench import measure_verify_curve
model, _ = load_model()
from casspec_ref.accel import kernel_table as KT
KT.prepare(KT.model_shapes(model), torch.float32)
sizes = tuple(range(1, 17))
c = measure_verify_curve(model, sizes, repeats=int(sys.argv[1]) if len(sys.argv) > 1 else 9)
one = c[1]
print(" ".join(f"{t}:{1000*s:.1f}({s/one:.2f})" for t, s in c.items()))
env = {t: min(c[u] for u in sizes if u >= t) for t in sizes}
print("envelope (cheapest size >= T):", " ".join(f"{t}:{1000*s:.1f}" for t, s in env.items()))
