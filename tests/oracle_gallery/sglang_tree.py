"""An SGLang-style tree verifier ("target only" tree speculative sampling): the tree is given as
SGLang lays it out (``retrive_index``, ``retrive_next_token``: first child, and
``retrive_next_sibling`` links, -1 for none), one uniform per node is drawn up front and one more
for the final token. At each node a coin is compared with the running sum of p over the children
in order: the first child whose running sum passes the coin is accepted; if none is, the last
token is drawn from p with the rejected children removed. Re-implemented from the documented
algorithm (not SGLang's kernel). Truth: lossless when siblings carry distinct tokens (top-k and
without-replacement trees); siblings drawn independently may repeat a token, which this rule
counts twice."""

from __future__ import annotations

import torch

TRUTH = "LOSSLESS"
FAMILIES = ("chain", "without_replacement", "deterministic")


def tree_layout(parents):  # type: ignore[no-untyped-def]
    """(retrive_index, retrive_next_token, retrive_next_sibling) for one tree, node 0 the root."""
    n = len(parents)
    next_token = torch.full((n,), -1, dtype=torch.long)
    next_sibling = torch.full((n,), -1, dtype=torch.long)
    last_child = {}
    for node in range(1, n):
        parent = parents[node]
        if parent in last_child:
            next_sibling[last_child[parent]] = node
        else:
            next_token[parent] = node
        last_child[parent] = node
    return torch.arange(n), next_token, next_sibling


def tree_speculative_sampling_target_only(
    candidates,
    retrive_index,
    retrive_next_token,
    retrive_next_sibling,
    uniform_samples,
    uniform_final,
    target_probs,
    threshold_single=1.0,
    threshold_acc=1.0,
):
    """Returns (accepted node ids, the final token)."""
    residual_mask = torch.ones_like(target_probs)  # (N, V): 0 where a child was rejected
    node, accepted = 0, []
    coin = uniform_samples[0]
    child = int(retrive_next_token[0])
    prob_acc = 0.0
    while child != -1:
        token = int(candidates[child])
        p_single = float(target_probs[node, token])
        prob_acc += p_single
        if coin <= prob_acc / threshold_acc or p_single >= threshold_single:
            accepted.append(int(retrive_index[child]))
            node, prob_acc = child, 0.0
            coin = uniform_samples[child]
            child = int(retrive_next_token[child])
        else:
            residual_mask[node, token] = 0.0
            child = int(retrive_next_sibling[child])
    residual = target_probs[node] * residual_mask[node]  # (V,)
    cumulative = torch.cumsum(residual / residual.sum(), dim=0)  # (V,)
    last = int(torch.nonzero(residual).max())
    final = min(int((cumulative < uniform_final).sum()), last)
    return accepted, final


def verify(inputs):
    retrive_index, next_token, next_sibling = tree_layout(inputs.parents)
    n = len(inputs.tokens)
    accepted, final = tree_speculative_sampling_target_only(
        torch.tensor(inputs.tokens, dtype=torch.long),
        retrive_index,
        next_token,
        next_sibling,
        torch.rand(n, dtype=torch.float64),
        torch.rand(1, dtype=torch.float64)[0],
        torch.tensor(inputs.target_probs, dtype=torch.float64),
    )
    return [inputs.tokens[i] for i in accepted] + [final]
