"""The glue mistakes a maintainer makes when pointing the oracle at their code by hand: each one
must come back as a contract error (exit 3) naming the calling convention, never as NOT
LOSSLESS. Each wraps a correct verifier, so the law itself is right."""

from __future__ import annotations

import torch
from transformers.generation.utils import _speculative_sampling

from casspec_ref.proof import ChainInputs
from oracle_gallery import vllm_v0_port


def _hf_arguments(inputs: ChainInputs) -> tuple[torch.Tensor, torch.Tensor, int, torch.Tensor]:
    ids = torch.tensor([[0, *inputs.draft_tokens]])  # (1, 1+K)
    candidate_logits = torch.tensor(inputs.draft_probs).log()[None]  # (1, K, V)
    new_logits = torch.tensor(inputs.target_probs).log()[None]  # (1, K+1, V)
    return ids, candidate_logits, len(inputs.draft_tokens), new_logits


def returns_hf_tuple(inputs: ChainInputs):  # type: ignore[no-untyped-def]
    """transformers' (valid_tokens, n_matches) returned as it is, under the chain convention."""
    return _speculative_sampling(*_hf_arguments(inputs))


def returns_vllm_padding(inputs: ChainInputs) -> list[int]:
    """vLLM's (1, K+1) row returned with its -1 padding, under the chain convention."""
    sampler = vllm_v0_port.RejectionSampler()
    sampler.init_gpu_tensors("cpu", device_type="cpu")
    k = len(inputs.draft_tokens)
    target = torch.tensor(inputs.target_probs)[None]  # (1, K+1, V)
    bonus = torch.multinomial(target[0, k], 1)[None]  # (1, 1)
    draft = torch.tensor(inputs.draft_probs)[None]  # (1, K, V)
    out = sampler(target, bonus, draft, torch.tensor([inputs.draft_tokens]))
    return out[0].tolist()


def wrong_signature(target_probs, draft_probs):  # type: ignore[no-untyped-def]
    """Two laws where the chain convention passes (inputs[, rng])."""
    return [0]
