"""A rejection sampler in Triton, in vLLM v1's calling convention, with planted bugs.

Written from the algorithm (docs/algorithm.md) for the oracle's tests: the layout is vLLM
v1's (a flat batch of drafts, cumulative draft counts, a (B, K+1) int32 output padded with -1,
uniforms in float64, one row of exponentials per request raced by ``weights * (1 / E)``), the
code is this project's. ``rejection_sample(..., bug=NAME)`` runs one of `BUGS`, each a one-line
change. The kernels run in Triton's interpreter (``TRITON_INTERPRET=1``, set before import).
"""

from __future__ import annotations

import dataclasses
import os
from types import SimpleNamespace
from typing import Any

import torch

os.environ.setdefault("TRITON_INTERPRET", "1")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

PLACEHOLDER = -1
GREEDY_TEMPERATURE = -1

#: The planted bugs: name -> what the one changed line does.
BUGS = {
    "residual_from_p": "the recovered token races p, not max(p - q, 0)",
    "accept_without_q": "a draft is accepted when u < p, not u < p / q",
    "bonus_from_q": "the bonus token is drawn from the last draft law q, not passed in",
    "placeholder_off_by_one": "the recovered token is written one slot after the rejected draft",
    "shared_uniform": "every position compares the request's first uniform",
    "greedy_kernel_on_every_request": "the greedy kernel writes random requests' rows too "
    "(seen only when a batch mixes greedy and random requests)",
}

#: The planted bugs of the two `RejectionSampler` forms: name -> the one changed line.
FORWARD_BUGS = {
    "bonus_from_a_draft_row": "the sampler gets the last draft row's logits, not the bonus row",
    "logits_as_probs": "the target logits are passed on as if they were probabilities",
}


@triton.jit
def _span(cu_ptr, req):
    """The first draft of request ``req`` and its number of drafts."""
    start = tl.load(cu_ptr + req - 1, mask=req > 0, other=0)
    return start, tl.load(cu_ptr + req) - start


@triton.jit
def greedy_kernel(
    out_ptr, cu_ptr, draft_ptr, argmax_ptr, bonus_ptr, greedy_ptr, max_spec_len, EVERY: tl.constexpr
):
    req = tl.program_id(0)
    if EVERY or tl.load(greedy_ptr + req):
        start, n = _span(cu_ptr, req)
        row = out_ptr + req * (max_spec_len + 1)
        rejected = False
        for pos in range(n):
            if not rejected:
                best = tl.load(argmax_ptr + start + pos)
                tl.store(row + pos, best)
                rejected = tl.load(draft_ptr + start + pos) != best
        if not rejected:
            tl.store(row + n, tl.load(bonus_ptr + req))


@triton.jit
def recovered_kernel(
    rec_ptr,
    cu_ptr,
    draft_ptr,
    q_ptr,
    p_ptr,
    inv_e_ptr,
    vocab,
    BLOCK: tl.constexpr,
    NO_Q: tl.constexpr,
    RESIDUAL_FROM_P: tl.constexpr,
    PAD_SCORE: tl.constexpr,
    CLAMP: tl.constexpr,
):
    """The residual max(p - q, 0) of every draft position, sampled by an exponential race; lanes
    past the vocabulary score PAD_SCORE (-inf, or a value <= 0 that only ties at 0)."""
    req = tl.program_id(0)
    pos = tl.program_id(1)
    start, n = _span(cu_ptr, req)
    if pos < n:
        i = start + pos
        lanes = tl.arange(0, BLOCK)
        inside = lanes < vocab
        p = tl.load(p_ptr + i * vocab + lanes, mask=inside, other=0.0)
        if NO_Q:  # the draft was a point mass on its token: the residual is p without it
            residual = tl.where(lanes == tl.load(draft_ptr + i), 0.0, p)
        elif RESIDUAL_FROM_P:
            residual = p
        else:
            q = tl.load(q_ptr + i * vocab + lanes, mask=inside, other=0.0)
            residual = tl.maximum(p - q, 0.0) if CLAMP else p - q
        inv_e = tl.load(inv_e_ptr + req * vocab + lanes, mask=inside, other=0.0)
        score = tl.where(inside, residual * inv_e, PAD_SCORE)
        tl.store(rec_ptr + i, tl.argmax(score, axis=0))


@triton.jit
def accept_kernel(
    out_ptr,
    cu_ptr,
    draft_ptr,
    q_ptr,
    p_ptr,
    bonus_ptr,
    rec_ptr,
    u_ptr,
    greedy_ptr,
    max_spec_len,
    vocab,
    NO_Q: tl.constexpr,
    ACCEPT_WITHOUT_Q: tl.constexpr,
    SHARED_UNIFORM: tl.constexpr,
    RECOVERED_SHIFT: tl.constexpr,
):
    """Accept draft i with probability min(1, p/q): u < p / q; on the first rejection emit the
    recovered token; when every draft is accepted, the bonus token."""
    req = tl.program_id(0)
    if not tl.load(greedy_ptr + req):
        start, n = _span(cu_ptr, req)
        row = out_ptr + req * (max_spec_len + 1)
        rejected = False
        for pos in range(n):
            if not rejected:
                i = start + pos
                token = tl.load(draft_ptr + i)
                p = tl.load(p_ptr + i * vocab + token)
                q = 1.0 if NO_Q else tl.load(q_ptr + i * vocab + token)
                u = tl.load(u_ptr + start) if SHARED_UNIFORM else tl.load(u_ptr + i)
                threshold = p if ACCEPT_WITHOUT_Q else p / q
                if q > 0 and u < threshold:
                    tl.store(row + pos, token)
                else:
                    rejected = True
                    tl.store(row + pos + RECOVERED_SHIFT, tl.load(rec_ptr + i))
        if not rejected:
            tl.store(row + n, tl.load(bonus_ptr + req))


def rejection_sample(
    draft_token_ids: torch.Tensor,
    num_draft_tokens: list[int],
    max_spec_len: int,
    cu_num_draft_tokens: torch.Tensor,
    draft_probs: torch.Tensor | None,
    target_probs: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    sampling_metadata: Any,
    bug: str | None = None,
    pad_score: float = float("-inf"),
    clamp: bool = True,
) -> torch.Tensor:
    """Emitted tokens per request, (B, max_spec_len + 1) int32, padded with PLACEHOLDER.
    Two variations that are not bugs: ``pad_score``, the race score of lanes past the vocabulary
    (any value <= 0), and ``clamp=False``, the residual p - q raced unclamped (a negative score
    never beats a positive one, and a rejection leaves some p > q)."""
    if bug is not None and bug not in BUGS:
        raise ValueError(f"unknown bug {bug!r}; known: {', '.join(BUGS)}")
    assert bonus_token_ids.is_contiguous()  # a layout query, as vLLM v1 makes: no decision
    batch, (n_tokens, vocab) = len(num_draft_tokens), target_probs.shape
    out = torch.full((batch, max_spec_len + 1), PLACEHOLDER, dtype=torch.int32)
    greedy = sampling_metadata.temperature == GREEDY_TEMPERATURE
    if not sampling_metadata.all_random:
        argmax = target_probs.argmax(dim=-1)
        every = bug == "greedy_kernel_on_every_request"
        greedy_kernel[(batch,)](
            out,
            cu_num_draft_tokens,
            draft_token_ids,
            argmax,
            bonus_token_ids,
            greedy,
            max_spec_len,
            EVERY=every,
        )
        if sampling_metadata.all_greedy:
            return out
    generators = sampling_metadata.generators
    starts = [sum(num_draft_tokens[:r]) for r in range(batch)]
    uniforms = torch.rand(n_tokens, dtype=torch.float64)
    exponentials = torch.empty(batch, vocab, dtype=torch.float64).exponential_()
    for req, generator in generators.items():
        if num_draft_tokens[req] > 0:
            span = slice(starts[req], starts[req] + num_draft_tokens[req])
            uniforms[span].uniform_(generator=generator)
            exponentials[req].exponential_(generator=generator)
    if bug == "bonus_from_q":
        last = draft_probs[n_tokens - 1] if draft_probs is not None else target_probs[-1]
        race = torch.empty(vocab, dtype=torch.float64).exponential_()
        bonus_token_ids = (last / race).argmax().reshape(1, 1)
    recovered = torch.empty_like(draft_token_ids)
    no_q = draft_probs is None
    recovered_kernel[(batch, max_spec_len)](
        recovered,
        cu_num_draft_tokens,
        draft_token_ids,
        draft_probs,
        target_probs,
        exponentials.reciprocal(),
        vocab,
        BLOCK=triton.next_power_of_2(vocab),
        NO_Q=no_q,
        RESIDUAL_FROM_P=bug == "residual_from_p",
        PAD_SCORE=pad_score,
        CLAMP=clamp,
    )
    accept_kernel[(batch,)](
        out,
        cu_num_draft_tokens,
        draft_token_ids,
        draft_probs,
        target_probs,
        bonus_token_ids,
        recovered,
        uniforms,
        greedy,
        max_spec_len,
        vocab,
        NO_Q=no_q,
        ACCEPT_WITHOUT_Q=bug == "accept_without_q",
        SHARED_UNIFORM=bug == "shared_uniform",
        RECOVERED_SHIFT=1 if bug == "placeholder_off_by_one" else 0,
    )
    return out


# ------------------------------------------------------------------ the RejectionSampler forms
class RejectionSampler(torch.nn.Module):
    """The sampler as a module, in the form of vLLM v1's current ``RejectionSampler``: built with
    the ``Sampler`` that draws each request's bonus token from its row after the drafts;
    ``forward(metadata, draft_probs, logits (num_tokens + B, V), sampling_metadata)`` returns an
    object whose ``sampled_token_ids`` is the (B, K+1) result."""

    def __init__(self, sampler: Any, bug: str | None = None) -> None:
        super().__init__()
        self.sampler, self.bug = sampler, _forward_bug(bug)

    def forward(
        self, metadata: Any, draft_probs: torch.Tensor | None, logits: torch.Tensor, sampling: Any
    ) -> SimpleNamespace:
        bonus_rows = metadata.bonus_logits_indices - int(self.bug == "bonus_from_a_draft_row")
        once = dataclasses.replace(sampling, max_num_logprobs=-1)
        bonus = self.sampler(logits=logits[bonus_rows], sampling_metadata=once).sampled_token_ids
        target_logits = logits[metadata.target_logits_indices]
        out = _sample(metadata, draft_probs, target_logits, bonus, sampling, self.bug)
        return SimpleNamespace(sampled_token_ids=out)


class RejectionSamplerBonusIn(torch.nn.Module):
    """The earlier form: built with no arguments, ``forward(metadata, draft_probs, target_logits
    (num_tokens, V), bonus_token_ids (B, 1), sampling_metadata)`` returns the (B, K+1) result."""

    def __init__(self, bug: str | None = None) -> None:
        super().__init__()
        self.bug = _forward_bug(bug)

    def forward(
        self,
        metadata: Any,
        draft_probs: torch.Tensor | None,
        target_logits: torch.Tensor,
        bonus_token_ids: torch.Tensor,
        sampling: Any,
    ) -> torch.Tensor:
        return _sample(metadata, draft_probs, target_logits, bonus_token_ids, sampling, self.bug)


def _forward_bug(bug: str | None) -> str | None:
    """``bug``, when it is None or one of `FORWARD_BUGS`."""
    if bug is not None and bug not in FORWARD_BUGS:
        raise ValueError(f"unknown bug {bug!r}; known: {', '.join(FORWARD_BUGS)}")
    return bug


def _sample(
    metadata: Any,
    draft_probs: torch.Tensor | None,
    target_logits: torch.Tensor,
    bonus_token_ids: torch.Tensor,
    sampling: Any,
    bug: str | None,
) -> torch.Tensor:
    """Both forms' rejection step: the target law from the logits, then `rejection_sample`."""
    target = target_law(target_logits, metadata, sampling, bug)
    return rejection_sample(
        metadata.draft_token_ids,
        metadata.num_draft_tokens,
        metadata.max_spec_len,
        metadata.cu_num_draft_tokens,
        draft_probs,
        target,
        bonus_token_ids,
        sampling,
    )


def target_law(logits: torch.Tensor, metadata: Any, sampling: Any, bug: str | None) -> torch.Tensor:
    """Each draft row's target law: the softmax of its logits at its request's temperature
    (greedy rows keep their logits: only their argmax is read)."""
    if sampling.all_greedy or bug == "logits_as_probs":
        return logits
    per_row = sampling.temperature.repeat_interleave(torch.tensor(metadata.num_draft_tokens))
    per_row = torch.where(per_row == GREEDY_TEMPERATURE, 1.0, per_row)
    return torch.softmax(logits / per_row[:, None], dim=-1)
