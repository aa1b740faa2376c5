"""How noisy is one forward's timing on this machine (scratch, stop 18)? 300 forwards each over
T = 1 and T = 4 new tokens after 256 cached, alternating; quantiles relative to the median, the
lognormal sigma of the central part, and the share of calls over 1.5x the median."""
import math, statistics, time
from common import target_after_context
model, tok, cache, new = target_after_context(4)
times = {1: [], 4: []}
for i in range(310):
    for t in (1, 4):
        s = time.perf_counter(); model(new[:, :t], cache=cache); cache.truncate(256)
        if i >= 10:
            times[t].append(time.perf_counter() - s)
for t, ts in times.items():
    m = statistics.median(ts)
    r = sorted(x / m for x in ts)
    q = lambda p: r[int(p * (len(r) - 1))]
    sigma = (math.log(q(0.84)) - math.log(q(0.16))) / 2
    print(f"T={t}: median {m*1e3:.2f} ms; /median p01 {q(.01):.3f} p10 {q(.1):.3f} p90 {q(.9):.3f} "
          f"p99 {q(.99):.3f} max {r[-1]:.2f}; sigma(16-84%) {sigma:.3f}; >1.5x {sum(x > 1.5 for x in r) / len(r):.1%}")
