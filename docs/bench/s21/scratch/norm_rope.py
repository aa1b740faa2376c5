import time, statistics, torch, torch.nn.functional as F
torch.manual_seed(0)
from casspec_ref.model import rms_norm, rope
def t(f, *a, n=2000):
    for _ in range(50): f(*a)
    ts = []
    for _ in range(n):
        s = time.perf_counter(); f(*a); ts.append(time.perf_counter() - s)
    return 1e6 * statistics.median(ts)
for T in (1, 4):
    x = torch.randn(1, T, 576); w = torch.randn(576); eps = 1e-5
    a = rms_norm(x, w, eps)
    b = F.rms_norm(x, (576,), w, eps)
    def alt(x, w, eps):
        return w * (x * torch.rsqrt(x.square().mean(-1, keepdim=True) + eps))
    def alt2(x, w, eps):
        return w * (x * (x * x).mean(-1, keepdim=True).add_(eps).rsqrt_())
    print(T, "F.rms_norm equal:", torch.equal(a, b), "alt equal:", torch.equal(a, alt(x, w, eps)), torch.equal(a, alt2(x, w, eps)))
    print(f"  rms_norm {t(rms_norm, x, w, eps):.1f} us, F.rms_norm {t(lambda *z: F.rms_norm(z[0], (576,), z[1], z[2]), x, w, eps):.1f} us, alt {t(alt, x, w, eps):.1f}, alt2 {t(alt2, x, w, eps):.1f}")
    q = torch.randn(1, 9, T, 64); cos = torch.randn(1, 1, T, 64); sin = torch.randn(1, 1, T, 64)
    def rope2(x, cos, sin):
        h = x.shape[-1] // 2
        return x * cos + torch.cat((x[..., h:], x[..., :h]), -1) * sin
    print("  rope equal:", torch.equal(rope(q, cos, sin), rope2(q, cos, sin)), f"rope {t(rope, q, cos, sin):.1f} us, cat-rope {t(rope2, q, cos, sin):.1f} us")
