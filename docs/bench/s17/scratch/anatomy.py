"""Replay step anatomy (scratch, stop 17): per kind of step (which drafts built the tree),
steps, tokens committed, seconds, for DyTC and the rule pld-or-chain:5."""
from common import load
import sys, collections
from casspec_ref.tools import replay as R
from casspec_ref.dytc import DyTCPolicy
from casspec_ref.baselines import ScheduleOptions
from casspec_ref.schedules import SCHEDULES, ScheduleSpec
recs, costs, levels = load(sys.argv[1])
short = {levels[0]: "skip", levels[-1]: "int8", "pld": "pld", "recycle": "rec", "root": ""}
stats = collections.defaultdict(lambda: [0, 0, 0.0, 0])
orig = R.ReplayDrafter.verify
def v(self):
    accepted, tested = orig(self)
    srcs = sorted({short[s] for s in self.source[1:]})
    width = max(len(c) for c in self.children)
    kind = "+".join(srcs) or "plain"
    if width > 1:
        kind += f" (w{width})"
    s = stats[kind]
    s[0] += 1; s[1] += len(accepted) + 1
    s[2] += costs.verify_seconds(self.size()) + self.seconds() + (costs.step_overhead if self.size() > 1 else 0)
    s[3] += self.size() - 1
    return accepted, tested
R.ReplayDrafter.verify = v
def show(name, **kw):
    stats.clear()
    r = R.replay(recs, costs, **kw)
    ar = R.replay(recs, costs)
    print(f"\n{name}: {sum(ar.seconds.values())/sum(r.seconds.values()):.3f}x, {r.steps} steps")
    plain_rate = 1 / costs.verify_seconds(1)
    for kind, (n, tok, sec, nodes) in sorted(stats.items(), key=lambda kv: -kv[1][2]):
        print(f"  {kind:22s} steps {n:5d}  tokens/step {tok/n:5.2f}  nodes/step {nodes/n:5.1f}  ms/step {sec/n*1e3:6.1f}  rate vs plain {tok/sec/plain_rate:5.2f}  share of time {sec/sum(r.seconds.values()):5.1%}")
show("cas-spec", policy=DyTCPolicy(levels))
show("pld-or-chain:5", schedule=SCHEDULES["pld-or-chain"](ScheduleSpec(levels, 0, options=ScheduleOptions(chain_k=5))))
