"""Where a replay's time goes, per method: steps, draft calls by level, verify rows, accepted
tokens, seconds by part. Usage: anatomy.py RECORD COSTS (DyTC variants from variants19)."""
import os, sys, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import variants19 as V
import oracles as O
R = V.NR.R
recs, costs, levels = V.NR.load(sys.argv[1], sys.argv[2])
stats = collections.Counter()
orig_verify = R.ReplayDrafter.verify
def verify(self):
    acc, tested = orig_verify(self)
    stats["steps"] += 1; stats["rows"] += self.size(); stats["accepted"] += len(acc)
    for name, (calls, s) in self.charged.items():
        stats[f"calls {name}"] += calls; stats[f"sec {name}"] += s
    srcs = collections.Counter(self.source[n] for n in acc)
    for k, v in srcs.items(): stats[f"acc {k}"] += v
    stats["sec verify"] += costs.verify_seconds(self.size())
    return acc, tested
R.ReplayDrafter.verify = verify
ar = sum(R.replay(recs, costs).seconds.values())
def show(name, r):
    print(f"== {name}: {ar / sum(r.seconds.values()):.3f}")
    print("  ", {k: (round(v, 2) if isinstance(v, float) else v) for k, v in sorted(stats.items())})
    stats.clear()
stats.clear()
show("margin-stop 0.05 k8", R.replay(recs, costs, schedule=O.ConfStop(0, 8, 0.05)))
show("rule k3", R.replay(recs, costs, schedule=O.ConfStop(0, 3, 0.0)))
for var in sys.argv[3:]:
    import random
    pol = V.NR.DyTCPolicy(levels); undo = V.NR.VARIANTS[var](pol)
    try:
        show(var, R.replay(recs, costs, policy=pol))
    finally:
        undo()
