"""EAGLE-1-style tree verification on candidate paths: the children of a node are the draft's
top-k tokens (deterministic), so a child x is accepted with probability p(x); on rejection x is
removed from p (p(x) = 0, renormalize) and the next child is tried. Works on the
(candidates, retrieve_indices) format, numpy Generator draws. Truth: lossless on deterministic
children."""

from __future__ import annotations

import numpy as np

TRUTH = "LOSSLESS"
FAMILIES = ("deterministic",)


def evaluate_posterior(candidates, retrieve_indices, target_probs, gen):
    """Returns (accepted tokens, next token) walking the candidate paths level by level."""
    accepted = []
    alive = np.ones(len(candidates), dtype=bool)
    for depth in range(candidates.shape[1] + 1):
        p = np.array(target_probs[retrieve_indices[np.argmax(alive), depth]], dtype=np.float64)
        tried = []
        for path in np.flatnonzero(alive):
            x = candidates[path, depth] if depth < candidates.shape[1] else -1
            if x < 0 or x in tried:
                continue
            tried.append(x)
            if gen.random() < p[x]:
                accepted.append(int(x))
                alive &= candidates[:, depth] == x
                break
            p[x] = 0.0
            p = p / p.sum()
        else:
            return accepted, int(gen.choice(len(p), p=p))
    raise AssertionError("unreachable: the deepest level has no candidates")


def verify(tree):
    gen = np.random.default_rng()
    accepted, nxt = evaluate_posterior(
        tree.candidates, tree.retrieve_indices, tree.target_probs, gen
    )
    return [*accepted, nxt]
