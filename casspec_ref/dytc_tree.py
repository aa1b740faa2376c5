"""The tree DyTC grows, as DyTC estimates it: each node's acceptance given its parent
(`TreeEstimate`), the probability that the path to a node is accepted (`reach_probabilities`),
the tokens a step is expected to commit (`expected_tree_tokens`), and the records one plan
works with (`TreeSoFar`, `Leaf`, and its decision, `Expansion`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from casspec_ref.base import dytc_checks as checks


def reach_probabilities(parents: Sequence[int], accept: Sequence[float]) -> list[float]:
    """P(the path to node i is accepted): the product of ``accept`` (node i's acceptance given
    its parent's) along the path; siblings are mutually exclusive, the root's reach is 1."""
    checks.check_tree_estimate(parents, accept)
    reach = [1.0] * len(parents)
    for i in range(1, len(parents)):
        reach[i] = reach[parents[i]] * accept[i]
    return reach


def expected_tree_tokens(parents: Sequence[int], accept: Sequence[float]) -> float:
    """Expected tokens one step commits: the bonus token plus every node's reach."""
    return 1.0 + sum(reach_probabilities(parents, accept)[1:])


@dataclass
class TreeEstimate:
    """What DyTC believes of the tree it grows: node i's parent and the probability that node i
    is accepted given that its parent was (node 0, the root, is certain)."""

    parents: list[int] = field(default_factory=lambda: [-1])
    accept: list[float] = field(default_factory=lambda: [1.0])
    drafts: list[str] = field(default_factory=lambda: ["root"])  # who drafted each node

    def add(self, node: int, parent: int, accept: float, draft: str = "") -> None:
        """Record node `node` (an expansion may report it before lower-numbered siblings)."""
        while len(self.parents) <= node:
            self.parents.append(-1)
            self.accept.append(0.0)
            self.drafts.append("")
        self.parents[node], self.accept[node], self.drafts[node] = parent, accept, draft

    def reach(self) -> dict[int, float]:
        return dict(enumerate(reach_probabilities(self.parents, self.accept)))

    def expected_tokens(self) -> float:
        return expected_tree_tokens(self.parents, self.accept)


@dataclass(frozen=True)
class TreeSoFar:
    """The tree a plan extends: its expected tokens, the seconds drafted so far, and the
    predicted seconds of verifying it with k more nodes (``verify[k]``, k = 0..max_k)."""

    tokens: float
    spent: float
    verify: list[float]


@dataclass(frozen=True)
class Leaf:
    """A leaf a plan may extend: its node, its reach, who drafted it, its lookup match."""

    node: int
    reach: float
    draft: str
    match: int


@dataclass
class Expansion:
    """One growth decision: draft `k` tokens with `draft` below `leaf`, `width` children wide."""

    leaf: int
    draft: str
    k: int
    width: int
    predicted_ewif: float
