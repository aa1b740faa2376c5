"""The relax rule in the simulator's worlds (those of s23/scratch/sim_window.py): DyTC's tokens/s
over the best fixed schedule in hindsight, 3000 steps, seeds 1-3, with an estimate relaxed on
every step it is not tested (old: the drafter reports no drafted names) and only on steps its
draft was not used (new). Run in a checkout with relax_unused.diff applied. Usage: PYTHONPATH=tests python
sim_relax.py"""
import importlib.util, os, sys
import dytc_simulator
from dytc_simulator import best_fixed, run_dytc, SimDrafter
from casspec_ref.dytc import PLD, RECYCLE

spec = importlib.util.spec_from_file_location("w", os.path.join(os.path.dirname(__file__), "../../s23/scratch/sim_window.py"))
src = open(spec.origin).read().split("windows = ")[0]  # the worlds only
ns = {"__name__": "worlds"}
exec(src, ns)
worlds = ns["worlds"]
new_drafted = SimDrafter.drafted
print("world".ljust(26) + "old (untested)".rjust(26) + "new (unused)".rjust(26))
for name, world in worlds.items():
    best = {s: max(best_fixed(world, 3000, s, ["cheap", "good", PLD, RECYCLE]).values()) for s in (1, 2, 3)}
    cells = []
    for variant in ("old", "new"):
        SimDrafter.drafted = (lambda self: []) if variant == "old" else new_drafted
        r = [run_dytc(world, 3000, s)[0] / best[s] for s in (1, 2, 3)]
        cells.append(f"{sum(r) / 3:.3f} ({min(r):.3f}-{max(r):.3f})".rjust(26))
    print(name.ljust(26) + "".join(cells), flush=True)
