"""SDPA against a manual product-softmax-product for one layer of SmolLM2 (3 KV heads, 3 query heads each, head 64) over S cached keys, T new rows, a causal float bias for T > 1; microseconds, median of 50. Usage: OMP_NUM_THREADS=2 python sdpa_micro.py"""
import torch, time, statistics
import torch.nn.functional as F
torch.manual_seed(0)
def med(f, n=50):
    for _ in range(5): f()
    ts=[]
    for _ in range(n):
        s=time.perf_counter(); f(); ts.append(time.perf_counter()-s)
    return 1e6*statistics.median(ts)
for S in (256, 1024, 2048):
    buf = torch.randn(1, 3, 2100, 64)
    k = buf[:, :, :S]; v = buf[:, :, :S].clone()
    vb = torch.randn(1,3,2100,64)[:, :, :S]
    kc, vc = k.contiguous(), vb.contiguous()
    for T in (1, 4, 16):
        q = torch.randn(1, 3, 3*T, 64)
        bias = torch.zeros(3*T, S)
        bias[:, S-T:] = float('-inf'); 
        for i in range(3*T): bias[i, S-T: S-T+ (i % T)+1] = 0
        r = {}
        r['view'] = med(lambda: F.scaled_dot_product_attention(q, k, vb, attn_mask=bias if T>1 else None))
        r['contig'] = med(lambda: F.scaled_dot_product_attention(q, kc, vc, attn_mask=bias if T>1 else None))
        with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
            r['math'] = med(lambda: F.scaled_dot_product_attention(q, kc, vc, attn_mask=bias if T>1 else None))
        def manual():
            s = (q @ kc.transpose(-1, -2)) * 0.125
            if T > 1: s = s + bias
            return torch.softmax(s, -1) @ vc
        r['manual'] = med(manual)
        print(S, T, {a: round(b,1) for a,b in r.items()}, 'us')
