"""Replay A/B (scratch, stop 17): when DyTC re-probes a model draft whose timing went stale (not
drafted for `explore_horizon` steps), its acceptance estimate starts a new optimistic warm-up."""
import json, sys
from functools import partial
from casspec_ref.tools import replay as R
from casspec_ref import dytc
from casspec_ref.dytc import DyTCPolicy, DyTCConfig, AcceptanceEstimator
orig_grow = DyTCPolicy.grow
def grow(self, drafter, drafts):
    if self.ready():
        for d in self.untimed(drafts):
            if len(self.draft_cost[d]) > 0:  # measured before: stale, so untested for a while
                c = self.config
                self.alpha[d] = AcceptanceEstimator(c.prior_alpha, weight=c.ema_weight, window=c.window, warmup=c.warmup)
    return orig_grow(self, drafter, drafts)
for path in sys.argv[1:-1]:
    data = json.load(open(path))
    recs = [R.Recorded(**r) for r in data["records"]]
    raw = json.load(open(sys.argv[-1]))["costs"]
    costs = R.Costs({int(t): s for t, s in raw["verify"].items()}, raw["draft"])
    levels = list(recs[0].drafts)
    ar = sum(R.replay(recs, costs).seconds.values())
    out = []
    for name, g in (("shipped", orig_grow), ("re-warm-up", grow)):
        DyTCPolicy.grow = g
        r = R.replay(recs, costs, policy=DyTCPolicy(levels))
        out.append(f"{name} {ar / sum(r.seconds.values()):.3f}")
    DyTCPolicy.grow = orig_grow
    print(path.split("/")[-1], sys.argv[-1].split("/")[-1], "  ".join(out), flush=True)
