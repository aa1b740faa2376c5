# Solutions to the exercises of 05_token_trees_and_tree_attention.ipynb.
# Each section replaces the notebook cell tagged exercise:NAME (see tutorials/exercises.py).

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

# %% exercise: three-drafts
acc1, rej1, r1 = test_child(p_s, q1)
acc2, rej2, r2 = test_child(r1, q2)
acc3, rej3, r3 = test_child(r2, q3)
law_three = acc1 + rej1 * (acc2 + rej2 * (acc3 + rej3 * r3))
