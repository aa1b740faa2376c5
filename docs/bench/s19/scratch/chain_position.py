"""In a replay of the package's DyTC (scratch, stop 19): the int8 level's tested outcomes split by
whether the token starts a chain (its parent was not drafted by the level) or continues one, and
the pooled estimate's mean over the steps, against the acceptance of what was tested."""
import os, sys, statistics
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "s18", "scratch"))
from common import load
from casspec_ref.tools import replay as R
from casspec_ref.dytc import DyTCPolicy
recs, costs, levels = load(sys.argv[1], sys.argv[2])
top = levels[-1]
stats = {"first": [], "cont": []}
orig = R.ReplayDrafter.verify
def verify(self):
    acc, tested = orig(self)
    answer, node = self.rec.answer, 0
    while True:
        nxt = None
        for child in self.children[node]:
            i = self.index[child]
            ok = i < len(answer) and self.tokens[child] == answer[i]
            if self.primary[child] and self.source[child] == top:
                stats["cont" if self.source[node] == top else "first"].append(ok)
            nxt = child if ok and nxt is None else nxt
        if nxt is None:
            break
        node = nxt
    return acc, tested
R.ReplayDrafter.verify = verify
pol = DyTCPolicy(levels)
trace = []
og = DyTCPolicy.observe_step
def obs(self, *a):
    og(self, *a); trace.append(self.alpha[top].alpha)
DyTCPolicy.observe_step = obs
R.replay(recs, costs, policy=pol)
for k, v in stats.items():
    print(f"{k:6s} tested {len(v):5d} accepted {sum(v) / len(v):.3f}")
print(f"pooled estimate: mean over steps {statistics.mean(trace):.3f}, median {statistics.median(trace):.3f}, final {trace[-1]:.3f}")
