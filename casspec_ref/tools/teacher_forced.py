"""Scoring a draft plan along a fixed trajectory as it would run inside speculative decoding.

Scope: the measurement behind SWIFT's "matchness" (docs/method.md §2) and the alpha of the DSIA
table (docs/dsia.md). During speculative decoding a draft proposing the token at position
``t + 1`` reads the *target's* K/V for positions ``<= t - 1`` and its own for the token it feeds.
`TeacherForced` reproduces exactly that for every position of a trajectory in one forward:

1. one target (identity-plan) forward over ``tokens[:-1]`` fills cache rows ``[0, n - 1)`` and
   gives the target's logits;
2. a draft forward feeds ``tokens[first - 1 : n - 1]`` as scratch rows ``[n - 1, n - 1 + W)``
   with an attention mask under which fed token ``i`` (position ``first - 1 + i``) sees the
   target rows ``j < first - 1 + i`` and its own scratch row only.

This equals W separate one-token draft forwards on the target's cache (a test checks it),
at the cost of one. Teacher forcing with the draft's *own* K/V for the prefix would measure a
different (worse, docs/smollm2.md: 0.15 vs 0.30) draft.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from casspec_ref.kv_cache import KVCache
from casspec_ref.plan import ExecutionPlan

if TYPE_CHECKING:
    from casspec_ref.model import Transformer


class TeacherForced:
    """The target's K/V and logits over one trajectory, and plan scoring against it.

    Args:
        model: the target.
        tokens: the trajectory (prompt + the target's own continuation).
        first: index of the first token to predict (``1 <= first < len(tokens)``); positions
            ``first .. n - 1`` are scored (W = n - first of them).
    """

    def __init__(self, model: Transformer, tokens: Sequence[int], first: int) -> None:
        n = len(tokens)
        if not 1 <= first < n:
            raise ValueError(f"TeacherForced first={first}: allowed are 1..{n - 1} for {n} tokens")
        self.model = model
        self.tokens = [int(t) for t in tokens]
        self.first = first
        self.width = n - first
        dtype = next(model.parameters()).dtype
        self.cache = KVCache(model.config, max_len=n - 1 + self.width, dtype=dtype, device="cpu")
        seq = torch.tensor([self.tokens[:-1]], dtype=torch.long)  # (1, n - 1)
        pos = torch.arange(n - 1, dtype=torch.long)[None]  # (1, n - 1)
        with torch.no_grad():
            logits = model.forward(seq, pos, cache=self.cache)  # (1, n - 1, V)
        self.target_logits = logits[0, first - 1 :]  # (W, V)
        self.next_tokens = torch.tensor(self.tokens[first:], dtype=torch.long)  # (W,)
        n_prefix = n - 1
        mask = torch.zeros(self.width, n_prefix + self.width, dtype=torch.bool)  # (W, S)
        for i in range(self.width):
            mask[i, : first - 1 + i] = True  # the target's verified rows before this position
            mask[i, n_prefix + i] = True  # the draft's own row for the token it feeds
        self.mask = mask
        self.draft_tokens = torch.tensor([self.tokens[first - 1 : n - 1]], dtype=torch.long)
        self.draft_positions = torch.arange(first - 1, n - 1, dtype=torch.long)[None]  # (1, W)

    def draft_logits(self, plan: ExecutionPlan) -> torch.Tensor:
        """The draft's logits ``(W, V)`` at every scored position, read from the target's K/V."""
        base = self.cache.length
        try:
            with torch.no_grad():
                out = self.model.forward(
                    self.draft_tokens,
                    self.draft_positions,
                    cache=self.cache,
                    attn_mask=self.mask,
                    plan=plan,
                )
        finally:
            self.cache.truncate(base)  # scratch rows never outlive the call
        return out[0]  # (W, V)

    def target_agreement(self) -> float:
        """How often the target's own prefill argmax equals the trajectory (1.0 for greedy
        trajectories up to batched-vs-incremental rounding; reported as a sanity check)."""
        return float((self.target_logits.argmax(-1) == self.next_tokens).float().mean())

    def matchness(self, plan: ExecutionPlan) -> float:
        """Fraction of scored positions where the plan's argmax is the trajectory's next token."""
        return float((self.draft_logits(plan).argmax(-1) == self.next_tokens).float().mean())
