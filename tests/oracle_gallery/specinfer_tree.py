"""SpecInfer-style recursive tree verification (multi-step speculative sampling): at each node,
children are tried in order; child x drawn from q is accepted with probability
min(1, p(x) / q(x)), else p becomes normalize(max(p - q, 0)) and the next child is tried; when
all fail, a token is sampled from what is left of p. For siblings drawn independently (with
replacement, from one or several draft models). Truth: lossless on those families."""

from __future__ import annotations

import random

import numpy as np

TRUTH = "LOSSLESS"
FAMILIES = ("chain", "independent", "mixed_levels")


def _sample(law):
    return random.choices(range(len(law)), weights=list(law))[0]


def verify(tree):
    node, emitted = 0, []
    while True:
        p = np.array(tree.target_probs[node], dtype=np.float64)
        for child in tree.children(node):
            x, q = tree.tokens[child], np.asarray(tree.draft_probs[child], dtype=np.float64)
            if random.random() < min(1.0, p[x] / q[x]):
                emitted.append(x)
                node = child
                break
            p = np.maximum(p - q, 0.0)
            p = p / p.sum()
        else:
            return [*emitted, _sample(p)]
