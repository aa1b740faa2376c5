# Solutions to the exercises of 04_dsia_alpha_and_c.ipynb.
# Each "exercise" section replaces the notebook cell tagged exercise:NAME; each "wrong" section is
# a plausible wrong answer that the check must reject (see tutorials/exercises.py).
#
# Hints to the open questions at the end of the notebook:
# 1. EWIF(K) = (1 - a^(K+1)) / ((1 - a)(cK + 1)); look at the ratio EWIF(K+1)/EWIF(K).
# 2. Use early_exit_plan(config, n) for n in (20, 25, 28) and scorer.matchness.
# 3. The draft's own scratch K/V of the prefix differs from the target's: its law drifts from what
#    the loop would see.
# 4. Use casspec_ref.plan's composition (mix) and measure both with TeacherForced and decode
#    timings.

# %% exercise: best-k
def best_k(a, cost):
    return max(range(1, 17), key=lambda k: ewif_chain(a, k, cost))

paying = [n for n in alpha if n != "target" and ewif_chain(alpha[n], best_k(alpha[n], c[n]), c[n]) > 1]

# %% wrong: best-k: the index of the best EWIF (0-based), not K
def best_k(a, cost):
    return int(np.argmax([ewif_chain(a, k, cost) for k in range(1, 17)]))

paying = [n for n in alpha if n != "target" and ewif_chain(alpha[n], best_k(alpha[n], c[n]), c[n]) > 1]

# %% wrong: best-k: the K with the most tokens per step, whatever it costs
def best_k(a, cost):
    return 16

paying = [n for n in alpha if n != "target" and ewif_chain(alpha[n], 1, c[n]) > 1]

# %% exercise: my-plan
from casspec_ref.dsia.layer_sparsity import ranked_skip_plan
from casspec_ref.io.presets import SMOLLM2_RANKING

# The 4 sub-layers cheapest to skip (all attention sub-layers): 4 / 60 = 6.7% of the sub-layers.
my_plan = ranked_skip_plan(config, SMOLLM2_RANKING, 4 / 60, name="my 4 cheapest sub-layers")

# %% wrong: my-plan: too few sub-layers skipped (2 of 60)
from casspec_ref.dsia.layer_sparsity import ranked_skip_plan
from casspec_ref.io.presets import SMOLLM2_RANKING

my_plan = ranked_skip_plan(config, SMOLLM2_RANKING, 2 / 60, name="2 sub-layers")

# %% wrong: my-plan: half the layers cut by an early exit (cheap, but rarely right)
my_plan = ExecutionPlan(exit_after=15, name="exit after 15")
