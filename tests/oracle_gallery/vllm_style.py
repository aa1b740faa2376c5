"""A vLLM-style rejection sampler: a batch of requests with flattened draft tokens, one
seeded ``torch.Generator`` per request, uniforms drawn per request, recovered tokens and the
bonus token sampled by the exponential race (``probs.div_(q.exponential_()).argmax()``),
placeholder -1 after the first rejection. Written here in that idiom (not vLLM's code).
Truth: lossless."""

from __future__ import annotations

import torch

TRUTH = "LOSSLESS"
PLACEHOLDER = -1


def _race(probs, generator):
    q = torch.empty_like(probs)
    q.exponential_(generator=generator)
    return probs.div(q).argmax(dim=-1)


def rejection_sample(
    draft_token_ids, num_draft_tokens, draft_probs, target_probs, bonus_probs, generators
):
    """draft_token_ids (T,), draft_probs/target_probs (T, V) for the T flattened draft tokens,
    bonus_probs (B, V); returns (B, max_k + 1) with PLACEHOLDER after the emitted tokens."""
    batch = len(num_draft_tokens)
    max_k = max(num_draft_tokens)
    out = torch.full((batch, max_k + 1), PLACEHOLDER, dtype=torch.long)
    start = 0
    for req in range(batch):
        k = num_draft_tokens[req]
        gen = generators[req]
        ids = draft_token_ids[start : start + k]
        rows = torch.arange(start, start + k)
        draft_p = draft_probs[rows, ids]
        target_p = target_probs[rows, ids]
        uniform = torch.rand((k,), dtype=torch.float64, generator=gen)
        accepted = (draft_p > 0) & (target_p / draft_p >= uniform)
        rejected_at = k
        for pos in range(k):
            if not bool(accepted[pos]):
                rejected_at = pos
                break
            out[req, pos] = ids[pos]
        if rejected_at < k:
            row = start + rejected_at
            residual = torch.clamp(target_probs[row] - draft_probs[row], min=0)
            out[req, rejected_at] = _race(residual, gen)
        else:
            out[req, k] = _race(bonus_probs[req].clone(), gen)
        start += k
    return out


def verify(inputs):
    k = len(inputs.draft_tokens)
    gen = torch.Generator()
    gen.manual_seed(1234)
    target = torch.tensor(inputs.target_probs, dtype=torch.float64)
    out = rejection_sample(
        torch.tensor(inputs.draft_tokens, dtype=torch.long),
        [k],
        torch.tensor(inputs.draft_probs, dtype=torch.float64),
        target[:k],
        target[k:],
        {0: gen},
    )
    row = out[0].tolist()
    return row[: row.index(PLACEHOLDER)] if PLACEHOLDER in row else row
