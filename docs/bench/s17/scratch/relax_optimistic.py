"""Replay A/B (scratch, stop 17): an untested estimate relaxes toward 1 (optimism: a draft not
tested for a while is tried again) instead of up toward the prior only (shipped)."""
from common import load
import sys
from casspec_ref.tools import replay as R
from casspec_ref import dytc
from casspec_ref.dytc import DyTCPolicy, DyTCConfig
shipped = dytc.AcceptanceEstimator.relax
def optimistic(self, rate):
    self.alpha += rate * (1.0 - self.alpha)
for path in sys.argv[1:-1]:
    recs, costs, levels = load(path, sys.argv[-1])
    ar = sum(R.replay(recs, costs).seconds.values())
    out = []
    for name, rule, rate in [("shipped", shipped, 0.02), ("to 1, 0.02", optimistic, 0.02), ("to 1, 0.01", optimistic, 0.01), ("to 1, 0.005", optimistic, 0.005)]:
        dytc.AcceptanceEstimator.relax = rule
        r = R.replay(recs, costs, policy=DyTCPolicy(levels, DyTCConfig(reexplore=rate)))
        out.append(f"{name} {ar / sum(r.seconds.values()):.3f}")
    print(path.split("/")[-1], sys.argv[-1].split("/")[-1], "  ".join(out), flush=True)
