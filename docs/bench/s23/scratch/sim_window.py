"""DyTC's acceptance window (`DyTCConfig.window`, outcomes averaged per update) in the simulator's
worlds (tests/dytc_simulator.py: the four curves of the test, the two measured-CPU worlds the
tests pin at 3%, and this stop's measured CPU world): DyTC's tokens/s over the best fixed
schedule in hindsight, 3000 steps, seeds 1-3, per window. Usage: PYTHONPATH=tests python
sim_window.py WINDOW..."""
import sys
from dytc_simulator import CURVES, World, best_fixed, default_world, interpolated, run_dytc
from casspec_ref.dytc import PLD, RECYCLE, DyTCConfig


def cpu(curve, alpha, lookup_next, seconds):
    return World(verify=interpolated(curve), alpha=alpha, alpha_next={PLD: lookup_next},
                 draft_seconds={**seconds, PLD: 1e-5, RECYCLE: 1e-5},
                 siblings={"good": (0.3, 0.1), "cheap": (0.25, 0.1), RECYCLE: (0.2, 0.1)},
                 offer={PLD: 0.6, RECYCLE: 0.9})


S14 = {1: 0.0201, 2: 0.0208, 3: 0.0235, 4: 0.0217, 6: 0.0236, 8: 0.0259, 12: 0.0277, 16: 0.0298, 17: 0.068, 32: 0.10}
S23 = {1: 0.0267, 2: 0.0360, 3: 0.0415, 4: 0.0404, 6: 0.0440, 8: 0.0476, 12: 0.0551, 16: 0.0614, 32: 0.0951}
worlds = {name: default_world(c) for name, c in CURVES.items()}
worlds["cpu split (test)"] = cpu({1: 0.020, 2: 0.0206, 3: 0.0225, 4: 0.023, 6: 0.038, 8: 0.040, 12: 0.058, 16: 0.057, 32: 0.10},
                                 {"good": 0.76, "cheap": 0.56, PLD: 0.35, RECYCLE: 0.26}, 0.72, {"good": 0.0124, "cheap": 0.010})
worlds["cpu s14 bundled (test)"] = cpu(S14, {"good": 0.94, "cheap": 0.59, PLD: 0.26, RECYCLE: 0.30}, 0.66, {"good": 0.011, "cheap": 0.0085})
worlds["cpu s14 held-out (test)"] = cpu(S14, {"good": 0.83, "cheap": 0.59, PLD: 0.28, RECYCLE: 0.30}, 0.66, {"good": 0.011, "cheap": 0.0085})
for lookup in (0.26, 0.30, 0.37):
    worlds[f"cpu s23, lookup {lookup}"] = cpu(S23, {"good": 0.88, "cheap": 0.65, PLD: lookup, RECYCLE: 0.30}, 0.72, {"good": 0.0207, "cheap": 0.0143})
windows = [int(w) for w in sys.argv[1:]] or [20, 40]
print("world".ljust(26) + "".join(f"window {w}".rjust(26) for w in windows))
for name, world in worlds.items():
    best = {s: max(best_fixed(world, 3000, s, ["cheap", "good", PLD, RECYCLE]).values()) for s in (1, 2, 3)}
    cells = []
    for w in windows:
        r = [run_dytc(world, 3000, s, DyTCConfig(window=w))[0] / best[s] for s in (1, 2, 3)]
        cells.append(f"{sum(r) / 3:.3f} ({min(r):.3f}-{max(r):.3f})".rjust(26))
    print(name.ljust(26) + "".join(cells), flush=True)
