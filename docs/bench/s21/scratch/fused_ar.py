"""generate_ar of 128 tokens, q/k/v and gate/up as one product each vs separate, interleaved."""
import os, statistics, time, sys
os.environ.setdefault("CASSPEC_KERNELS", "auto")
sys.argv = [sys.argv[0]]
exec(open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "fused.py")).read().split("cache = KVCache")[0])  # model, fused weights, att, mlp
from casspec_ref.generate import generate_ar
prompt = tok.apply_chat_template([{"role": "user", "content": "Explain in a few sentences why the sky is blue."}])
res = {"sep": [], "fused": []}
toks = {}
for rep in range(5):
    for v in ("sep", "fused") if rep % 2 else ("fused", "sep"):
        if v == "fused":
            M.Transformer._attention, M.Transformer._mlp = att, mlp
        t = time.perf_counter(); r = generate_ar(model, prompt, 128); res[v].append(time.perf_counter() - t)
        toks[v] = r.tokens
        M.Transformer._attention, M.Transformer._mlp = orig_att, orig_mlp
print("same tokens:", toks["sep"] == toks["fused"])
for v in res:
    print(v, " ".join(f"{128/s:.1f}" for s in res[v]), f"tok/s; median {128/statistics.median(res[v]):.1f}")
