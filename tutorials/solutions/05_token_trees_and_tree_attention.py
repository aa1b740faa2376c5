# Solutions to the exercises of 05_token_trees_and_tree_attention.ipynb.
# Each "exercise" section replaces the notebook cell tagged exercise:NAME; each "wrong" section is
# a plausible wrong answer that the check must reject (see tutorials/exercises.py).
#
# Hints to the open questions at the end of the notebook:
# 1. Induction: P(reject child j) r_{j+1} = max(r_j - q_j, 0), and min(r_j, q_j) + max(r_j - q_j,
#    0) = r_j.
# 2. Each extra root child adds the probability that it matches when the first did not.
# 3. Rotary positions would place deeper nodes at wrong offsets: the per-path causal comparison
#    fails first.
# 4. The bias grows when q puts a lot of mass on the first child and p disagrees with q on the
#    others.
# 5. The count moves where the library changes its kernel or blocking with the row count
#    (docs/floating_point.md's table lists such changes for one CPU): a property of the machine
#    and its libraries, not of the model.

# %% exercise: mask
def my_attention_mask(parents, base):
    n = len(parents)
    mask = torch.zeros(n, base + n, dtype=torch.bool)
    mask[:, :base] = True  # every node sees the whole cached prefix
    for i in range(n):
        node = i
        while node != -1:  # itself, then each ancestor up to the root
            mask[i, base + node] = True
            node = parents[node]
    return mask

# %% wrong: mask: a causal mask over the nodes (siblings see each other)
def my_attention_mask(parents, base):
    n = len(parents)
    mask = torch.zeros(n, base + n, dtype=torch.bool)
    mask[:, :base] = True
    mask[:, base:] = torch.tril(torch.ones(n, n, dtype=torch.bool))
    return mask

# %% wrong: mask: the ancestors without the node itself
def my_attention_mask(parents, base):
    n = len(parents)
    mask = torch.zeros(n, base + n, dtype=torch.bool)
    mask[:, :base] = True
    for i in range(n):
        node = parents[i]
        while node != -1:
            mask[i, base + node] = True
            node = parents[node]
    return mask

# %% wrong: mask: the cached prefix forgotten
def my_attention_mask(parents, base):
    n = len(parents)
    mask = torch.zeros(n, base + n, dtype=torch.bool)
    for i in range(n):
        node = i
        while node != -1:
            mask[i, base + node] = True
            node = parents[node]
    return mask

# %% wrong: mask: the parent only, not every ancestor
def my_attention_mask(parents, base):
    n = len(parents)
    mask = torch.zeros(n, base + n, dtype=torch.bool)
    mask[:, :base] = True
    for i in range(n):
        mask[i, base + i] = True
        if parents[i] != -1:
            mask[i, base + parents[i]] = True
    return mask

# %% wrong: mask: transposed, each node sees its descendants instead of its ancestors
def my_attention_mask(parents, base):
    n = len(parents)
    mask = torch.zeros(n, base + n, dtype=torch.bool)
    mask[:, :base] = True
    for i in range(n):
        node = i
        while node != -1:
            mask[node, base + i] = True
            node = parents[node]
    return mask

# %% exercise: three-drafts
acc1, rej1, r1 = test_child(p_s, q1)
acc2, rej2, r2 = test_child(r1, q2)
acc3, rej3, r3 = test_child(r2, q3)
p_all_rejected = rej1 * rej2 * rej3
law_three = [acc1, rej1 * acc2, rej1 * rej2 * acc3, p_all_rejected * r3]

# %% wrong: three-drafts: law_three = p_s copied instead of computed
acc3, rej3, r3 = test_child(r2, q3)
p_all_rejected = rej1 * rej2 * rej3
law_three = p_s

# %% wrong: three-drafts: the answer p written down, residual and rejection guessed
p_all_rejected = rej1 * rej2
r3 = p_s
law_three = [acc1, rej1 * acc2, 0 * p_s, p_all_rejected * p_s]

# %% wrong: three-drafts: the third child tested against p instead of r2
acc3, rej3, r3 = test_child(p_s, q3)
p_all_rejected = rej1 * rej2 * rej3
law_three = [acc1, rej1 * acc2, rej1 * rej2 * acc3, p_all_rejected * r3]

# %% wrong: three-drafts: P(all rejected) taken as the last child's rejection alone
acc3, rej3, r3 = test_child(r2, q3)
p_all_rejected = rej3
law_three = [acc1, rej1 * acc2, rej1 * rej2 * acc3, p_all_rejected * r3]

# %% wrong: three-drafts: p and q swapped in the first child's test
acc1_swapped, rej1_swapped, r1_swapped = test_child(q1, p_s)
acc2_s, rej2_s, r2_s = test_child(r1_swapped, q2)
acc3, rej3, r3 = test_child(r2_s, q3)
p_all_rejected = rej1_swapped * rej2_s * rej3
law_three = [acc1_swapped, rej1_swapped * acc2_s, rej1_swapped * rej2_s * acc3, p_all_rejected * r3]

# %% wrong: three-drafts: after three rejections the token drawn from p, not from the residual
acc3, rej3, _ = test_child(r2, q3)
p_all_rejected = rej1 * rej2 * rej3
r3 = p_s
law_three = [acc1, rej1 * acc2, rej1 * rej2 * acc3, p_all_rejected * r3]

# %% wrong: three-drafts: r3 = max(r2 - q3, 0) left unnormalized
acc3, rej3, _ = test_child(r2, q3)
p_all_rejected = rej1 * rej2 * rej3
r3 = np.array([max(a - b, 0) for a, b in zip(r2, q3)], dtype=object)
law_three = [acc1, rej1 * acc2, rej1 * rej2 * acc3, p_all_rejected * r3]


# %% wrong: three-drafts: the min dropped: a child kept with probability r/q, not min(1, r/q)
def test_child_no_min(r, q):
    accepted = np.array([q_y * (r_y / q_y) for r_y, q_y in zip(r, q)], dtype=object)  # = r
    excess = np.array([max(a - b, 0) for a, b in zip(r, q)], dtype=object)
    return accepted, 1 - accepted.sum(), (excess / excess.sum() if excess.sum() > 0 else r)


a1_, j1_, s1_ = test_child_no_min(p_s, q1)
a2_, j2_, s2_ = test_child_no_min(s1_, q2)
a3_, j3_, r3 = test_child_no_min(s2_, q3)
p_all_rejected = j1_ * j2_ * j3_
law_three = [a1_, j1_ * a2_, j1_ * j2_ * a3_, p_all_rejected * r3]

# %% wrong: three-drafts: each child's accepted mass not weighted by the rejections before it
acc3, rej3, r3 = test_child(r2, q3)
p_all_rejected = rej1 * rej2 * rej3
law_three = [acc1, acc2, acc3, p_all_rejected * r3]

# %% exercise: rows
def rows_that_differ(forward, x):
    together = forward(x)  # all T rows in one forward
    return [i for i in range(len(x)) if not torch.equal(together[i], forward(x[i : i + 1])[0])]

# %% wrong: rows: torch.allclose instead of torch.equal (a rounding difference passes as equal)
def rows_that_differ(forward, x):
    together = forward(x)
    return [i for i in range(len(x)) if not torch.allclose(together[i], forward(x[i : i + 1])[0])]

# %% wrong: rows: row 0 alone compared
def rows_that_differ(forward, x):
    together = forward(x)
    return [] if torch.equal(together[0], forward(x[:1])[0]) else [0]

# %% wrong: rows: the T-row forward compared with itself
def rows_that_differ(forward, x):
    together, again = forward(x), forward(x)
    return [i for i in range(len(x)) if not torch.equal(together[i], again[i])]

# %% wrong: rows: each row run as x[i] (a row, not a batch of one)
def rows_that_differ(forward, x):
    together = forward(x)
    return [i for i in range(len(x)) if not torch.equal(together[i], forward(x[i]))]

# %% wrong: rows: the number of differing rows, as rows_differing above returns, not their indices
def rows_that_differ(forward, x):
    together = forward(x)
    return sum(not torch.equal(together[i], forward(x[i : i + 1])[0]) for i in range(len(x)))

# %% wrong: rows: the test inverted, the rows that agree
def rows_that_differ(forward, x):
    together = forward(x)
    return [i for i in range(len(x)) if torch.equal(together[i], forward(x[i : i + 1])[0])]

# %% wrong: rows: indices counted from 1
def rows_that_differ(forward, x):
    together = forward(x)
    return [i + 1 for i in range(len(x)) if not torch.equal(together[i], forward(x[i : i + 1])[0])]
