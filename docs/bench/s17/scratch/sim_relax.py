"""Simulator A/B (scratch, stop 17): an untested estimate relaxes toward the draft's long-run
mean (both ways) vs up toward the prior only (shipped). 40 seeds x 1000 steps per world; ratio
to the best fixed schedule in hindsight (3000 steps, seed 1); "locked": runs whose good draft
ended with fewer than 50 outcomes."""
import statistics, sys
sys.path.insert(0, "/work/main/tests")
src = open("/work/main/docs/bench/s16/scratch/sim_prior.py").read().split("priors = [float")[0]
exec(src)
from casspec_ref import dytc
shipped = dytc.AcceptanceEstimator.relax
def to_mean(self, rate):  # as run for simulator_relax.txt: in the warm-up too
    self.alpha += rate * ((self.prior + self._sum) / (1 + self.count) - self.alpha)
print(f"{'world':36s} {'best fixed':>12s}   shipped: mean   min locked   to mean: mean   min locked")
for name, w in worlds.items():
    f = best_fixed(w, 3000, 1, ["cheap", "good", PLD, RECYCLE]); b = max(f, key=f.get)
    row = []
    for rule in (shipped, to_mean):
        dytc.AcceptanceEstimator.relax = rule
        r, locked = [], 0
        for seed in range(40):
            d, pol, _ = run_dytc(w, 1000, seed)
            r.append(d / f[b]); locked += pol.alpha["good"].count < 50
        row.append(f"{statistics.mean(r):13.3f} {min(r):5.3f} {locked:3d}/40")
    print(f"{name:36s} {b:>12s} " + "   ".join(row), flush=True)
