"""The textbook chain verifier (Leviathan et al. 2023, Chen et al. 2023), in numpy, drawing
through the oracle's `RandomSource`. Truth: lossless."""

from __future__ import annotations

import numpy as np

TRUTH = "LOSSLESS"


def verify(inputs, rng):
    p, q, drafts = inputs.target_probs, inputs.draft_probs, inputs.draft_tokens
    for i, x in enumerate(drafts):
        if rng.bernoulli(min(1.0, float(p[i, x] / q[i, x]))):
            continue
        residual = np.maximum(p[i] - q[i], 0.0)
        return [*drafts[:i], rng.categorical(residual / residual.sum())]
    return [*drafts, rng.categorical(p[len(drafts)])]
