"""A vLLM-style rejection sampler, vectorized: a batch of requests with flattened draft tokens,
one seeded ``torch.Generator`` per request, all uniforms drawn at once, a recovered token
computed for *every* draft position by the exponential race with one row of exponentials per
request (``prob.div(q).argmax(-1)``), the bonus token sampled by the same race beforehand, then a
per-request pass that keeps the accepted prefix and writes placeholders after it. Written here
in that idiom (not vLLM's code). Truth: lossless."""

from __future__ import annotations

import torch

TRUTH = "LOSSLESS"
PLACEHOLDER = -1


def random_sample(probs, generators):
    """The sampler's race: one row of exponentials per request."""
    rows = []
    for i in range(probs.shape[0]):
        q = torch.empty(probs.shape[-1], dtype=probs.dtype).exponential_(generator=generators[i])
        rows.append(probs[i].div(q).argmax(dim=-1))
    return rows


def generate_uniform_probs(num_tokens, num_draft_tokens, generators):
    parts = []
    for i, k in enumerate(num_draft_tokens):
        parts.append(torch.rand((k,), dtype=torch.float64, generator=generators[i]))
    return torch.cat(parts) if len(parts) > 1 else parts[0]


def sample_recovered_tokens(draft_probs, target_probs, num_draft_tokens, generators):
    """A recovered token for every draft position: argmax(max(p - q, 0) / E), E per request."""
    recovered, start = [], 0
    for i, k in enumerate(num_draft_tokens):
        prob = torch.clamp(target_probs[start : start + k] - draft_probs[start : start + k], min=0)
        q = torch.empty(prob.shape[-1], dtype=prob.dtype).exponential_(generator=generators[i])
        recovered.append(prob.div(q.unsqueeze(0)).argmax(dim=-1))  # (k,)
        start += k
    return recovered


def rejection_sample(
    draft_token_ids, num_draft_tokens, draft_probs, target_probs, bonus_token_ids, generators
):
    batch, max_k = len(num_draft_tokens), max(num_draft_tokens)
    uniform_probs = generate_uniform_probs(len(draft_token_ids), num_draft_tokens, generators)
    recovered = sample_recovered_tokens(draft_probs, target_probs, num_draft_tokens, generators)
    output = torch.full((batch, max_k + 1), PLACEHOLDER, dtype=torch.long)
    rows = torch.arange(len(draft_token_ids))
    draft_p = draft_probs[rows, draft_token_ids]
    target_p = target_probs[rows, draft_token_ids]
    start = 0
    for req in range(batch):
        k, rejected = num_draft_tokens[req], False
        for pos in range(k):
            token = start + pos
            if draft_p[token] > 0 and target_p[token] / draft_p[token] >= uniform_probs[token]:
                output[req, pos] = draft_token_ids[token]
            else:
                output[req, pos] = recovered[req][pos]
                rejected = True
                break
        if not rejected:
            output[req, k] = bonus_token_ids[req]
        start += k
    return output


def verify(inputs):
    k = len(inputs.draft_tokens)
    gen = torch.Generator()
    gen.manual_seed(1234)
    target = torch.tensor(inputs.target_probs, dtype=torch.float64)
    bonus = random_sample(target[k:].clone(), {0: gen})
    out = rejection_sample(
        torch.tensor(inputs.draft_tokens, dtype=torch.long),
        [k],
        torch.tensor(inputs.draft_probs, dtype=torch.float64),
        target[:k],
        bonus,
        {0: gen},
    )
    row = out[0].tolist()
    return row[: row.index(PLACEHOLDER)] if PLACEHOLDER in row else row
