"""Recycled tokens: a near-free draft built from what the target already predicted.

Idea (Token Recycling, Luo et al., 2024, arXiv 2408.08696): every verify forward computes the
target's next-token distribution at every tree node, but only the accepted path is used. The
top candidates at each node are still good guesses for "what usually follows this token", so we
keep them in an adjacency table ``token -> its most likely successors`` (the latest observation
overwrites the older one) and draft by walking the table: from the last token, take its first
successor, then that token's first successor, and so on. Proposals cost a dictionary lookup, no
forward.

Deviation: Token Recycling drafts a static tree template from the table; here the table offers
a chain plus top alternatives at its first position, and DyTC decides length and width like any
other draft. Proposals depend only on earlier steps' forwards, never on the coins of the step
that verifies them, so they are `DETERMINISTIC` children (rule 4) and the loop stays lossless.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch


class TokenRecycler:
    """Adjacency table ``token -> (successors, target probabilities)``, updated per forward."""

    def __init__(self, width: int = 4) -> None:
        if width < 1:
            raise ValueError(f"TokenRecycler width must be >= 1, got {width}")
        self.width = width
        self.successors: dict[int, tuple[list[int], list[float]]] = {}

    def update(self, tokens: Sequence[int], logits: torch.Tensor) -> None:
        """Record the target's top-`width` next tokens after each of `tokens`.

        Args:
            tokens: the tokens fed to one target forward (a tree's nodes, root first).
            logits: that forward's logits ``(len(tokens), V)``.
        """
        probs = torch.softmax(logits.float(), dim=-1)  # (N, V)
        top = torch.topk(probs, min(self.width, probs.shape[-1]), dim=-1)  # (N, width)
        ids, values = top.indices.tolist(), top.values.tolist()
        for token, succ, prob in zip(tokens, ids, values, strict=True):
            self.successors[int(token)] = (succ, prob)

    def alternatives(self, token: int, width: int) -> list[tuple[int, float]]:
        """The top-`width` recorded successors of `token` with their probabilities."""
        succ, prob = self.successors.get(token, ([], []))
        return list(zip(succ[:width], prob[:width], strict=True))

    def chain(self, token: int, k: int) -> list[tuple[int, float]]:
        """Walk the table greedily from `token` for up to `k` tokens: (token, probability)."""
        out: list[tuple[int, float]] = []
        while len(out) < k and token in self.successors:
            succ, prob = self.successors[token]
            token = succ[0]
            out.append((token, prob[0]))
        return out
