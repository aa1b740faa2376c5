"""A port of vLLM v0's ``RejectionSampler`` (``vllm/model_executor/layers/rejection_sampler.py``
with ``spec_decode_base_sampler.py``), re-implemented here from its documented behaviour, not
copied. What is kept because the oracle must cope with it:

- ``forward(target_with_bonus_probs (B, K+1, V), bonus_token_ids (B, 1), draft_probs (B, K, V),
  draft_token_ids (B, K)) -> (B, K+1)`` with -1 after the first rejection;
- all K acceptance coins drawn at once (``rand_like``), ``u < min(1, p/q)``;
- the recovered law ``max(p - q, tiny) / sum``: clamped at the dtype's smallest positive value,
  so no token has probability exactly 0 and a race is run at every draft position;
- ``_multinomial`` compiled with ``@torch.jit.script``: an exponential race whose draws happen
  inside TorchScript, where Python-level routing cannot see them;
- counters that need ``init_gpu_tensors`` before the first call.

Truth: lossless. `BrokenRejectionSampler` is the same sampler with the recovered law taken from
p alone.
"""

from __future__ import annotations

import torch

TRUTH = "LOSSLESS"


@torch.jit.script
def _multinomial(probs: torch.Tensor, num_samples: int) -> torch.Tensor:
    """One sample per row by the exponential race: argmax(probs / E), E ~ Exp(1)."""
    exponentials = torch.empty_like(probs)
    exponentials.exponential_(1.0)
    return probs.div_(exponentials).argmax(dim=1).view(-1, num_samples)


class RejectionSampler(torch.nn.Module):
    """Modified rejection sampling over a batch of K-token drafts."""

    def __init__(self, strict_mode: bool = False, recovered_from_p_only: bool = False) -> None:
        super().__init__()
        self.strict_mode = strict_mode
        self.recovered_from_p_only = recovered_from_p_only
        self.num_accepted_tokens: torch.Tensor | None = None
        self.num_emitted_tokens: torch.Tensor | None = None
        self.num_draft_tokens = 0

    def init_gpu_tensors(self, device: str | int, device_type: str = "cuda") -> None:
        self.num_accepted_tokens = torch.tensor(0, dtype=torch.long, device=device)
        self.num_emitted_tokens = torch.tensor(0, dtype=torch.long, device=device)

    def forward(
        self,
        target_with_bonus_probs: torch.Tensor,
        bonus_token_ids: torch.Tensor,
        draft_probs: torch.Tensor,
        draft_token_ids: torch.Tensor,
    ) -> torch.Tensor:
        batch, k, vocab = draft_probs.shape  # (B, K, V)
        target_probs = target_with_bonus_probs[:, :-1]  # (B, K, V)
        accepted = self._accepted(target_probs, draft_probs, draft_token_ids)  # (B, K)
        recovered = _multinomial(
            self._recovered_probs(target_probs, draft_probs).reshape(-1, vocab), 1
        )
        return self._output(accepted, recovered.reshape(batch, k), draft_token_ids, bonus_token_ids)

    def _accepted(
        self, target_probs: torch.Tensor, draft_probs: torch.Tensor, draft_token_ids: torch.Tensor
    ) -> torch.Tensor:
        batch, k, _ = draft_probs.shape
        rows = torch.arange(batch)[:, None]  # (B, 1)
        cols = torch.arange(k)[None, :]  # (1, K)
        q_drafted = draft_probs[rows, cols, draft_token_ids]  # (B, K)
        p_drafted = target_probs[rows, cols, draft_token_ids]  # (B, K)
        uniforms = torch.rand_like(p_drafted)  # (B, K)
        ratio = torch.minimum(p_drafted / q_drafted, torch.ones(1, dtype=p_drafted.dtype))
        return uniforms < ratio

    def _recovered_probs(
        self, target_probs: torch.Tensor, draft_probs: torch.Tensor
    ) -> torch.Tensor:
        difference = target_probs if self.recovered_from_p_only else target_probs - draft_probs
        clamped = torch.clamp(difference, min=torch.finfo(target_probs.dtype).tiny)  # (B, K, V)
        return clamped / clamped.sum(dim=-1, keepdim=True)

    def _output(
        self,
        accepted: torch.Tensor,
        recovered: torch.Tensor,
        draft_token_ids: torch.Tensor,
        bonus_token_ids: torch.Tensor,
    ) -> torch.Tensor:
        batch, k = recovered.shape
        rejected = accepted == 0  # (B, K)
        first_rejection = rejected.max(1).indices  # (B,)
        first_rejection[~rejected.any(1)] = k
        positions = torch.arange(k).unsqueeze(0)  # (1, K)
        keep = positions < first_rejection.unsqueeze(1)  # (B, K)
        at_rejection = positions == first_rejection.unsqueeze(1)  # (B, K)
        out = -torch.ones((batch, k + 1), dtype=torch.long)  # (B, K+1)
        out[:, :k] = torch.where(keep, draft_token_ids, -torch.ones_like(draft_token_ids))
        out[:, -1] = torch.where(out[:, k - 1] != -1, bonus_token_ids.squeeze(-1), -1)
        head = out[:, :k]
        head.mul_(~at_rejection).add_(recovered.mul(at_rejection))
        assert self.num_accepted_tokens is not None and self.num_emitted_tokens is not None
        self.num_accepted_tokens += accepted.sum()
        self.num_emitted_tokens += (out != -1).sum()
        self.num_draft_tokens += batch * k
        return out


class BrokenRejectionSampler(RejectionSampler):
    """The sampler with one line wrong: the recovered token drawn from p, not max(p - q, 0)."""

    def __init__(self) -> None:
        super().__init__(recovered_from_p_only=True)
