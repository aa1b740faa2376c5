"""A/B: q/k/v as one product and gate/up as one product vs separate, target forward after 256 cached."""
import os, statistics, time
os.environ.setdefault("CASSPEC_KERNELS", "auto")
import torch, torch.nn.functional as F
import casspec_ref.model as M
from casspec_ref.accel import kernel_table as KT
from casspec_ref.base.kernels import exact_linear
from casspec_ref.io.weights import load_model
from casspec_ref.kv_cache import KVCache

model, tok = load_model()
cfg = model.config
d, kv, ff = cfg.d_model, cfg.n_kv_heads * cfg.head_dim, cfg.d_ff
KT.prepare({(d + 2 * kv, d), (2 * ff, d)}, torch.float32)
print(KT.format_table(KT.active_table()))
w = model.weights_in(torch.float32)
fused = {}
for i in range(cfg.n_layers):
    p = f"layers.{i}."
    fused[p + "qkv"] = torch.cat([w[p + "attn.q.weight"], w[p + "attn.k.weight"], w[p + "attn.v.weight"]]).contiguous()
    fused[p + "gu"] = torch.cat([w[p + "mlp.gate.weight"], w[p + "mlp.up.weight"]]).contiguous()
orig_att, orig_mlp = M.Transformer._attention, M.Transformer._mlp
def att(self, h, w, p, layer, plan, cache, bias, cos, sin):
    c = self.config
    B, T, _ = h.shape
    qkv = exact_linear(h, fused[p + "qkv"], None)
    q, k, v = qkv.split([d, kv, kv], dim=-1)
    q = q.reshape(B, T, c.n_heads, c.head_dim).transpose(1, 2)
    k = k.reshape(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
    v = v.reshape(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
    q, k = M.rope(q, cos, sin), M.rope(k, cos, sin)
    k, v = cache.write(layer, k, v)
    q = q.reshape(B, c.n_kv_heads, -1, c.head_dim)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=bias)
    out = out.reshape(B, c.n_heads, T, c.head_dim).transpose(1, 2).reshape(B, T, c.d_model)
    return exact_linear(out, w[p + "attn.o.weight"], None)
def mlp(self, h, w, p, layer, plan):
    gu = exact_linear(h, fused[p + "gu"], None)
    gate, up = gu.split([ff, ff], dim=-1)
    return exact_linear(F.silu(gate) * up, w[p + "mlp.down.weight"], None)
cache = KVCache(cfg, 400, torch.float32, "cpu")
def one(T, x):
    t = time.perf_counter(); model.forward(x, cache=cache); dt = time.perf_counter() - t
    cache.length = 256
    return dt
with torch.no_grad():
    model.forward(torch.randint(0, cfg.vocab_size, (1, 256)), cache=cache); cache.length = 256
    sizes = (1, 2, 3, 4, 8, 16)
    res = {(v, T): [] for v in ("sep", "fused") for T in sizes}
    xs = {T: torch.randint(0, cfg.vocab_size, (1, T)) for T in sizes}
    for T in sizes:  # same logits?
        a = model.forward(xs[T], cache=cache); cache.length = 256
        M.Transformer._attention, M.Transformer._mlp = att, mlp
        b = model.forward(xs[T], cache=cache); cache.length = 256
        M.Transformer._attention, M.Transformer._mlp = orig_att, orig_mlp
        print(T, "max |diff|", (a - b).abs().max().item(), "argmax equal", bool((a.argmax(-1) == b.argmax(-1)).all()))
    for rep in range(15):
        for T in sizes:
            for v in ("sep", "fused") if rep % 2 else ("fused", "sep"):
                if v == "fused":
                    M.Transformer._attention, M.Transformer._mlp = att, mlp
                res[(v, T)].append(one(T, xs[T]))
                M.Transformer._attention, M.Transformer._mlp = orig_att, orig_mlp
    for T in sizes:
        s, f = (1000 * statistics.median(res[(v, T)]) for v in ("sep", "fused"))
        print(f"T={T:2d}: separate {s:6.1f} ms, fused {f:6.1f} ms, fused/sep {f / s:.3f}")
