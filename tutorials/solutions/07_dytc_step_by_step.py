# Solutions to the exercises of 07_dytc_step_by_step.ipynb.
# Each "exercise" section replaces the notebook cell tagged exercise:NAME; each "wrong" section is
# a plausible wrong answer that the check must reject (see tutorials/exercises.py).
#
# Hints to the open questions at the end of the notebook:
# 1. EWIF(k) = (1 - a^(k+1)) / ((1 - a)(c k + v)); compare consecutive k as for notebook 4.
# 2. Lower toy_world['good']['cost'] and rerun grow(toy_world, tables['steep']).
# 3. The tree must be fixed before the verifier's coins are drawn; otherwise the law of the step
#    is a mixture that depends on those coins.
# 4. Feed MiniEstimate a long i.i.d. stream at 0.7 and compare the standard deviation of alpha
#    after warm-up.
# 5. dataclasses.replace(default_world(CURVES['non-monotone']), offer={...}) and rerun run_dytc
#    and best_fixed.

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

# %% exercise: tree-tokens
def my_tree_tokens(parents, accept):
    reach = [1.0]  # the root is always reached
    for i in range(1, len(parents)):
        reach.append(reach[parents[i]] * accept[i])  # parents come before their children
    return 1.0 + sum(reach[1:])  # the bonus/correction token + each node's reach

# %% wrong: tree-tokens: the acceptances added, not multiplied along the path
def my_tree_tokens(parents, accept):
    return 1.0 + sum(accept[1:])

# %% wrong: tree-tokens: the token every step commits forgotten
def my_tree_tokens(parents, accept):
    reach = [1.0]
    for i in range(1, len(parents)):
        reach.append(reach[parents[i]] * accept[i])
    return sum(reach[1:])

# %% wrong: tree-tokens: the tree read as one chain (each node times all the nodes before it)
def my_tree_tokens(parents, accept):
    total, running = 1.0, 1.0
    for a in accept[1:]:
        running *= a
        total += running
    return total

# %% exercise: growth-step
def my_grow_step(tree, world, table, drafts=None):
    size, pld = len(tree[0]), world["pld"]
    room = min(8, 32 - size)  # the longest chain, within the tree's budget of 32 nodes
    if room < 1:
        return None
    options = []
    for leaf in [n for n in range(size) if n not in tree[0]]:  # a leaf has no child
        for d in (world[name] for name in (drafts or world)):
            t = [t_score_mini(d["alpha"], k, d["cost"], pld["alpha"], pld["cost"], verify_cost(table, size + k))
                 for k in range(1, room + 1)]
            cap = 1 + t.index(max(t))  # T's best k caps the chain
            options += [extend(tree, leaf, d, k, w) for k in range(1, cap + 1)
                        for w in range(1, len(d["siblings"]) + 2)]
    best = max(options, key=lambda t: tree_ewif(t, table), default=None)
    if best is None or tree_ewif(best, table) <= tree_ewif(tree, table):
        return None  # the stop rule
    return best

# %% wrong: growth-step: T alone picks k (the paper's rule as stated), the EWIF only the rest
def my_grow_step(tree, world, table, drafts=None):
    size, pld = len(tree[0]), world["pld"]
    if size >= 32:
        return None
    options = []
    for leaf in [n for n in range(size) if n not in tree[0]]:
        for d in (world[name] for name in (drafts or world)):
            t = [t_score_mini(d["alpha"], k, d["cost"], pld["alpha"], pld["cost"], verify_cost(table, size + k))
                 for k in range(1, min(8, 32 - size) + 1)]
            k = 1 + t.index(max(t))
            options += [extend(tree, leaf, d, k, w) for w in range(1, len(d["siblings"]) + 2)]
    best = max(options, key=lambda t: tree_ewif(t, table), default=None)
    if best is None or tree_ewif(best, table) <= tree_ewif(tree, table):
        return None
    return best

# %% wrong: growth-step: only the root expanded, never a deeper leaf
def my_grow_step(tree, world, table, drafts=None):
    size, pld = len(tree[0]), world["pld"]
    if size >= 32:
        return None
    options = []
    for d in (world[name] for name in (drafts or world)):
        t = [t_score_mini(d["alpha"], k, d["cost"], pld["alpha"], pld["cost"], verify_cost(table, size + k))
             for k in range(1, min(8, 32 - size) + 1)]
        options += [extend(tree, 0, d, k, w) for k in range(1, 2 + t.index(max(t)))
                    for w in range(1, len(d["siblings"]) + 2)]
    best = max(options, key=lambda t: tree_ewif(t, table), default=None)
    if best is None or tree_ewif(best, table) <= tree_ewif(tree, table):
        return None
    return best

# %% wrong: growth-step: no stop rule (the best expansion even when it makes the tree worse)
def my_grow_step(tree, world, table, drafts=None):
    size, pld = len(tree[0]), world["pld"]
    if size >= 32:
        return None
    options = []
    for leaf in [n for n in range(size) if n not in tree[0]]:
        for d in (world[name] for name in (drafts or world)):
            t = [t_score_mini(d["alpha"], k, d["cost"], pld["alpha"], pld["cost"], verify_cost(table, size + k))
                 for k in range(1, min(8, 32 - size) + 1)]
            options += [extend(tree, leaf, d, k, w) for k in range(1, 2 + t.index(max(t)))
                        for w in range(1, len(d["siblings"]) + 2)]
    return max(options, key=lambda t: tree_ewif(t, table))

# %% wrong: growth-step: chains only (width 1), no siblings
def my_grow_step(tree, world, table, drafts=None):
    size, pld = len(tree[0]), world["pld"]
    if size >= 32:
        return None
    options = []
    for leaf in [n for n in range(size) if n not in tree[0]]:
        for d in (world[name] for name in (drafts or world)):
            t = [t_score_mini(d["alpha"], k, d["cost"], pld["alpha"], pld["cost"], verify_cost(table, size + k))
                 for k in range(1, min(8, 32 - size) + 1)]
            options += [extend(tree, leaf, d, k, 1) for k in range(1, 2 + t.index(max(t)))]
    best = max(options, key=lambda t: tree_ewif(t, table), default=None)
    if best is None or tree_ewif(best, table) <= tree_ewif(tree, table):
        return None
    return best
