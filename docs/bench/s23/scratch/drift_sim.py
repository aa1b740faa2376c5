"""DyTC in tests/dytc_simulator.py's worlds on a host whose speed drifts (every cost, verify and
drafts, multiplied by the host's slowness at that step: a square wave between 1 and 1.5, or a
one-way step to 1.5 or to 1/1.5 at step 300), before and after a change of DyTC ('before': dytc.py
of the commit given, default 35bdc5b; 'after': the working tree's). Reports DyTC's tokens/s over the best fixed schedule in
hindsight in the same drifting world (min over seeds 1-2), and the learned c of the good draft
(median, 5-95%) against its true c. Usage: PYTHONPATH=tests python drift_sim.py [steps] [before-commit]"""
import dataclasses, random, subprocess, sys, statistics, types
from dytc_simulator import CURVES, SimDrafter, World, default_world, interpolated
from casspec_ref.dytc import PLD, RECYCLE, DyTCConfig, DyTCPolicy

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 1500
DRAFTS = ("cheap", "good", PLD, RECYCLE)
# 'before': dytc.py as of the commit given (default 35bdc5b, stop 22's), loaded beside the current.
OLD_REV = sys.argv[2] if len(sys.argv) > 2 else "35bdc5b"
_src = subprocess.run(["git", "show", f"{OLD_REV}:casspec_ref/dytc.py"], capture_output=True, text=True, check=True).stdout
_old = types.ModuleType("dytc_before"); sys.modules["dytc_before"] = _old
exec(compile(_src, "dytc_before.py", "exec"), _old.__dict__)
POLICY = {"before": _old.DyTCPolicy, "after": DyTCPolicy}
CONFIG = {"before": _old.DyTCConfig, "after": DyTCConfig}


def at(world, slow):
    return dataclasses.replace(world, verify=lambda t, v=world.verify: slow * v(t),
                               draft_seconds={k: slow * s for k, s in world.draft_seconds.items()})


def run(world, slowness, seed, fixed=None, version="after"):
    rng = random.Random(seed)
    policy = None if fixed is not None else POLICY[version](["cheap", "good"], CONFIG[version]())
    tokens = seconds = 0.0
    cs = []
    for step in range(STEPS):
        w = at(world, slowness(step))
        if policy is not None:
            d = SimDrafter(w, rng, policy.config.max_tree_size, policy.config.max_depth)
            policy.grow(d, DRAFTS)
        else:
            d = SimDrafter(w, rng, 64, 64)
            draft, k = fixed
            if draft is not None and (draft not in (PLD, RECYCLE) or d.offers(0, draft)):
                d.expand(0, draft, k, 1)
        tested, committed = d.verify()
        verify = w.verify(d.size()) * (1 + w.noise * rng.uniform(-1, 1))
        if policy is not None:
            policy.observe_step(tested, d.size(), verify, {x: (d.calls[x], d.draft_time[x]) for x in d.calls})
            if step > 100 and len(policy.draft_cost["good"]):
                cs.append(policy.cost("good"))
        tokens += committed
        seconds += d.seconds() + verify
    return tokens / seconds, cs


def square(amp, period):
    return lambda step: amp if (step // period) % 2 else 1.0


worlds = {name: default_world(c) for name, c in CURVES.items()}
worlds["cpu (stop 14)"] = World(
    verify=interpolated({1: 0.0201, 2: 0.0208, 3: 0.0235, 4: 0.0217, 6: 0.0236, 8: 0.0259, 12: 0.0277, 16: 0.0298, 17: 0.068, 32: 0.10}),
    alpha={"good": 0.83, "cheap": 0.59, PLD: 0.28, RECYCLE: 0.30}, alpha_next={PLD: 0.66},
    draft_seconds={"good": 0.011, "cheap": 0.0085, PLD: 1e-5, RECYCLE: 1e-5},
    siblings={"good": (0.3, 0.1), "cheap": (0.25, 0.1), RECYCLE: (0.2, 0.1)}, offer={PLD: 0.6, RECYCLE: 0.9})
worlds["cpu (stop 23)"] = World(  # this stop's curve (verify_curve, `after`), lookups as measured
    verify=interpolated({1: 0.0259, 2: 0.0389, 3: 0.0409, 4: 0.0368, 6: 0.0398, 8: 0.0471, 12: 0.0528, 16: 0.0636, 24: 0.0761, 32: 0.0951}),
    alpha={"good": 0.88, "cheap": 0.65, PLD: 0.3, RECYCLE: 0.3}, alpha_next={PLD: 0.72},
    draft_seconds={"good": 0.020, "cheap": 0.016, PLD: 1e-5, RECYCLE: 1e-5},
    siblings={"good": (0.3, 0.1), "cheap": (0.25, 0.1), RECYCLE: (0.2, 0.1)}, offer={PLD: 0.6, RECYCLE: 0.9})
drifts = {"none": lambda s: 1.0, "x1.5 every 100": square(1.5, 100),
          "x1.5 every 500": square(1.5, 500),
          "to x1.5 at 300": lambda s: 1.5 if s >= 300 else 1.0,
          "to x0.67 at 300": lambda s: 1 / 1.5 if s >= 300 else 1.0}
print(f"{STEPS} steps, seeds 1-2; DyTC tokens/s over the best fixed schedule in the same world "
      "(min of seeds); learned c of 'good' (median, 5-95%)")
for wname, world in worlds.items():
    true_c = world.draft_seconds["good"] / world.verify(1)
    for dname, slow in drifts.items():
        cells = []
        for version in ("before", "after"):
            ratios, cs = [], []
            for seed in (1, 2):
                best = max(run(world, slow, seed, fixed=f)[0] for f in [(None, 0)] + [(d, k) for d in DRAFTS for k in range(1, 9)])
                r, c = run(world, slow, seed, version=version)
                ratios.append(r / best); cs += c
            q = statistics.quantiles(cs, n=20) if len(cs) > 20 else [float("nan")] * 19
            cells.append(f"{version}: {min(ratios):.3f} c {statistics.median(cs) if cs else float('nan'):.2f} ({q[0]:.2f}-{q[-1]:.2f})")
        print(f"{wname:16s} {dname:16s} true c {true_c:.2f} | " + " | ".join(cells), flush=True)
