import sys
sys.path.insert(0, "/work/main/tests")
from dytc_simulator import World, default_world, interpolated, run_dytc, best_fixed, CURVES
from casspec_ref.dytc import PLD, RECYCLE, DyTCPolicy, DyTCConfig
def measured(curve, alpha, nxt, secs):
    return World(verify=interpolated(curve), alpha=alpha, alpha_next={PLD: nxt},
                 draft_seconds={**secs, PLD: 1e-5, RECYCLE: 1e-5},
                 siblings={"good": (0.3, 0.1), "cheap": (0.25, 0.1), RECYCLE: (0.2, 0.1)},
                 offer={PLD: 0.6, RECYCLE: 0.9})
worlds = {name: default_world(c) for name, c in CURVES.items()}
split = {1: 0.020, 2: 0.0206, 3: 0.0225, 4: 0.023, 6: 0.038, 8: 0.040, 12: 0.058, 16: 0.057, 32: 0.10}
worlds["measured CPU, split kernel"] = measured(split, {"good": 0.76, "cheap": 0.56, PLD: 0.35, RECYCLE: 0.26}, 0.72, {"good": 0.0124, "cheap": 0.010})
packed = {1: 0.0201, 2: 0.0208, 3: 0.0235, 4: 0.0217, 6: 0.0236, 8: 0.0259, 12: 0.0277, 16: 0.0298, 17: 0.068, 32: 0.10}
for tag, good, lk in (("bundled", 0.94, 0.26), ("held-out", 0.83, 0.28)):
    worlds[f"packed curve, {tag} alphas"] = measured(packed, {"good": good, "cheap": 0.59, PLD: lk, RECYCLE: 0.30}, 0.66, {"good": 0.011, "cheap": 0.0085})
s15 = {1: 0.0171, 2: 0.0210, 3: 0.0244, 4: 0.0226, 5: 0.0226, 6: 0.0248, 7: 0.0265, 8: 0.0315, 9: 0.0271, 10: 0.0286, 12: 0.0308, 14: 0.0315, 15: 0.0336, 17: 0.09, 32: 0.0935}
worlds["s15 bench curve"] = measured(s15, {"good": 0.92, "cheap": 0.59, PLD: 0.27, RECYCLE: 0.35}, 0.60, {"good": 0.0100, "cheap": 0.0075})
worlds["s15 curve, bad model drafts"] = measured(s15, {"good": 0.35, "cheap": 0.2, PLD: 0.27, RECYCLE: 0.35}, 0.60, {"good": 0.0100, "cheap": 0.0075})
priors = [float(p) for p in sys.argv[1:]] or [0.6, 0.9]
print(f"{'world':36s} {'best fixed':>12s} " + " ".join(f"p{p:<4} s1  p{p:<4} s2" for p in priors))
for name, w in worlds.items():
    row = []
    for p in priors:
        for seed in (1, 2):
            d, pol, _ = run_dytc(w, 3000, seed, DyTCConfig(prior_alpha=p))
            f = best_fixed(w, 3000, seed, ["cheap", "good", PLD, RECYCLE])
            b = max(f, key=f.get)
            row.append(d / f[b])
    print(f"{name:36s} {b:>12s} " + " ".join(f"{x:9.3f}" for x in row), flush=True)
