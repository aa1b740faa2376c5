# Solutions to the exercises of 06_cascades_vc_hc_boundary.ipynb.
# Each section replaces the notebook cell tagged exercise:NAME (see tutorials/exercises.py).

# %% exercise: verify-cost
def gain_one_token(a1, c1, g):
    # 1 + a1 tokens per step (the correction or bonus token, plus the drafted one when accepted)
    # for a cost of c1 (the draft) + 1 + g (a target forward over 2 tokens); plain: 1 per 1.
    return (1 + a1) / (1 + c1 + g)

g_max = 0.93 - 0.63  # gain = 1 where 1 + a1 = 1 + c1 + g

# %% exercise: acceptance
def acceptance_by_source(traces):
    counts = {}
    for trace in traces:
        for node in range(1, len(trace.tree)):
            accepted, proposed = counts.get(trace.sources[node], (0, 0))
            counts[trace.sources[node]] = (accepted + (node in trace.result.accepted), proposed + 1)
    return counts
