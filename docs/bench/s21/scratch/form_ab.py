"""In-forward A/B of forms for one weight shape at T rows: the table's choice vs alternatives,
interleaved, median of N forwards after 256 cached. Usage: form_ab.py OUT IN "T1 T2.." "form1 form2 ..." """
import os, statistics, sys, time
os.environ.setdefault("CASSPEC_KERNELS", "auto")
import torch
from casspec_ref.base import kernels as K
from casspec_ref.io.weights import load_model
from casspec_ref.kv_cache import KVCache
from casspec_ref.accel import kernel_table as KT
model, _ = load_model()
KT.prepare(KT.model_shapes(model), torch.float32)
cfg = model.config
cache = KVCache(cfg, 400, torch.float32, "cpu")
out_f, in_f = int(sys.argv[1]), int(sys.argv[2])
sizes = [int(s) for s in sys.argv[3].split()]
forms = sys.argv[4].split()
n = int(sys.argv[5]) if len(sys.argv) > 5 else 11
tab = K.active_table()
res = {(T, f): [] for T in sizes for f in forms + ["table"]}
chosen = {T: tab.forms.get((out_f, in_f, torch.float32, T)) for T in sizes}
with torch.no_grad():
    model.forward(torch.randint(0, cfg.vocab_size, (1, 256)), cache=cache); cache.length = 256
    for rep in range(n):
        for T in sizes:
            x = torch.randint(0, cfg.vocab_size, (1, T))
            for f in (["table"] + forms)[:: 1 if rep % 2 else -1]:
                key = (out_f, in_f, torch.float32, T)
                tab.forms[key] = chosen[T] if f == "table" else K.Form.parse(f)
                model.forward(x, cache=cache); cache.length = 256  # first use packs
                t = time.perf_counter(); model.forward(x, cache=cache); res[(T, f)].append(time.perf_counter() - t)
                cache.length = 256
                tab.forms[key] = chosen[T]
for T in sizes:
    print(f"{out_f}x{in_f} T={T}: table ({chosen[T]}) {1000*statistics.median(res[(T,'table')]):.1f} ms; " +
          ", ".join(f"{f} {1000*statistics.median(res[(T,f)]):.1f}" for f in forms))
