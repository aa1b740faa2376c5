"""The drafting primitives only the baselines use: a chain from one model draft, and the
vertical cascade's review of a lower draft's proposal. Both grow a `StepDrafter`'s tree through
its public primitives."""

from __future__ import annotations

from collections.abc import Sequence

from casspec_ref.draft import NodeInfo, StepDrafter
from casspec_ref.dytc_config import PLD
from casspec_ref.sampling import target_law


def draft_chain(drafter: StepDrafter, level: str, node: int, k: int, siblings: int = 1) -> int:
    """Draft up to `k` tokens below `node` with `level` (top-`siblings` at the first
    position); returns the deepest node of the chain."""
    for i in range(k):
        children = drafter.propose_children(level, node, siblings if i == 0 else 1)
        if not children:
            break
        node = children[0][0]
    return node


def review(drafter: StepDrafter, level: str, node: int, proposal: Sequence[int]) -> int:
    """Vertical cascade: `level` reviews a lower proposal in one forward, keeps its agreeing
    prefix and adds its own token at the first disagreement; returns the deepest node."""
    proposal = list(proposal)[: drafter.room(node)]  # never feed more than the cache has room
    if not proposal:
        return node
    if drafter.runner is None:
        raise ValueError("a vertical cascade needs a model draft level")
    path = drafter.path_tokens(node)
    start = drafter.clock()
    rows = drafter.runner.logits(drafter.levels[level], path + proposal)  # (len, V)
    drafter.charge(level, start)
    greedy = drafter.sampling.greedy
    for j, token in enumerate(proposal):
        if drafter.room(node) < 1:
            return node
        row = rows[len(path) - 1 + j]  # (V,)
        # The reviewer's choice: argmax of its processed law (ties to the lowest id).
        choice = int(target_law(row, 0.0).argmax()) if not greedy else int(row.argmax())
        info = NodeInfo(PLD if choice == token else level, True)
        node = drafter.add_node(node, choice, info)
        if choice != token:
            return node
    return node
