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
def rejected_mass(p, q):
    # x is drafted with probability q(x), then rejected with probability 1 - min(1, p(x)/q(x)):
    # together q(x) - min(p(x), q(x)) = max(q(x) - p(x), 0), on the tokens q proposes too often.
    return [qx * (1 - min(F(1), px / qx)) if qx > 0 else F(0) for px, qx in zip(p, q)]

# %% wrong: rejection-mass: p and q swapped, p(x)(1 - min(1, q(x)/p(x))) (the residual's side; same total)
def rejected_mass(p, q):
    return [px * (1 - min(F(1), qx / px)) if px > 0 else F(0) for px, qx in zip(p, q)]

# %% wrong: rejection-mass: the min dropped, q(x)(1 - p(x)/q(x)) = q(x) - p(x), negative where p > q
def rejected_mass(p, q):
    return [qx * (1 - px / qx) if qx > 0 else F(0) for px, qx in zip(p, q)]

# %% wrong: rejection-mass: the probability of rejecting x once drafted, not multiplied by q(x)
def rejected_mass(p, q):
    return [1 - min(F(1), px / qx) if qx > 0 else F(0) for px, qx in zip(p, q)]

# %% wrong: rejection-mass: normalized like the residual (a law over the rejected tokens)
def rejected_mass(p, q):
    excess = [max(qx - px, 0) for px, qx in zip(p, q)]
    return [e / sum(excess) for e in excess]

# %% wrong: rejection-mass: the per-token L1 distance |p(x) - q(x)|
def rejected_mass(p, q):
    return [abs(px - qx) for px, qx in zip(p, q)]

# %% wrong: rejection-mass: the page's p and q used, not the arguments
def rejected_mass(p_given, q_given):
    return [q[x] * (1 - accept[x]) for x in range(4)]

# %% wrong: rejection-mass: the total P(reject) returned, not one probability per token
def rejected_mass(p, q):
    return sum(max(px - qx, 0) for px, qx in zip(p, q))

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

# %% wrong: subtle-bug: a perturbed p sampled directly, with no draft and no verification
def subtle_step(rng):
    return rng.categorical(np.array([p[0] - F(1, 200), p[1] + F(1, 200), p[2], p[3]], dtype=object))

# %% wrong: subtle-bug: the draft drawn from q, then ignored: the token drawn from a perturbed p
def subtle_step(rng):
    x = rng.categorical(q)
    return rng.categorical(np.array([p[0] - F(1, 200), p[1] + F(1, 200), p[2], p[3]], dtype=object))

# %% wrong: subtle-bug: p and q swapped in the acceptance ratio (a bug sampling sees)
def subtle_step(rng):
    x = rng.categorical(q)
    if rng.bernoulli(min(F(1), q[x] / p[x])):
        return x
    return rng.categorical(residual)
