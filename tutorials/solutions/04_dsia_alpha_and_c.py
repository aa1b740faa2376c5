# Solutions to the exercises of 04_dsia_alpha_and_c.ipynb.
# Each section replaces the notebook cell tagged exercise:NAME (see tutorials/exercises.py).

# %% exercise: best-k
def best_k(a, cost):
    return max(range(1, 17), key=lambda k: ewif_chain(a, k, cost))

paying = [n for n in alpha if n != "target" and ewif_chain(alpha[n], best_k(alpha[n], c[n]), c[n]) > 1]

# %% exercise: my-plan
from casspec_ref.dsia.layer_sparsity import ranked_skip_plan
from casspec_ref.io.presets import SMOLLM2_RANKING

# The 4 sub-layers cheapest to skip (all attention sub-layers): 4 / 60 = 6.7% of the sub-layers.
my_plan = ranked_skip_plan(config, SMOLLM2_RANKING, 4 / 60, name="my 4 cheapest sub-layers")
