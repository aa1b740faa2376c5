"""Recycled tokens (Token Recycling, Luo et al., 2024, arXiv 2408.08696), a near-free draft: a table
``token -> its most likely successors`` keeps what each verify forward predicted at every tree
node, and drafting walks it with no forward. See docs/dsia.md."""

from collections.abc import Sequence

import torch

from casspec_ref.base.dsia_checks import check_recycler_width


class TokenRecycler:
    """Adjacency table ``token -> (successors, target probabilities)``, updated per forward."""

    def __init__(self, width: int = 4) -> None:
        check_recycler_width(width)
        self.width = width
        self.successors: dict[int, tuple[list[int], list[float]]] = {}

    def update(self, tokens: Sequence[int], logits: torch.Tensor) -> None:
        """Record the top-`width` successors of each token one target forward fed (tree nodes)."""
        probs = torch.softmax(logits.float(), dim=-1)  # (N, V)
        values, ids = torch.topk(probs, min(self.width, probs.shape[-1]), dim=-1)  # (N, width)
        for token, succ, prob in zip(tokens, ids.tolist(), values.tolist(), strict=True):
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
