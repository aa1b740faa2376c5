# Solutions to the exercises of 07_dytc_step_by_step.ipynb.
# Each "exercise" section replaces the notebook cell tagged exercise:NAME; each "wrong" section is
# a plausible wrong answer that the check must reject (see tutorials/exercises.py).

# %% exercise: t-verify
def t_score_verify(a, k, c, a_pld, c_pld, v):
    tokens = sum(a**i for i in range(1, k + 1)) + a**k * a_pld  # = a(1 - a^k)/(1 - a) + a^k a_PLD
    return tokens / (c * k + c_pld + v)

scores = [t_score_verify(0.9, k, 0.55, a_pld, c_pld, 1.0) for k in range(1, 11)]
best_k_accurate = 1 + int(np.argmax(scores))

# %% wrong: t-verify: the PLD continuation term left out
def t_score_verify(a, k, c, a_pld, c_pld, v):
    return sum(a**i for i in range(1, k + 1)) / (c * k + c_pld + v)

scores = [t_score_verify(0.9, k, 0.55, a_pld, c_pld, 1.0) for k in range(1, 11)]
best_k_accurate = 1 + int(np.argmax(scores))

# %% wrong: t-verify: the verify cost counted once per drafted token
def t_score_verify(a, k, c, a_pld, c_pld, v):
    tokens = sum(a**i for i in range(1, k + 1)) + a**k * a_pld
    return tokens / ((c + v) * k + c_pld)

scores = [t_score_verify(0.9, k, 0.55, a_pld, c_pld, 1.0) for k in range(1, 11)]
best_k_accurate = 1 + int(np.argmax(scores))

# %% exercise: crossing
values = traces["paper notes (w=0.3, window 20, warm-up 20)"]
crossing = next(i for i in range(80, len(values)) if values[i] < 0.5)

# %% wrong: crossing: counted from the drop, not from 0
values = traces["paper notes (w=0.3, window 20, warm-up 20)"]
crossing = next(i for i in range(80, len(values)) if values[i] < 0.5) - 80

# %% wrong: crossing: the last observation still at or above 0.5
values = traces["paper notes (w=0.3, window 20, warm-up 20)"]
crossing = next(i for i in range(80, len(values)) if values[i] < 0.5) - 1
