"""Is DyTC's loss on the first group warm-up? Replay each record with a fresh policy, with a
policy trained on all records first, and the rule pld-or-chain:3; per record speedups."""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "s18", "scratch"))
from common import load
from casspec_ref.tools import replay as R
from casspec_ref.dytc import DyTCPolicy
from casspec_ref.schedules import SCHEDULES, ScheduleSpec
import casspec_ref.baselines  # registers
recs, costs, levels = load(sys.argv[1], sys.argv[2])
trained = DyTCPolicy(levels); R.replay(recs, costs, policy=trained)
carried = DyTCPolicy(levels)
def rule():
    from casspec_ref.baselines.schedules import ScheduleOptions
    return SCHEDULES["pld-or-chain"](ScheduleSpec(levels=levels, n_layers=30, options=ScheduleOptions(chain_k=3)))
for i, rec in enumerate(recs[: int(sys.argv[3]) if len(sys.argv) > 3 else 6]):
    ar = sum(R.replay([rec], costs).seconds.values())
    row = [ar / sum(R.replay([rec], costs, policy=p).seconds.values()) for p in (DyTCPolicy(levels), carried, trained)]
    row.append(ar / sum(R.replay([rec], costs, schedule=rule()).seconds.values()))
    print(i, rec.category, " ".join(f"{x:.3f}" for x in row), "(fresh, carried, trained, rule)")
