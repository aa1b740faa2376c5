"""Replay A/B (scratch, stop 17): when DyTC re-probes a model draft whose timing went stale (not
drafted for `explore_horizon` steps), its acceptance estimate starts a new optimistic warm-up."""
from common import load
import sys
from casspec_ref.tools import replay as R
from casspec_ref.dytc import DyTCPolicy, AcceptanceEstimator
orig_grow = DyTCPolicy.grow
def grow(self, drafter, drafts):
    if self.ready():
        for d in self.untimed(drafts):
            if len(self.draft_cost[d]) > 0:  # measured before: stale, so untested for a while
                c = self.config
                self.alpha[d] = AcceptanceEstimator(c.prior_alpha, weight=c.ema_weight, window=c.window, warmup=c.warmup)
    return orig_grow(self, drafter, drafts)
for path in sys.argv[1:-1]:
    recs, costs, levels = load(path, sys.argv[-1])
    ar = sum(R.replay(recs, costs).seconds.values())
    out = []
    for name, g in (("shipped", orig_grow), ("re-warm-up", grow)):
        DyTCPolicy.grow = g
        r = R.replay(recs, costs, policy=DyTCPolicy(levels))
        out.append(f"{name} {ar / sum(r.seconds.values()):.3f}")
    DyTCPolicy.grow = orig_grow
    print(path.split("/")[-1], sys.argv[-1].split("/")[-1], "  ".join(out), flush=True)
