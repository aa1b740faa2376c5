import json, sys, types
import casspec_ref.tools.replay as rp
from casspec_ref.dytc import DyTCPolicy
from casspec_ref.tools.replay import Costs, Recorded, replay, lookup_or_chain_schedule
for path in sys.argv[1:]:
    data = json.load(open(path)); recs = [Recorded(**r) for r in data["records"]]; raw = data["costs"]
    costs = Costs({int(t): s for t, s in raw["verify"].items()}, raw["draft"])
    levels = list(recs[0].drafts)
    ar = sum(replay(recs, costs).seconds.values())
    real = sum(replay(recs, costs, policy=DyTCPolicy(levels)).seconds.values())
    rp.time = types.SimpleNamespace(perf_counter=lambda: 0.0)
    free = sum(replay(recs, costs, policy=DyTCPolicy(levels)).seconds.values())
    import time as _t; rp.time = _t
    print(path, f"dytc {ar/real:.3f}  dytc with free thinking {ar/free:.3f}")
