"""Simulator A/B (scratch, stop 18): an untested estimate relaxes up toward its prior only (stop
17's rule) or up toward the higher of its prior and its long-run mean (this stop's). Stop 17's
worlds (`docs/bench/s16/scratch/sim_prior.py`); 40 seeds x 1000 steps per world; ratio to the
best fixed schedule in hindsight (3000 steps, seed 1); "locked": runs whose good draft ended
with fewer than 50 outcomes."""
import statistics, sys
sys.path.insert(0, "/work/main/tests")
src = open("/work/main/docs/bench/s16/scratch/sim_prior.py").read().split("priors = [float")[0]
exec(src)
from casspec_ref import dytc
shipped = dytc.AcceptanceEstimator.relax
def to_prior(self, rate):  # stop 17's rule
    if self.alpha < self.prior:
        self.alpha += rate * (self.prior - self.alpha)
print(f"{'world':36s} {'best fixed':>12s}   to prior: mean   min locked   up to mean: mean   min locked")
for name, w in worlds.items():
    f = best_fixed(w, 3000, 1, ["cheap", "good", PLD, RECYCLE]); b = max(f, key=f.get)
    row = []
    for rule in (to_prior, shipped):
        dytc.AcceptanceEstimator.relax = rule
        r, locked = [], 0
        for seed in range(40):
            d, pol, _ = run_dytc(w, 1000, seed)
            r.append(d / f[b]); locked += pol.alpha["good"].count < 50
        row.append(f"{statistics.mean(r):14.3f} {min(r):5.3f} {locked:3d}/40")
    print(f"{name:36s} {b:>12s} " + "   ".join(row), flush=True)
