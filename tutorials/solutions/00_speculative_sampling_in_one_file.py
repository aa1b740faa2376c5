# Solutions to the exercises of 00_speculative_sampling_in_one_file.ipynb.
# Each "exercise" section replaces the notebook cell tagged exercise:NAME; each "wrong" section is
# a plausible wrong answer that the check must reject (see tutorials/exercises.py).
#
# Hints to the open questions at the end of the notebook:
# 1. Show that P(emit x) <= min(p(x), q(x)) for the drafted-and-kept part of any rule that emits x
#    only when q drew it and p must be matched; sum over x.
# 2. Condition on the first drafted token x: E = 1 + sum_x min(p0(x), q0(x)) * (1 + kept(x)), with
#    kept(x) = sum_y min(p_x(y), q_x(y)).
# 3. With q = p every draft is kept: the length is k + 1 with probability 1. With disjoint
#    supports every draft is rejected: length 1.
# 4. Without the min, p/q > 1 is passed to bernoulli as a probability; the exact law's
#    probabilities no longer sum to 1.
# 5. A residual bug shows at n = 1 whenever the first drafted token can be rejected, for any k.

# %% exercise: residual
def my_residual(p, q):
    excess = [max(pi - qi, 0) for pi, qi in zip(p, q)]
    mass = sum(excess)  # the rejection probability (notebook 3 derives why)
    return [e / mass for e in excess]

# %% wrong: residual: the indicator of p > q, unnormalized
def my_residual(p, q):
    return [1 if pi > qi else 0 for pi, qi in zip(p, q)]

# %% wrong: residual: the indicator of p > q, normalized
def my_residual(p, q):
    hits = [1 if pi > qi else 0 for pi, qi in zip(p, q)]
    return [F(h, sum(hits)) for h in hits]

# %% wrong: residual: p restricted to p > q, normalized
def my_residual(p, q):
    masked = [pi if pi > qi else 0 for pi, qi in zip(p, q)]
    return [m / sum(masked) for m in masked]

# %% wrong: residual: the replacement drawn from p itself
def my_residual(p, q):
    return list(p)

# %% wrong: residual: p and q swapped, norm(max(q - p, 0))
def my_residual(p, q):
    excess = [max(qi - pi, 0) for pi, qi in zip(p, q)]
    return [e / sum(excess) for e in excess]

# %% wrong: residual: the max dropped, p - q over the rejection mass (negative entries kept)
def my_residual(p, q):
    mass = sum(max(pi - qi, 0) for pi, qi in zip(p, q))
    return [(pi - qi) / mass for pi, qi in zip(p, q)]

# %% wrong: residual: max(p - q, 0) not normalized (lecture 0's coins take a law as given)
def my_residual(p, q):
    return [max(pi - qi, 0) for pi, qi in zip(p, q)]

# %% wrong: residual: divided by the acceptance alpha instead of the rejection mass 1 - alpha
def my_residual(p, q):
    alpha = sum(min(pi, qi) for pi, qi in zip(p, q))
    return [max(pi - qi, 0) / alpha for pi, qi in zip(p, q)]

# %% wrong: residual: row 0's residual copied from the page, whatever the row
def my_residual(p, q):
    return [F(3, 4), F(1, 4), F(0)]

# %% wrong: residual: the companion file's residual called, not written
def my_residual(p, q):
    return sps.residual(p, q)

# %% exercise: mean-tokens
# The law of the number of tokens one step commits, enumerated exactly; its mean.
length_law = sps.exact_law(lambda coins: len(sps.speculative_step(0, 2, coins)))
expected_tokens = sum(length * prob for length, prob in length_law.items())

# %% wrong: mean-tokens: the geometric formula, which assumes the same acceptance everywhere
alpha0 = sum(min(p, q) for p, q in zip(sps.TARGET[0], sps.DRAFT[0]))
expected_tokens = (1 - alpha0**3) / (1 - alpha0)

# %% wrong: mean-tokens: the bonus or replacement token forgotten
length_law = sps.exact_law(lambda coins: len(sps.speculative_step(0, 2, coins)))
expected_tokens = sum((length - 1) * prob for length, prob in length_law.items())

# %% wrong: mean-tokens: the most likely length instead of the mean
length_law = sps.exact_law(lambda coins: len(sps.speculative_step(0, 2, coins)))
expected_tokens = F(max(length_law, key=length_law.get))

# %% wrong: mean-tokens: the bonus forgotten (a step that keeps both drafts counted as 2 tokens)
length_law = sps.exact_law(lambda coins: len(sps.speculative_step(0, 2, coins)))
expected_tokens = sum(min(length, 2) * prob for length, prob in length_law.items())

# %% wrong: mean-tokens: the min dropped (each draft kept with probability p/q, uncapped)
def kept_without_min(last):
    return sum(q * (p / q) for p, q in zip(sps.TARGET[last], sps.DRAFT[last]))

expected_tokens = 1 + kept_without_min(0) + sum(
    q * (p / q) * kept_without_min(x) for x, (p, q) in enumerate(zip(sps.TARGET[0], sps.DRAFT[0])))

# %% wrong: mean-tokens: the one-row world's mean for k = 2 copied from the page
expected_tokens = mean_by_k[2]

# %% wrong: mean-tokens: a float, not an exact Fraction
length_law = sps.exact_law(lambda coins: len(sps.speculative_step(0, 2, coins)))
expected_tokens = float(sum(length * prob for length, prob in length_law.items()))
