"""Why DyTC trails prompt lookup in the simulator's world of this stop's CPU: DyTC with prompt
lookup as its only draft (so only the lookup's handling is measured), 3000 steps, seeds 1-3,
against lookup at k = 5 in the same world. Prints the ratio, how many offered lookups DyTC
declined (drafted nothing although a lookup was offered), the k it drafted when offered, and
the spread of its estimate of a lookup's first token (true 0.30).
World: the verify curve recosted this stop (costs_s23.json), lookup offered at 60% of steps,
first token 0.30, continuation 0.72 (as the real model's held-out records show).
Usage: PYTHONPATH=tests python lookup_declines.py [WINDOW]"""
import collections, random, statistics, sys
from dytc_simulator import SimDrafter, World, interpolated, run_fixed
from casspec_ref.dytc import PLD, RECYCLE, DyTCConfig, DyTCPolicy

CURVE = {1: 0.0267, 2: 0.0360, 3: 0.0415, 4: 0.0404, 6: 0.0440, 8: 0.0476, 12: 0.0551, 16: 0.0614, 32: 0.0951}
world = World(verify=interpolated(CURVE), alpha={PLD: 0.30, RECYCLE: 0.30}, alpha_next={PLD: 0.72},
              draft_seconds={PLD: 1e-5, RECYCLE: 1e-5}, offer={PLD: 0.6})
cfg = DyTCConfig(window=int(sys.argv[1])) if len(sys.argv) > 1 else DyTCConfig()
print(f"window {cfg.window}")
for seed in (1, 2, 3):
    rng = random.Random(seed)
    policy = DyTCPolicy([], cfg)
    declined, offered, ks, estimates, tokens, seconds = 0, 0, collections.Counter(), [], 0, 0.0
    for _ in range(3000):
        d = SimDrafter(world, rng, cfg.max_tree_size, cfg.max_depth)
        policy.grow(d, (PLD,))
        if d._offers.get((0, PLD), 0):
            offered += 1
            declined += d.size() == 1
            ks[d.size() - 1] += 1
        tested, committed = d.verify()
        verify = world.verify(d.size()) * (1 + world.noise * rng.uniform(-1, 1))
        policy.observe_step(tested, d.size(), verify, {x: (d.calls[x], d.draft_time[x]) for x in d.calls})
        estimates.append(policy.alpha[PLD].alpha)
        tokens += committed
        seconds += d.seconds() + verify
    q = statistics.quantiles(estimates, n=20)
    print(f"seed {seed}: {tokens / seconds / run_fixed(world, 3000, seed, PLD, 5):.3f} of pld k=5; "
          f"declined {declined} of {offered} offered; k when offered {dict(sorted(ks.items()))}; "
          f"estimate median {statistics.median(estimates):.2f}, 5-95% {q[0]:.2f}-{q[-1]:.2f}")
