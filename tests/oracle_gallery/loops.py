"""Whole speculative decoding loops on HF-style models (``model(input_ids) -> logits``), with
the signature `check_loop` runs: ``generate(target, draft, prompt, max_new_tokens,
temperature)``. One correct loop and two with bugs a single-step check cannot see:
a generator re-seeded every step, and a drafter that reports q at the wrong temperature."""

from __future__ import annotations

import torch

K = 2


def _law(logits, temperature):
    return torch.softmax(logits / temperature, dim=-1)


def _speculate(
    target, draft, prompt, max_new_tokens, temperature, *, reseed=False, q_temperature=None
):
    ids = list(prompt)
    gen = torch.Generator()
    while len(ids) - len(prompt) < max_new_tokens:
        if reseed:
            gen.manual_seed(2024)  # the bug: every step replays the same uniforms
        drafted, qs = [], []
        for _ in range(K):
            logits = draft(torch.tensor([ids + drafted]))[0, -1]
            law = _law(logits, temperature)
            token = int(torch.multinomial(law, 1, generator=gen))
            # The bug of q_temperature: the q handed to the verifier is not the drafting law.
            qs.append(law if q_temperature is None else _law(logits, q_temperature))
            drafted.append(token)
        p = _law(target(torch.tensor([ids + drafted]))[0, -K - 1 :], temperature)  # (K+1, V)
        for i, x in enumerate(drafted):
            if torch.rand(1, generator=gen) < p[i, x] / qs[i][x]:
                ids.append(x)
                continue
            residual = torch.clamp(p[i] - qs[i], min=0)
            ids.append(int(torch.multinomial(residual / residual.sum(), 1, generator=gen)))
            break
        else:
            ids.append(int(torch.multinomial(p[K], 1, generator=gen)))
    return ids[len(prompt) :]


def correct_loop(target, draft, prompt, max_new_tokens, temperature):
    """Truth: lossless."""
    return _speculate(target, draft, prompt, max_new_tokens, temperature)


def reseeding_loop(target, draft, prompt, max_new_tokens, temperature):
    """Truth: not lossless (each step reuses the previous step's random numbers)."""
    return _speculate(target, draft, prompt, max_new_tokens, temperature, reseed=True)


def wrong_temperature_drafter(target, draft, prompt, max_new_tokens, temperature):
    """Truth: not lossless at temperature != 1 (q reported at temperature 1)."""
    return _speculate(target, draft, prompt, max_new_tokens, temperature, q_temperature=1.0)
