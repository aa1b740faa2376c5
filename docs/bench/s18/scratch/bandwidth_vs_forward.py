"""Is the one-token forward's "fast mode" the host's memory bandwidth? (scratch, stop 18) Every
few seconds for `minutes`: the read bandwidth (a sum over 512 MiB, median of 3) and the forward
over T = 1, 2, 4, 8 new tokens after 256 cached (median of 5 each); then the correlation of each
size's time with the bandwidth."""
import statistics, sys, time
import torch
from common import target_after_context
model, tok, cache, new = target_after_context(8)
buf = torch.ones(512 << 18)
def med(f, n):
    ts = []
    for _ in range(n):
        s = time.perf_counter(); f(); ts.append(time.perf_counter() - s)
    return statistics.median(ts)
def fw(t):
    model(new[:, :t], cache=cache); cache.truncate(256)
sizes = (1, 2, 4, 8)
rows = []
end = time.time() + 60 * float(sys.argv[1] if len(sys.argv) > 1 else 4)
print("GB/s   " + "  ".join(f"T={t:<4}" for t in sizes) + "  (ms)")
while time.time() < end:
    bw = buf.numel() * 4 / med(buf.sum, 3) / 1e9
    ms = [med(lambda: fw(t), 5) * 1e3 for t in sizes]
    rows.append((bw, *ms))
    print(f"{bw:5.1f}  " + "  ".join(f"{m:6.2f}" for m in ms), flush=True)
    time.sleep(2)
def corr(a, b):
    ma, mb = statistics.mean(a), statistics.mean(b)
    cov = sum((x - ma) * (y - mb) for x, y in zip(a, b))
    return cov / (sum((x - ma) ** 2 for x in a) * sum((y - mb) ** 2 for y in b)) ** 0.5
bws = [r[0] for r in rows]
print(f"{len(rows)} samples; bandwidth {min(bws):.1f}-{max(bws):.1f} GB/s")
for i, t in enumerate(sizes, 1):
    col = [r[i] for r in rows]
    print(f"T={t}: {min(col):.2f}-{max(col):.2f} ms, correlation with bandwidth {corr(bws, col):+.2f}")
