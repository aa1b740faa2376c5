import os, sys
os.environ.setdefault("CASSPEC_KERNELS", "auto")
import torch
from torch.profiler import profile, ProfilerActivity
from casspec_ref.io.weights import load_model
from casspec_ref.kv_cache import KVCache
from casspec_ref.accel import kernel_table as KT
model, _ = load_model()
KT.prepare(KT.model_shapes(model), torch.float32)
cfg = model.config
cache = KVCache(cfg, 400, torch.float32, "cpu")
T = int(sys.argv[1])
with torch.no_grad():
    model.forward(torch.randint(0, cfg.vocab_size, (1, 256)), cache=cache); cache.length = 256
    x = torch.randint(0, cfg.vocab_size, (1, T))
    mask = torch.ones(T, 256 + T, dtype=torch.bool).tril(256)
    for _ in range(3):
        model.forward(x, cache=cache, attn_mask=mask); cache.length = 256
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(10):
            model.forward(x, cache=cache, attn_mask=mask); cache.length = 256
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
