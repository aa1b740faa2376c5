"""Medusa-style typical acceptance: a drafted token is accepted when its target probability
exceeds min(epsilon, delta * exp(-entropy)), the longest accepted prefix is kept, then one
token is sampled from the target law. Faster and deliberately lossy. Truth: not lossless."""

from __future__ import annotations

import torch

TRUTH = "NOT LOSSLESS"


def verify(inputs, posterior_threshold=0.09, posterior_alpha=0.3):
    p = torch.tensor(inputs.target_probs, dtype=torch.float64)
    entropy = -(p * torch.log(p.clamp_min(1e-12))).sum(dim=-1)
    threshold = torch.minimum(
        torch.full_like(entropy, posterior_threshold), posterior_alpha * torch.exp(-entropy)
    )
    n = 0
    for i, x in enumerate(inputs.draft_tokens):
        if p[i, x] <= threshold[i]:
            break
        n += 1
    last = torch.multinomial(p[n], 1)
    return [*inputs.draft_tokens[:n], int(last)]
