# Solutions to the exercises of 03_speculative_sampling_is_exact.ipynb.
# Each "exercise" section replaces the notebook cell tagged exercise:NAME; each "wrong" section is
# a plausible wrong answer that the check must reject (see tutorials/exercises.py).
#
# Hints to the open questions at the end of the notebook:
# 1. Suppose a replacement law s makes the output p; solve q(y) min(1, p/q) + (1 - alpha) s(y) =
#    p(y) for s.
# 2. The standard error is sqrt(p(1 - p)/N); 5 of them at N = 20 000 is about 0.015 on p = 0.25.
# 3. Correlated coins make the replacement depend on the acceptance coin; enumerate with exact_law
#    to see the law move.
# 4. Sampling outputs depend on the coins each loop consumes; the law of the output is what must
#    be the same.

# %% exercise: rejection-mass
def rejection_probability(p, q):
    # x is drafted with probability q(x) and then rejected with probability 1 - min(1, p(x)/q(x)).
    return sum(qx * (1 - min(F(1), px / qx)) for px, qx in zip(p, q) if qx > 0)

# %% wrong: rejection-mass: the min forgotten (q(x) (1 - p(x)/q(x)) sums to 0)
def rejection_probability(p, q):
    return sum(qx * (1 - px / qx) for px, qx in zip(p, q) if qx > 0)

# %% wrong: rejection-mass: the L1 distance, twice the total variation
def rejection_probability(p, q):
    return sum(abs(px - qx) for px, qx in zip(p, q))

# %% exercise: subtle-bug
def subtle_step(rng):
    x = rng.categorical(q)
    # BUG: the acceptance probability is 1% too small, so the residual gets 1% of alpha too much.
    if rng.bernoulli(min(F(1), p[x] / q[x]) * F(99, 100)):
        return x
    return rng.categorical(residual)

# %% wrong: subtle-bug: a faithful copy, which changes nothing
def subtle_step(rng):
    x = rng.categorical(q)
    if rng.bernoulli(min(F(1), p[x] / q[x])):
        return x
    return rng.categorical(residual)

# %% wrong: subtle-bug: the replacement drawn from p, a bug sampling sees too
def subtle_step(rng):
    x = rng.categorical(q)
    if rng.bernoulli(min(F(1), p[x] / q[x])):
        return x
    return rng.categorical(p)
