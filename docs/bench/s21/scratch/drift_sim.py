"""DyTC in tests/dytc_simulator.py's worlds on a machine whose speed drifts: every cost (verify
and drafts) is multiplied by the host's slowness at that step, a square wave between 1 and
`amp` with half-period `period` steps. host_weight 0 (the policy before: one running estimate
per size and per draft, in seconds) against host_weight 0.3 (curves at speed 1, divided by the
learned speed). Reports DyTC's tokens/s over the best fixed schedule in hindsight in the same
drifting world, and the learned c of the good draft against its true c.
Usage: PYTHONPATH=tests python drift_sim.py [steps]"""
import dataclasses, random, sys, statistics
from dytc_simulator import CURVES, SimDrafter, World, default_world, interpolated
from casspec_ref.dytc import PLD, RECYCLE, DyTCConfig, DyTCPolicy

STEPS = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
DRAFTS = ("cheap", "good", PLD, RECYCLE)

def at(world, slow):
    return dataclasses.replace(world, verify=lambda t, v=world.verify: slow * v(t),
                               draft_seconds={k: slow * s for k, s in world.draft_seconds.items()})

def run(world, slowness, seed, host_weight=None, fixed=None):
    rng = random.Random(seed)
    policy = None
    if fixed is None:
        cfg = DyTCConfig() if host_weight is None else DyTCConfig(host_weight=host_weight)
        policy = DyTCPolicy(["cheap", "good"], cfg)
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
drifts = {"none": lambda s: 1.0, "x1.5 every 20": square(1.5, 20), "x1.5 every 100": square(1.5, 100),
          "x1.5 every 500": square(1.5, 500)}
print(f"{STEPS} steps, seeds 1-2; DyTC tokens/s over the best fixed schedule in the same world (min of seeds); learned c of 'good' (median, 5-95%)")
for wname, world in worlds.items():
    true_c = world.draft_seconds["good"] / world.verify(1)
    for dname, slow in drifts.items():
        cells = []
        for hw in (0.0, 0.3):
            ratios, cs = [], []
            for seed in (1, 2):
                best = max(run(world, slow, seed, fixed=f)[0] for f in [(None, 0)] + [(d, k) for d in DRAFTS for k in range(1, 9)])
                r, c = run(world, slow, seed, host_weight=hw)
                ratios.append(r / best); cs += c
            q = statistics.quantiles(cs, n=20) if len(cs) > 20 else [float("nan")] * 19
            cells.append(f"hw {hw}: {min(ratios):.3f} c {statistics.median(cs) if cs else float('nan'):.2f} ({q[0]:.2f}-{q[-1]:.2f})")
        print(f"{wname:16s} {dname:15s} true c {true_c:.2f} | " + " | ".join(cells), flush=True)
