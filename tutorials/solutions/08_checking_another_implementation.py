# Solutions to the exercises of 08_checking_another_implementation.ipynb.
# Each "exercise" section replaces the notebook cell tagged exercise:NAME; each "wrong" section is
# a plausible wrong answer that the check must reject (see tutorials/exercises.py).
#
# Hints to the open questions at the end of the notebook:
# 1. p_equals_q accepts every draft (only the bonus runs); disjoint rejects every draft (only the
#    residual runs); random mixes both.
# 2. Count paths with exact_law on one case; the depth is bounded by k + 1 draws of a categorical
#    and k Bernoullis.
# 3. An unused coin multiplies the number of paths but not the law: still LOSSLESS, slower.
# 4. Draw with torch.multinomial inside the function; pass it to check_tree_verifier with the
#    torch adapter (docs/oracle.md).

# %% exercise: break-it
def my_verifier(inputs, rng):
    p, q, out = inputs.target_probs, inputs.draft_probs, []  # (K+1, V), (K, V)
    for i, x in enumerate(inputs.draft_tokens):
        if not rng.bernoulli(min(1.0, p[i, x] / q[i, x])):  # q[i, x] > 0: x was drawn from q[i]
            residual = np.maximum(p[i] - q[i], 0.0)  # (V,)
            return out + [rng.categorical(residual / residual.sum())]
        out.append(x)
    # BUG: the bonus token from the last draft law, not from the target law after all K drafts.
    # p_equals_q catches it (with p = q every draft is accepted, so the bonus branch always
    # runs) and disjoint does not (no draft is ever accepted there, so the bonus branch never
    # runs). A bug in the rejection branch (say, the replacement drawn from q[i]) is the other
    # way round: p_equals_q never rejects and cannot catch it, disjoint always rejects and does.
    # Dropping the residual's normalization would not be a bug: rng.categorical normalizes its
    # weights, as torch.multinomial does.
    return out + [rng.categorical(q[-1])]

# %% wrong: break-it: a change that keeps the law (the residual left unnormalized)
def my_verifier(inputs, rng):
    p, q, out = inputs.target_probs, inputs.draft_probs, []
    for i, x in enumerate(inputs.draft_tokens):
        if not rng.bernoulli(min(1.0, p[i, x] / q[i, x])):
            return out + [rng.categorical(np.maximum(p[i] - q[i], 0.0))]  # categorical normalizes
        out.append(x)
    return out + [rng.categorical(p[-1])]

# %% wrong: break-it: a change that breaks the contract (one token too many), not the law
def my_verifier(inputs, rng):
    p, q, out = inputs.target_probs, inputs.draft_probs, []
    for i, x in enumerate(inputs.draft_tokens):
        if not rng.bernoulli(min(1.0, p[i, x] / q[i, x])):
            residual = np.maximum(p[i] - q[i], 0.0)
            return out + [rng.categorical(residual / residual.sum())]
        out.append(x)
    bonus = rng.categorical(p[-1])
    return out + [bonus, bonus]

# %% wrong: break-it: the bonus token dropped (fewer tokens, the same law)
def my_verifier(inputs, rng):
    p, q, out = inputs.target_probs, inputs.draft_probs, []
    for i, x in enumerate(inputs.draft_tokens):
        if not rng.bernoulli(min(1.0, p[i, x] / q[i, x])):
            residual = np.maximum(p[i] - q[i], 0.0)
            return out + [rng.categorical(residual / residual.sum())]
        out.append(x)
    return out

# %% wrong: break-it: the drafts ignored, one token drawn from p[0] (useless, but lossless)
def my_verifier(inputs, rng):
    return [rng.categorical(inputs.target_probs[0])]

# %% wrong: break-it: an epsilon in the residual far below the oracle's float tolerance
def my_verifier(inputs, rng):
    p, q, out = inputs.target_probs, inputs.draft_probs, []
    for i, x in enumerate(inputs.draft_tokens):
        if not rng.bernoulli(min(1.0, p[i, x] / q[i, x])):
            residual = np.maximum(p[i] - q[i], 0.0) + 1e-15
            return out + [rng.categorical(residual / residual.sum())]
        out.append(x)
    return out + [rng.categorical(p[-1])]

# %% wrong: break-it: the bonus drawn from a draft row that does not exist (a crash, not a wrong law)
def my_verifier(inputs, rng):
    p, q, out = inputs.target_probs, inputs.draft_probs, []
    for i, x in enumerate(inputs.draft_tokens):
        if not rng.bernoulli(min(1.0, p[i, x] / q[i, x])):
            residual = np.maximum(p[i] - q[i], 0.0)
            return out + [rng.categorical(residual / residual.sum())]
        out.append(x)
    return out + [rng.categorical(q[len(inputs.draft_tokens)])]

# %% exercise: fix-siblings
def sibling_verifier(inputs, rng):
    node, out = 0, []
    while True:
        r = np.asarray(inputs.target_probs[node], dtype=np.float64)  # (V,) the law at this node
        removed = []  # the siblings rejected so far at this node
        for child in inputs.children(node):
            x = inputs.tokens[child]
            q = np.asarray(inputs.draft_probs[child], dtype=np.float64)  # (V,)
            if inputs.rules[child] == "without_replacement" and removed:
                # FIX: this child was drawn from q without the earlier siblings, renormalized;
                # test it (and form the residual) with that law, not the unconditional q.
                q = q.copy()
                q[removed] = 0.0
                q = q / q.sum()
            if rng.bernoulli(min(1.0, r[x] / q[x])):
                out.append(x)
                node = child
                break
            residual = np.maximum(r - q, 0.0)  # (V,)
            r = residual / residual.sum()
            removed.append(x)
        else:  # every child rejected, or a leaf: the last token from what is left of r
            return out + [rng.categorical(r)]

# %% wrong: fix-siblings: the conditional q used in the test but not in the residual
def sibling_verifier(inputs, rng):
    node, out = 0, []
    while True:
        r = np.asarray(inputs.target_probs[node], dtype=np.float64)
        removed = []
        for child in inputs.children(node):
            x = inputs.tokens[child]
            q = np.asarray(inputs.draft_probs[child], dtype=np.float64)
            test_q = q
            if inputs.rules[child] == "without_replacement" and removed:
                test_q = q.copy()
                test_q[removed] = 0.0
                test_q = test_q / test_q.sum()
            if rng.bernoulli(min(1.0, r[x] / test_q[x])):
                out.append(x)
                node = child
                break
            residual = np.maximum(r - q, 0.0)
            r = residual / residual.sum()
            removed.append(x)
        else:
            return out + [rng.categorical(r)]

# %% wrong: fix-siblings: the earlier siblings removed from q without renormalizing it
def sibling_verifier(inputs, rng):
    node, out = 0, []
    while True:
        r = np.asarray(inputs.target_probs[node], dtype=np.float64)
        removed = []
        for child in inputs.children(node):
            x = inputs.tokens[child]
            q = np.asarray(inputs.draft_probs[child], dtype=np.float64)
            if inputs.rules[child] == "without_replacement" and removed:
                q = q.copy()
                q[removed] = 0.0
            if rng.bernoulli(min(1.0, r[x] / q[x])):
                out.append(x)
                node = child
                break
            residual = np.maximum(r - q, 0.0)
            r = residual / residual.sum()
            removed.append(x)
        else:
            return out + [rng.categorical(r)]

# %% wrong: fix-siblings: only the first child of each node tested (lossless, fewer tokens)
def sibling_verifier(inputs, rng):
    node, out = 0, []
    while True:
        r = np.asarray(inputs.target_probs[node], dtype=np.float64)
        children = inputs.children(node)[:1]
        for child in children:
            x = inputs.tokens[child]
            q = np.asarray(inputs.draft_probs[child], dtype=np.float64)
            if rng.bernoulli(min(1.0, r[x] / q[x])):
                out.append(x)
                node = child
                break
            residual = np.maximum(r - q, 0.0)
            r = residual / residual.sum()
        else:
            return out + [rng.categorical(r)]

# %% wrong: fix-siblings: the tree ignored, one token drawn from the root's law (lossless, useless)
def sibling_verifier(inputs, rng):
    return [rng.categorical(np.asarray(inputs.target_probs[0], dtype=np.float64))]

# %% wrong: fix-siblings: only the previous sibling removed from q, not every earlier one
def sibling_verifier(inputs, rng):
    node, out = 0, []
    while True:
        r = np.asarray(inputs.target_probs[node], dtype=np.float64)
        previous = None
        for child in inputs.children(node):
            x = inputs.tokens[child]
            q = np.asarray(inputs.draft_probs[child], dtype=np.float64)
            if inputs.rules[child] == "without_replacement" and previous is not None:
                q = q.copy()
                q[previous] = 0.0
                q = q / q.sum()
            if rng.bernoulli(min(1.0, r[x] / q[x])):
                out.append(x)
                node = child
                break
            residual = np.maximum(r - q, 0.0)
            r = residual / residual.sum()
            previous = x
        else:
            return out + [rng.categorical(r)]

# %% wrong: fix-siblings: the bonus token forgotten after an accepted leaf (lossless, fewer tokens)
def sibling_verifier(inputs, rng):
    node, out = 0, []
    while True:
        if out and not inputs.children(node):
            return out  # every drafted token on the path accepted: nothing more to emit?
        r = np.asarray(inputs.target_probs[node], dtype=np.float64)
        removed = []
        for child in inputs.children(node):
            x = inputs.tokens[child]
            q = np.asarray(inputs.draft_probs[child], dtype=np.float64)
            if inputs.rules[child] == "without_replacement" and removed:
                q = q.copy()
                q[removed] = 0.0
                q = q / q.sum()
            if rng.bernoulli(min(1.0, r[x] / q[x])):
                out.append(x)
                node = child
                break
            residual = np.maximum(r - q, 0.0)
            r = residual / residual.sum()
            removed.append(x)
        else:
            return out + [rng.categorical(r)]

# %% wrong: fix-siblings: earlier siblings removed from q whatever the child's rule (independent ones too)
def sibling_verifier(inputs, rng):
    node, out = 0, []
    while True:
        r = np.asarray(inputs.target_probs[node], dtype=np.float64)
        removed = []
        for child in inputs.children(node):
            x = inputs.tokens[child]
            q = np.asarray(inputs.draft_probs[child], dtype=np.float64)
            if removed:
                q = q.copy()
                q[removed] = 0.0
                q = q / q.sum()
            if rng.bernoulli(min(1.0, r[x] / q[x]) if q[x] > 0 else 0.0):
                out.append(x)
                node = child
                break
            residual = np.maximum(r - q, 0.0)
            r = residual / residual.sum()
            removed.append(x)
        else:
            return out + [rng.categorical(r)]

# %% wrong: fix-siblings: the removed siblings kept from one node to the next
def sibling_verifier(inputs, rng):
    node, out, removed = 0, [], []
    while True:
        r = np.asarray(inputs.target_probs[node], dtype=np.float64)
        for child in inputs.children(node):
            x = inputs.tokens[child]
            q = np.asarray(inputs.draft_probs[child], dtype=np.float64)
            if inputs.rules[child] == "without_replacement" and removed:
                q = q.copy()
                q[removed] = 0.0
                q = q / q.sum()
            if rng.bernoulli(min(1.0, r[x] / q[x]) if q[x] > 0 else 0.0):
                out.append(x)
                node = child
                break
            residual = np.maximum(r - q, 0.0)
            r = residual / residual.sum()
            removed.append(x)
        else:
            return out + [rng.categorical(r)]

# %% wrong: fix-siblings: the residual left unnormalized (the next sibling's ratio reads it)
def sibling_verifier(inputs, rng):
    node, out = 0, []
    while True:
        r = np.asarray(inputs.target_probs[node], dtype=np.float64)
        removed = []
        for child in inputs.children(node):
            x = inputs.tokens[child]
            q = np.asarray(inputs.draft_probs[child], dtype=np.float64)
            if inputs.rules[child] == "without_replacement" and removed:
                q = q.copy()
                q[removed] = 0.0
                q = q / q.sum()
            if rng.bernoulli(min(1.0, r[x] / q[x])):
                out.append(x)
                node = child
                break
            r = np.maximum(r - q, 0.0)  # rng.categorical normalizes; the next ratio r[x] / q[x] does not
            removed.append(x)
        else:
            return out + [rng.categorical(r)]
