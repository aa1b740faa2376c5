"""A Hugging Face transformers-style ``_speculative_sampling``: logits in, (valid tokens, number
of matches) out, vectorized acceptance with ``torch.rand_like`` and a cumulative-sum count,
``torch.multinomial`` for the last token. Written here in that idiom (not the library's code).
Truth: lossless."""

from __future__ import annotations

import numpy as np
import torch

TRUTH = "LOSSLESS"


def _speculative_sampling(candidate_input_ids, candidate_logits, candidate_length, new_logits):
    drafted = candidate_input_ids[:, -candidate_length:]  # (1, K)
    q = candidate_logits.softmax(dim=-1)  # (1, K, V)
    p = new_logits.softmax(dim=-1)  # (1, K + 1, V)
    positions = torch.arange(candidate_length)
    q_drafted = q[0, positions, drafted[0]]  # (K,)
    p_drafted = p[0, positions, drafted[0]]  # (K,)
    ratio = p_drafted / q_drafted
    uniforms = torch.rand_like(ratio)
    accepted = uniforms <= ratio
    n_matches = int(((~accepted).cumsum(dim=-1) < 1).sum())
    p_next = p[:, n_matches, :]
    if n_matches < candidate_length:
        leftover = torch.clamp(p_next - q[:, n_matches, :], min=0)
        leftover.div_(leftover.sum())
    else:
        leftover = p_next
    last = torch.multinomial(leftover, num_samples=1)  # (1, 1)
    valid = torch.cat((drafted[:, :n_matches], last), dim=-1)
    return valid, n_matches


def verify(inputs):
    """The glue a user writes: processed laws as logits (log p), the candidate ids."""
    k = len(inputs.draft_tokens)
    ids = torch.tensor([[0, *inputs.draft_tokens]])
    with np.errstate(divide="ignore"):
        candidate_logits = torch.tensor(np.log(inputs.draft_probs.astype(np.float64)))[None]
        new_logits = torch.tensor(np.log(inputs.target_probs.astype(np.float64)))[None]
    valid, _ = _speculative_sampling(ids, candidate_logits, k, new_logits)
    return valid[0].tolist()
