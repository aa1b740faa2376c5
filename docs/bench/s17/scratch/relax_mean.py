"""Replay A/B (scratch, stop 17): an untested estimate relaxes toward the draft's long-run mean
(prior as one pseudo-outcome) in both directions, instead of up toward the prior only."""
from common import load
import sys
from casspec_ref.tools import replay as R
from casspec_ref import dytc
from casspec_ref.dytc import DyTCPolicy, DyTCConfig
recs, costs, levels = load(sys.argv[1], sys.argv[2])
ar = R.replay(recs, costs)
def run(name, **cfg):
    pol = DyTCPolicy(levels, DyTCConfig(**cfg))
    r = R.replay(recs, costs, policy=pol)
    est = ", ".join(f"{d} {e.alpha:.2f}" for d, e in pol.alpha.items())
    print(f"{name:28s} {sum(ar.seconds.values()) / sum(r.seconds.values()):.3f}   {est}", flush=True)
orig = dytc.AcceptanceEstimator.relax
run("shipped")
def relax_mean(self, rate):
    if self.count <= self.warmup:
        return orig(self, rate)
    target = (self.prior + self._sum) / (1 + self.count)
    self.alpha += rate * (target - self.alpha)
dytc.AcceptanceEstimator.relax = relax_mean
run("relax to long-run mean")


