# Solutions to the exercises of 00_speculative_sampling_in_one_file.ipynb.
# Each section replaces the notebook cell tagged exercise:NAME (see tutorials/exercises.py).

# %% exercise: residual
def my_residual(p, q):
    excess = [max(pi - qi, 0) for pi, qi in zip(p, q)]
    mass = sum(excess)  # the rejection probability (notebook 3 derives why)
    return [e / mass for e in excess]

# %% exercise: mean-tokens
# The law of the number of tokens one step commits, enumerated exactly; its mean.
length_law = sps.exact_law(lambda coins: len(sps.speculative_step(0, 2, coins)))
expected_tokens = sum(length * prob for length, prob in length_law.items())
