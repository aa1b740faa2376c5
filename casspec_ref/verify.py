"""THE verifier: lossless rejection sampling over a draft token tree (chains are trees).

Every decoder calls `verify_tree` (docs/method.md §5, proofs in docs/algorithm.md). From the
root, the children of the current node are tested in drafting order against the residual r of
the processed target law p there: child x ~ q is accepted with probability min(1, r(x) / q(x)),
on rejection r <- norm(max(r - q, 0)). q is the child's own law (`INDEPENDENT`), the siblings'
law with the earlier ones removed (`WITHOUT_REPLACEMENT`) or one-hot on x (`DETERMINISTIC`). The
walk moves to an accepted child; when all are rejected, or at a leaf, the next token is drawn
from r (p itself where nothing was tested: the bonus token). Edge cases: docs/design.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from casspec_ref.base.law_checks import check_law, check_max_accept, node_laws, one, one_hot, zero
from casspec_ref.sampling import RandomSource
from casspec_ref.tree import ChildRule, DraftTree


@dataclass
class VerifyResult:
    """What one verification produced."""

    accepted: list[int]  # the accepted path's nodes, root excluded, in order
    accepted_tokens: list[int]
    next_token: int | None  # the residual sample or the bonus token; None after a stop token
    stopped: bool = False  # the last accepted node is a stop token
    decisions: list[tuple[int, bool]] = field(default_factory=list)  # (child, accepted?) tested

    @property
    def emitted(self) -> list[int]:
        """The tokens this step commits: the accepted drafts, then the next token if any."""
        tail = [] if self.next_token is None else [self.next_token]
        return self.accepted_tokens + tail


def verify_tree(
    tree: DraftTree,
    target_probs: Sequence[np.ndarray] | np.ndarray | torch.Tensor,
    rng: RandomSource,
    *,
    stop_ids: Iterable[int] = (),
    max_accept: int | None = None,
) -> VerifyResult:
    """Verify `tree` against one processed target law per node, in node order (1-D float64 or
    `Fraction` arrays, or an (N, V) array or tensor). Nothing is accepted after a token of
    `stop_ids`, nor after `max_accept` drafted tokens (None: no limit)."""
    laws = node_laws(target_probs, len(tree))
    check_max_accept(max_accept)
    stops = frozenset(int(s) for s in stop_ids)
    vocab = check_law(laws[0], "target", 0).shape[0]

    node = 0
    result = VerifyResult(accepted=[], accepted_tokens=[], next_token=None)
    while True:
        residual = check_law(laws[node], "target", node, vocab)
        children = tree.children(node)
        if max_accept is not None and len(result.accepted) >= max_accept:
            children = []  # the length limit: this node acts as a leaf
        chosen, residual = _test_children(tree, node, children, residual, rng, result.decisions)
        if chosen is None:
            result.next_token = int(rng.categorical(residual))
            return result
        result.accepted.append(chosen)
        result.accepted_tokens.append(tree.token(chosen))
        if tree.token(chosen) in stops:
            result.stopped = True
            return result
        node = chosen


def _test_children(
    tree: DraftTree,
    node: int,
    children: list[int],
    residual: np.ndarray,
    rng: RandomSource,
    decisions: list[tuple[int, bool]],
) -> tuple[int | None, np.ndarray]:
    """Test ``children`` in order; return (accepted child or None, residual after the tests)."""
    rule = tree.child_rule(node)
    conditional_q: np.ndarray | None = None  # WITHOUT_REPLACEMENT: q with earlier children removed
    removed: list[int] = []  # rejected WITHOUT_REPLACEMENT siblings not yet removed from q
    for child in children:
        token = tree.token(child)
        if rule is ChildRule.DETERMINISTIC:
            draft = one_hot(token, residual)
        elif rule is ChildRule.WITHOUT_REPLACEMENT:
            if conditional_q is None:
                conditional_q = check_law(tree.draft_probs(child), "draft", child, len(residual))
            for earlier in removed:
                # The law this child was really drawn from: q without the earlier siblings.
                conditional_q = _without(conditional_q, earlier)
            removed.clear()
            draft = conditional_q
        else:
            draft = check_law(tree.draft_probs(child), "draft", child, len(residual))
        draft_mass = draft[token]
        if draft_mass == 0:
            accept = False  # cannot have been drawn from this law: reject, never divide by 0
        else:
            ratio = residual[token] / draft_mass
            accept = rng.bernoulli(ratio if ratio < 1 else one(ratio))
        decisions.append((child, bool(accept)))
        if accept:
            return child, residual
        residual = _residual(residual, draft)
        if rule is ChildRule.WITHOUT_REPLACEMENT:
            removed.append(token)  # applied only if another sibling follows
    return None, residual


def _residual(law: np.ndarray, draft: np.ndarray) -> np.ndarray:
    """norm(max(law - draft, 0)) as a new array; ``law`` itself if that has no mass."""
    excess = law - draft  # (V,)
    excess = np.where(excess > 0, excess, zero(law))  # type: ignore[arg-type]
    mass = excess.sum()
    if mass == 0:
        # Only reachable after a probability-0 rejection (law == draft on its support).
        return law
    return excess / mass


def _without(draft: np.ndarray, token: int) -> np.ndarray:
    """The law of the next child drawn without replacement: ``draft`` with ``token`` removed."""
    rest = draft.copy()
    rest[token] = zero(draft)
    mass = rest.sum()
    if mass == 0:
        raise ValueError(
            "a WITHOUT_REPLACEMENT child follows siblings that exhaust the draft law's support"
        )
    return rest / mass
