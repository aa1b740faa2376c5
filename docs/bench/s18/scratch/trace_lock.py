"""Follow the int8 level's estimate through one noiseless replay (scratch, stop 18): every 60
steps, whether the step drafted with it, its estimate, outcomes and c, and the lookup estimates.
Usage: trace_lock.py RECORD COSTS VARIANT (a `noisy_replay.VARIANTS` name)."""
import sys
from noisy_replay import *
import noisy_replay as N
recs, costs, levels = load(sys.argv[1], sys.argv[2])
int8 = levels[-1]
log = []
orig = DyTCPolicy.observe_step
def obs(self, tested, tokens, seconds, timings):
    used = timings.get(int8, (0, 0))[0]
    r = orig(self, tested, tokens, seconds, timings)
    log.append((used, self.alpha[int8].alpha, self.alpha[int8].count, self.cost(int8), {k: round(v.alpha, 2) for k, v in self.alpha.items() if k.startswith("pld")}))
    return r
DyTCPolicy.observe_step = obs
N.orig_observe = obs
r, pol = run(recs, costs, levels, -1, sys.argv[3])
# print every 50 steps, plus stretches without int8 use
last = 0
for i, (used, a, n, c, p) in enumerate(log):
    if i % 60 == 0:
        print(i, "int8 used" if used else "        -", f"alpha {a:.3f} n {n} c {c:.3f}", p)
