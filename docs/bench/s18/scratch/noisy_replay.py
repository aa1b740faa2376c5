"""Replay with timing noise (scratch, stop 18): DyTC observes every timing (verify forwards and
draft calls) times a lognormal factor (sigma) and, with probability `spike`, a stall of 1.5-3x;
the clock charges the noiseless costs, so two runs differ only by what the noise made DyTC
decide. Per seed: speedup over the naive loop and the int8 level's tested outcomes; variants
patch DyTC in-process. Usage: noisy_replay.py RECORD COSTS [variant ...]; the environment's
SIGMA and SPIKE override the defaults (0.035 and 0.005, this machine's, `timing_noise.txt`)."""
import math, os, random, statistics, sys
from common import load
from casspec_ref.tools import replay as R
from casspec_ref.dytc import DyTCPolicy, AcceptanceEstimator

SIGMA, SPIKE, SEEDS = float(os.environ.get("SIGMA", 0.035)), float(os.environ.get("SPIKE", 0.005)), 12
orig_observe = DyTCPolicy.observe_step

def noisy(rng):
    def f(s):
        s *= math.exp(rng.gauss(0.0, SIGMA))
        return s * rng.uniform(1.5, 3.0) if rng.random() < SPIKE else s
    return f

def run(recs, costs, levels, seed, variant):
    rng = random.Random(seed)
    f = noisy(rng) if seed >= 0 else (lambda s: s)
    def observe_step(self, tested, tokens, seconds, timings):
        timings = {k: (c, f(s) if c else s) for k, (c, s) in timings.items()}
        return orig_observe(self, tested, tokens, f(seconds), timings)
    DyTCPolicy.observe_step = observe_step
    policy = DyTCPolicy(levels)
    undo = VARIANTS[variant](policy)
    try:
        r = R.replay(recs, costs, policy=policy, lookup=LOOKUP.get(variant))
    finally:
        DyTCPolicy.observe_step = orig_observe
        undo()
    return r, policy

def shipped(policy):
    return lambda: None

import collections
from casspec_ref.dytc import CostCurve
def median_costs(n):
    """Each size's estimate: the median of its last n timings (a stale size starts afresh)."""
    def patch(policy):
        orig = CostCurve.observe
        def observe(self, tokens, seconds):
            hist = self.__dict__.setdefault("_hist", {})
            if self.stale(tokens):
                hist[tokens] = collections.deque(maxlen=n)
            hist.setdefault(tokens, collections.deque(maxlen=n)).append(seconds)
            self.seconds[tokens] = statistics.median(hist[tokens])
            self._last_seen[tokens] = self._now
        CostCurve.observe = observe
        return lambda: setattr(CostCurve, "observe", orig)
    return patch
def clipped(limit):
    """The EMA, each timing first clipped to within `limit` (relative) of the estimate."""
    def patch(policy):
        orig = CostCurve.observe
        def observe(self, tokens, seconds):
            old = None if self.stale(tokens) else self.seconds.get(tokens)
            if old is not None:
                seconds = min(max(seconds, old / (1 + limit)), old * (1 + limit))
            orig(self, tokens, seconds)
        CostCurve.observe = observe
        return lambda: setattr(CostCurve, "observe", orig)
    return patch
from casspec_ref.dsia.prompt_lookup import PromptLookupConfig
LOOKUP = {"min_ngram2": PromptLookupConfig(min_ngram=2), "min_ngram2+relax": PromptLookupConfig(min_ngram=2), "clip0.2+min_ngram2": PromptLookupConfig(min_ngram=2)}
def relax_up_mean(policy):
    """An untested estimate below the draft's long-run mean (or its prior, if higher) relaxes
    up toward it: a bad stretch is forgotten at the rate a draft below its prior is."""
    orig = AcceptanceEstimator.relax
    def relax(self, rate):
        target = max(self.prior, (self.prior + self._sum) / (1 + self.count))
        if self.alpha < target:
            self.alpha += rate * (target - self.alpha)
    AcceptanceEstimator.relax = relax
    return lambda: setattr(AcceptanceEstimator, "relax", orig)
def both(*patches):
    def patch(policy):
        undos = [p(policy) for p in patches]
        return lambda: [u() for u in undos]
    return patch
def per_ngram(policy):
    """Stop 16's per-match-length patch; for the code before 2c3b3d9 (the package has its own since)."""
    import ngram_patch  # patches on import: only when asked for
    ngram_patch.STATE["on"] = True
    return lambda: ngram_patch.STATE.update(on=False)
VARIANTS = {"shipped": shipped, "per_ngram": per_ngram, "relax_up_mean": relax_up_mean,
            "per_ngram+relax": both(per_ngram, relax_up_mean), "min_ngram2+relax": relax_up_mean, "min_ngram2": shipped, "clip0.2+min_ngram2": clipped(0.2), "median3": median_costs(3), "median5": median_costs(5),
            "clip0.2": clipped(0.2), "clip0.5": clipped(0.5)}
if __name__ == "__main__":
    recs, costs, levels = load(sys.argv[1], sys.argv[2])
    ar = sum(R.replay(recs, costs).seconds.values())
    for variant in sys.argv[3:] or ["shipped"]:
        sp, outs = [], []
        for seed in [-1, *range(SEEDS)]:
            r, pol = run(recs, costs, levels, seed, variant)
            sp.append(ar / sum(r.seconds.values()))
            outs.append(pol.alpha[levels[-1]].count)
        noisy_sp = sp[1:]
        print(f"{variant:14s} noiseless {sp[0]:.3f} | noisy median {statistics.median(noisy_sp):.3f} "
              f"min {min(noisy_sp):.3f} max {max(noisy_sp):.3f} | int8 outcomes noiseless {outs[0]}, "
              f"noisy min {min(outs[1:])} median {statistics.median(outs[1:])}", flush=True)
