"""A chain verifier computed in float32 with torch, drawing with ``torch.rand`` and
``torch.multinomial`` as GPU code does. Truth: lossless up to float32 rounding (checked with
the float32 tolerance preset)."""

from __future__ import annotations

import torch

TRUTH = "LOSSLESS"
TOLERANCE = "float32"


def verify(inputs):
    p = torch.tensor(inputs.target_probs, dtype=torch.float32)
    q = torch.tensor(inputs.draft_probs, dtype=torch.float32)
    drafts = torch.tensor(inputs.draft_tokens, dtype=torch.long)
    k = drafts.numel()
    rows = torch.arange(k)
    ratio = p[rows, drafts] / q[rows, drafts]
    coins = torch.rand(k, dtype=torch.float32)
    for i in range(k):
        if coins[i] >= ratio[i]:
            residual = torch.clamp(p[i] - q[i], min=0.0)
            token = torch.multinomial(residual / residual.sum(), 1)
            return drafts[:i].tolist() + token.tolist()
    return drafts.tolist() + torch.multinomial(p[k], 1).tolist()
