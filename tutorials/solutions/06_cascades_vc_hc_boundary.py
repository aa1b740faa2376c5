# Solutions to the exercises of 06_cascades_vc_hc_boundary.ipynb.
# Each "exercise" section replaces the notebook cell tagged exercise:NAME; each "wrong" section is
# a plausible wrong answer that the check must reject (see tutorials/exercises.py).
#
# Hints to the open questions at the end of the notebook:
# 1. Tokens per cost of HC with k upper tokens: (1 + sum a1^i + a1^k a_PLD) / (c1 k + 1); compare
#    with PLD alone.
# 2. Pass chain_k to generate_speculative for the vc method and compare run.stats['mat'] and
#    tokens/s.
# 3. Under greedy any token equal to the target's argmax is accepted; under sampling the test
#    needs the law the token was really drawn from.
# 4. Count trace.sources == 'pld' nodes accepted over proposed, per prompt.

# %% exercise: verify-cost
def gain_one_token(a1, c1, g):
    # 1 + a1 tokens per step (the correction or bonus token, plus the drafted one when accepted)
    # for a cost of c1 (the draft) + 1 + g (a target forward over 2 tokens); plain: 1 per 1.
    return (1 + a1) / (1 + c1 + g)

g_max = a1_rec - c1_rec  # gain = 1 where 1 + a1 = 1 + c1 + g

# %% wrong: verify-cost: the verify cost left out of the denominator
def gain_one_token(a1, c1, g):
    return (1 + a1) / (1 + c1)

g_max = a1_rec - c1_rec

# %% wrong: verify-cost: the drafted token counted, the target's own token forgotten
def gain_one_token(a1, c1, g):
    return a1 / (c1 + g)

g_max = a1_rec - c1_rec

# %% wrong: verify-cost: alpha and c swapped
def gain_one_token(a1, c1, g):
    return (1 + c1) / (1 + a1 + g)

g_max = c1_rec - a1_rec

# %% wrong: verify-cost: a difference of tokens and costs, not their ratio
def gain_one_token(a1, c1, g):
    return 1 + a1 - c1 - g

g_max = a1_rec - c1_rec

# %% wrong: verify-cost: the first section's boundary transcribed, alpha_PLD subtracted too
def gain_one_token(a1, c1, g):
    return (1 + a1) / (1 + c1 + g)

g_max = a1_rec - a_pld_rec - c1_rec

# %% wrong: verify-cost: g_max copied as the draft's recorded cost c_1
def gain_one_token(a1, c1, g):
    return (1 + a1) / (1 + c1 + g)

g_max = c1_rec

# %% wrong: verify-cost: the draft's cost left out of the step's cost
def gain_one_token(a1, c1, g):
    return (1 + a1) / (1 + g)

g_max = a1_rec

# %% exercise: acceptance
def acceptance_by_source(traces):
    counts = {}
    for trace in traces:
        for node in range(1, len(trace.tree)):
            accepted, proposed = counts.get(trace.sources[node], (0, 0))
            counts[trace.sources[node]] = (accepted + (node in trace.result.accepted), proposed + 1)
    return counts

# %% wrong: acceptance: the root counted as a proposed node
def acceptance_by_source(traces):
    counts = {}
    for trace in traces:
        for node in range(len(trace.tree)):
            accepted, proposed = counts.get(trace.sources[node], (0, 0))
            counts[trace.sources[node]] = (accepted + (node in trace.result.accepted), proposed + 1)
    return counts

# %% wrong: acceptance: every node of a step counted accepted when the step accepted anything
def acceptance_by_source(traces):
    counts = {}
    for trace in traces:
        for node in range(1, len(trace.tree)):
            accepted, proposed = counts.get(trace.sources[node], (0, 0))
            counts[trace.sources[node]] = (accepted + bool(trace.result.accepted), proposed + 1)
    return counts

# %% wrong: acceptance: (proposed, accepted) in the wrong order
def acceptance_by_source(traces):
    counts = {}
    for trace in traces:
        for node in range(1, len(trace.tree)):
            proposed, accepted = counts.get(trace.sources[node], (0, 0))
            counts[trace.sources[node]] = (proposed + 1, accepted + (node in trace.result.accepted))
    return counts

# %% wrong: acceptance: only the steps printed above (the first three traces)
def acceptance_by_source(traces):
    counts = {}
    for trace in traces[:3]:
        for node in range(1, len(trace.tree)):
            accepted, proposed = counts.get(trace.sources[node], (0, 0))
            counts[trace.sources[node]] = (accepted + (node in trace.result.accepted), proposed + 1)
    return counts
