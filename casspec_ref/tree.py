"""The draft token tree: nodes, how each node's children were proposed, tree attention.

A `DraftTree` holds one speculative step's drafted tokens, the law each sampled token was drawn
from and, per node, how its children were proposed (`ChildRule`, docs/method.md §5). Node 0 is
the root (the last committed token); parents precede children, so node order is the order of
the target's tree verify forward (`attention_mask`, `positions`). Conventions: docs/design.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import torch

from casspec_ref.base import law_checks as checks


class ChildRule(Enum):
    """How the children of one node were proposed (docs/method.md §5 rules 1-4)."""

    INDEPENDENT = "independent"  # child i drawn from its own law q_i (rules 1 and 2)
    WITHOUT_REPLACEMENT = "without_replacement"  # children drawn in order from one q (rule 3)
    DETERMINISTIC = "deterministic"  # top-k, argmax chains, prompt lookup, reviewed tokens (rule 4)


@dataclass
class TreeNode:
    """One node: its token, its parent (-1 for the root), and the law it was drawn from."""

    token: int
    parent: int
    depth: int
    draft_probs: np.ndarray | None = None
    child_rule: ChildRule | None = None
    children: list[int] = field(default_factory=list)


class DraftTree:
    """A token tree rooted at the last committed token (node 0)."""

    def __init__(self, root_token: int) -> None:
        checks.check_token(root_token)
        self.nodes: list[TreeNode] = [TreeNode(token=int(root_token), parent=-1, depth=0)]

    def __len__(self) -> int:
        return len(self.nodes)

    def add_child(
        self, parent: int, token: int, rule: ChildRule, draft_probs: np.ndarray | None = None
    ) -> int:
        """Add `token` under `parent` (whose siblings share one `rule`) and return its index;
        `draft_probs` is the processed law it was drawn from (its own q_i, or the siblings' one
        unconditional q), None for `DETERMINISTIC`."""
        checks.check_rule(rule, ChildRule)
        checks.check_parent(parent, len(self.nodes))
        checks.check_token(token)
        node = self.nodes[parent]
        checks.check_child(rule, node.child_rule, parent, draft_probs)
        if draft_probs is not None:
            draft_probs = checks.as_draft_law(draft_probs, token)
        if rule is ChildRule.WITHOUT_REPLACEMENT and node.children:
            first = self.nodes[node.children[0]].draft_probs
            siblings = (self.nodes[c].token for c in node.children)
            checks.check_sibling(first, draft_probs, token, siblings)
        node.child_rule = rule
        index = len(self.nodes)
        self.nodes.append(
            TreeNode(token=int(token), parent=parent, depth=node.depth + 1, draft_probs=draft_probs)
        )
        node.children.append(index)
        return index

    def token(self, node: int) -> int:
        return self.nodes[node].token

    def parent(self, node: int) -> int:
        return self.nodes[node].parent

    def depth(self, node: int) -> int:
        return self.nodes[node].depth

    def children(self, node: int) -> list[int]:
        return list(self.nodes[node].children)

    def child_rule(self, node: int) -> ChildRule | None:
        return self.nodes[node].child_rule

    def draft_probs(self, node: int) -> np.ndarray | None:
        return self.nodes[node].draft_probs

    @property
    def tokens(self) -> list[int]:
        """Every node's token in node order (the input of the tree verify forward)."""
        return [n.token for n in self.nodes]

    @property
    def max_depth(self) -> int:
        return max(n.depth for n in self.nodes)

    def path_to(self, node: int) -> list[int]:
        """Node indices from the first drafted node down to ``node`` (root excluded)."""
        checks.check_node(node, len(self.nodes))
        path = []
        while node != 0:
            path.append(node)
            node = self.nodes[node].parent
        return path[::-1]

    def ancestors_mask(self) -> torch.Tensor:
        """(N, N) bool: entry [i, j] is True when node j is node i or one of its ancestors."""
        n = len(self.nodes)
        mask = torch.zeros((n, n), dtype=torch.bool)  # (N, N)
        for i, node in enumerate(self.nodes):
            # Parents precede children, so the parent's row is already complete.
            if node.parent >= 0:
                mask[i] = mask[node.parent]
            mask[i, i] = True
        return mask

    def attention_mask(self, prefix_len: int) -> torch.Tensor:
        """(N, prefix_len + N) bool for the tree verify forward: node i sees the cached prefix
        (the root excluded: it is node 0 of this forward), its ancestors and itself."""
        checks.check_prefix_len(prefix_len)
        n = len(self.nodes)
        prefix = torch.ones((n, prefix_len), dtype=torch.bool)  # (N, prefix_len)
        return torch.cat([prefix, self.ancestors_mask()], dim=1)  # (N, prefix_len + N)

    def positions(self, prefix_len: int) -> torch.Tensor:
        """(N,) long: the position of each node, ``prefix_len + depth`` (the root at prefix_len)."""
        checks.check_prefix_len(prefix_len)
        return torch.tensor([prefix_len + n.depth for n in self.nodes], dtype=torch.long)  # (N,)


def chain_tree(
    root_token: int, tokens: list[int], draft_probs: list[np.ndarray] | None
) -> DraftTree:
    """A chain (one child per node): sampled from ``draft_probs[i]``, or deterministic if None."""
    tree = DraftTree(root_token)
    node = 0
    rule = ChildRule.DETERMINISTIC if draft_probs is None else ChildRule.INDEPENDENT
    for i, token in enumerate(tokens):
        node = tree.add_child(node, token, rule, None if draft_probs is None else draft_probs[i])
    return tree
