"""The tree DyTC grows: the drafting machinery it grows the tree through (`TreeDrafter`), and
what it believes of the tree (`TreeEstimate`): each node's acceptance given its parent, the
probability that the path to a node is accepted (`reach_probabilities`), the tokens a step is
expected to commit (`expected_tree_tokens`), and the records one plan works with (`TreeSoFar`,
`Leaf`, and its decision, `Expansion`). The policy that decides is `casspec_ref.dytc`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

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


#: What one expansion added: (node, its parent, the draft's confidence in its token or None).
Grown = list[tuple[int, int, float | None]]


class TreeDrafter(Protocol):
    """What DyTC needs from one step's drafting machinery (`draft.StepDrafter`; the simulator of
    tests/dytc_simulator.py). Node 0 is the root, nodes are numbered as added; only `expand`
    changes the tree; `alternatives` may run a draft forward."""

    def size(self) -> int:
        """Nodes in the tree, root included."""

    def room(self, node: int) -> int:
        """How many more nodes may hang below `node` along one path."""

    def is_leaf(self, node: int) -> bool:
        """True while `node` has no children."""

    def offers(self, node: int, draft: str) -> int:
        """How many tokens `draft` can propose below `node` (a free draft may have none)."""

    def match(self, node: int) -> int:
        """How long a context suffix prompt lookup matched below `node` (0: none, or unknown)."""

    def margin(self, node: int) -> float | None:
        """A model-drafted chain node's margin: the draft's probability of its token minus the
        best other token's (a refinement: `dytc_refinements.MARGINS`); None if not known."""

    def alternatives(self, node: int, draft: str, width: int) -> list[float]:
        """The draft's confidence in its top-`width` candidates for the child of `node`."""

    def expand(self, node: int, draft: str, k: int, width: int) -> Grown:
        """Add up to `width` children below `node`, the first continuing as a chain of up to `k`
        tokens; return (node, parent, the draft's confidence or None) per node, parents first."""

    def seconds(self) -> float:
        """Wall seconds spent drafting in this step so far."""
