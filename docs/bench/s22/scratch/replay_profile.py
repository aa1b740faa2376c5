"""DyTC's decisions profiled in a replay of a recorded set (the real model's pattern: margins known,
one-token expansions). Usage: python replay_profile.py RECORD COSTS"""
import cProfile, json, pstats, sys, time
from casspec_ref.dytc import DyTCPolicy
from casspec_ref.tools.replay import Costs, Recorded, replay

data = json.load(open(sys.argv[1]))
records = [Recorded(**r) for r in data["records"]]
costs = Costs.from_json(json.load(open(sys.argv[2]))["costs"], draft_overhead=1e-3, step_overhead=3e-3)
levels = list(records[0].drafts)
orig = DyTCPolicy.grow
spent = [0.0, 0]
def timed(self, d, drafts):
    t = time.perf_counter(); out = orig(self, d, drafts); spent[0] += time.perf_counter() - t; spent[1] += 1; return out
DyTCPolicy.grow = timed
run = replay(records, costs, policy=DyTCPolicy(levels))
print(f"grow: {spent[1]} steps, {1e3 * spent[0] / spent[1]:.3f} ms a step (Python, replay drafter)")
spent[:] = [0.0, 0]
pr = cProfile.Profile(); pr.enable(); replay(records, costs, policy=DyTCPolicy(levels)); pr.disable()
pstats.Stats(pr).sort_stats("tottime").print_stats(15)
