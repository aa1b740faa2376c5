# Solutions to the exercises of 03_speculative_sampling_is_exact.ipynb.
# Each section replaces the notebook cell tagged exercise:NAME (see tutorials/exercises.py).

# %% exercise: rejection-mass
def rejection_probability(p, q):
    # x is drafted with probability q(x) and then rejected with probability 1 - min(1, p(x)/q(x)).
    return sum(qx * (1 - min(F(1), px / qx)) for px, qx in zip(p, q) if qx > 0)

# %% exercise: subtle-bug
def subtle_step(rng):
    x = rng.categorical(q)
    # BUG: the acceptance probability is 1% too small, so the residual gets 1% of alpha too much.
    if rng.bernoulli(min(F(1), p[x] / q[x]) * F(99, 100)):
        return x
    return rng.categorical(residual)
