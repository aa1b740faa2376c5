# Solutions to the exercises of 04_dsia_alpha_and_c.ipynb.
# Each "exercise" section replaces the notebook cell tagged exercise:NAME; each "wrong" section is
# a plausible wrong answer that the check must reject (see tutorials/exercises.py).
#
# Hints to the open questions at the end of the notebook:
# 1. EWIF(K) = (1 - a^(K+1)) / ((1 - a)(cK + 1)); look at the ratio EWIF(K+1)/EWIF(K). EWIF(K) > 1
#    iff a + a^2 + ... + a^K > cK, and each a^i <= a: so never when a <= c, and at K = 1 when
#    a > c. K* says how much the draft pays, not whether.
# 2. Use early_exit_plan(config, n) for n in (20, 25, 28) and scorer.matchness.
# 3. The draft's own scratch K/V of the prefix differs from the target's: its law drifts from what
#    the loop would see.
# 4. Use casspec_ref.plan's composition (mix) and measure both with TeacherForced and decode
#    timings.
# 5. Read threads.sample_load() beside the busy loop, then time the plans with decode_seconds and
#    compare each ratio with the record's c: the load does not add the same time to every plan's
#    forward, so the ratios move, and none of them is the machine's.

# %% exercise: best-k
def best_k(a, cost):
    return max(range(1, 17), key=lambda k: ewif_chain(a, k, cost))

paying = {}
for name in alpha:
    if name != "target":
        top = ewif_chain(alpha[name], best_k(alpha[name], c[name]), c[name])
        if top > 1:
            paying[name] = top

# %% wrong: best-k: the index of the best EWIF (0-based), not K
def best_k(a, cost):
    return int(np.argmax([ewif_chain(a, k, cost) for k in range(1, 17)]))

paying = {n: ewif_chain(alpha[n], best_k(alpha[n], c[n]), c[n]) for n in alpha
          if n != "target" and ewif_chain(alpha[n], best_k(alpha[n], c[n]), c[n]) > 1}

# %% wrong: best-k: the K with the most tokens per step, whatever it costs
def best_k(a, cost):
    return 16

paying = {n: ewif_chain(alpha[n], 1, c[n]) for n in alpha if n != "target" and ewif_chain(alpha[n], 1, c[n]) > 1}

# %% wrong: best-k: paying judged at K = 1 (each draft's EWIF with one drafted token, not at its best K)
def best_k(a, cost):
    return max(range(1, 17), key=lambda k: ewif_chain(a, k, cost))

paying = {n: ewif_chain(alpha[n], 1, c[n]) for n in alpha if n != "target" and ewif_chain(alpha[n], 1, c[n]) > 1}

# %% wrong: best-k: K searched in 1..8, transcribed from the plot's best_ewif (the cap is 16)
def best_k(a, cost):
    return max(range(1, 9), key=lambda k: ewif_chain(a, k, cost))

paying = {n: ewif_chain(alpha[n], best_k(alpha[n], c[n]), c[n]) for n in alpha
          if n != "target" and ewif_chain(alpha[n], best_k(alpha[n], c[n]), c[n]) > 1}

# %% wrong: best-k: range(1, 16), so K = 16 is never tried
def best_k(a, cost):
    return max(range(1, 16), key=lambda k: ewif_chain(a, k, cost))

paying = {n: ewif_chain(alpha[n], best_k(alpha[n], c[n]), c[n]) for n in alpha
          if n != "target" and ewif_chain(alpha[n], best_k(alpha[n], c[n]), c[n]) > 1}

# %% wrong: best-k: alpha and c swapped in the call to ewif_chain
def best_k(a, cost):
    return max(range(1, 17), key=lambda k: ewif_chain(cost, k, a))

paying = {n: ewif_chain(c[n], best_k(alpha[n], c[n]), alpha[n]) for n in alpha
          if n != "target" and ewif_chain(c[n], best_k(alpha[n], c[n]), alpha[n]) > 1}

# %% wrong: best-k: EWIF written by hand without the bonus token (drafted tokens only)
def ewif_no_bonus(a, k, cost):
    return sum(a**i for i in range(1, k + 1)) / (cost * k + 1)

def best_k(a, cost):
    return max(range(1, 17), key=lambda k: ewif_no_bonus(a, k, cost))

paying = {n: ewif_no_bonus(alpha[n], best_k(alpha[n], c[n]), c[n]) for n in alpha
          if n != "target" and ewif_no_bonus(alpha[n], best_k(alpha[n], c[n]), c[n]) > 1}

# %% wrong: best-k: EWIF >= 1 counted as paying, so the target (EWIF 1 at every K) is in
def best_k(a, cost):
    return max(range(1, 17), key=lambda k: ewif_chain(a, k, cost))

paying = {n: ewif_chain(alpha[n], best_k(alpha[n], c[n]), c[n]) for n in alpha
          if ewif_chain(alpha[n], best_k(alpha[n], c[n]), c[n]) >= 1}

# %% exercise: my-plan
# The 4 sub-layers cheapest to skip (all attention sub-layers): 4 / 60 = 6.7% of the sub-layers.
my_plan = ranked_skip_plan(config, SMOLLM2_RANKING, 4 / 60, name="my 4 cheapest sub-layers")

# %% wrong: my-plan: too few sub-layers skipped (2 of 60)
my_plan = ranked_skip_plan(config, SMOLLM2_RANKING, 2 / 60, name="2 sub-layers")

# %% wrong: my-plan: half the layers cut by an early exit (cheap, but rarely right)
my_plan = ExecutionPlan(exit_after=15, name="exit after 15")

# %% wrong: my-plan: the ranking read from its expensive end
my_plan = ranked_skip_plan(config, SMOLLM2_RANKING[::-1], 4 / 60, name="4 dearest sub-layers")

# %% wrong: my-plan: a plan of the page copied (search-10sub), renamed
from dataclasses import replace

my_plan = replace(plans[5], name="my plan")

# %% wrong: my-plan: int8 on fewer linears: cheaper, but no sub-layer skipped
my_plan = int8_plan(exclude={"mlp_down", "head"})
