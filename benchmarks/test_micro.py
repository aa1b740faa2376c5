"""pytest-benchmark micro-benchmarks (``make bench``; never part of ``make test``).

- the target's forward time against the number of tree tokens (1 to 64) after 256 cached tokens,
  on the embedded SmolLM2-135M (fp32): the verify cost curve that DyTC learns;
- the verifier's time against tree size, on SmolLM2's vocabulary width (49152), greedy and
  sampled;
- DyTC's planning time per step (drafting excluded), on a tiny model where the draft forwards
  are negligible, so that what is measured is the policy's own bookkeeping.

Run: ``.venv/bin/python -m pytest benchmarks --benchmark-only``; compare runs with
``--benchmark-autosave`` / ``--benchmark-compare``.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from casspec_ref.kv_cache import KVCache
from casspec_ref.sampling import TorchRandomSource
from casspec_ref.tree import ChildRule, DraftTree
from casspec_ref.verify import verify_tree

VOCAB = 49152


@pytest.fixture(scope="module")
def smollm2():
    from casspec_ref.io.weights import load_model

    model, _ = load_model()
    return model


def _random_tree(n_nodes: int, rng: np.random.Generator, branching: int = 2) -> DraftTree:
    tree = DraftTree(int(rng.integers(VOCAB)))
    for node in range(1, n_nodes):
        parent = (node - 1) // branching
        tree.add_child(parent, int(rng.integers(VOCAB)), ChildRule.DETERMINISTIC)
    return tree


@pytest.mark.parametrize("tree_tokens", [1, 2, 4, 8, 16, 32, 64])
def test_target_forward_vs_tree_tokens(benchmark, smollm2, tree_tokens: int) -> None:
    model = smollm2
    prefix = 256
    cache = KVCache(model.config, prefix + 64, dtype=torch.float32)
    torch.manual_seed(0)
    with torch.inference_mode():
        model(
            torch.randint(0, VOCAB, (1, prefix)), torch.arange(prefix)[None], cache, last_only=True
        )
    tree = _random_tree(tree_tokens, np.random.default_rng(0))
    tokens = torch.tensor([tree.tokens], dtype=torch.long)
    positions = torch.as_tensor(tree.positions(prefix))[None]
    mask = torch.as_tensor(tree.attention_mask(prefix))

    def forward() -> None:
        with torch.inference_mode():
            model(tokens, positions, cache, mask)
        cache.truncate(prefix)

    benchmark(forward)


@pytest.mark.parametrize("n_nodes", [2, 8, 32, 64])
@pytest.mark.parametrize("mode", ["greedy", "sampled"])
def test_verifier_vs_tree_size(benchmark, n_nodes: int, mode: str) -> None:
    rng = np.random.default_rng(1)
    tree = _random_tree(n_nodes, rng)
    if mode == "greedy":
        laws = []
        for node in range(n_nodes):
            law = np.zeros(VOCAB)
            children = [c for c in range(n_nodes) if tree.nodes[c].parent == node]
            law[tree.nodes[children[0]].token if children else 0] = 1.0
            laws.append(law)
    else:
        laws = [rng.dirichlet(np.full(VOCAB, 0.05)) for _ in range(n_nodes)]
    source = TorchRandomSource(seed=0)
    benchmark(lambda: verify_tree(tree, laws, source))


class _ChainDrafter:
    """A minimal `TreeDrafter`: a chain of `size` nodes whose leaf offers every draft."""

    def __init__(self, size: int) -> None:
        self.n = size

    def size(self) -> int:
        return self.n

    def room(self, node: int) -> int:
        return 32 - self.n

    def is_leaf(self, node: int) -> bool:
        return node == self.n - 1

    def offers(self, node: int, draft: str) -> int:
        return 8

    def alternatives(self, node: int, draft: str, width: int) -> list[float]:
        return [0.6, 0.2, 0.1][:width]

    def expand(self, node: int, draft: str, k: int, width: int) -> list:
        return []

    def seconds(self) -> float:
        return 0.001


@pytest.mark.parametrize("tree_size", [1, 8, 24])
def test_dytc_planning_time_per_decision(benchmark, tree_size: int) -> None:
    """One `RefinedDyTC.plan` decision on a chain of `tree_size` nodes, with trained estimates
    (two model levels, prompt lookup and recycled tokens): the policy's own cost, excluding
    draft forwards."""
    from casspec_ref.dytc_config import PLD, RECYCLE, DyTCConfig
    from casspec_ref.dytc_estimates import Outcome
    from casspec_ref.dytc_refinements import RefinedDyTC

    policy = RefinedDyTC(["light", "heavy"], DyTCConfig(warmup=0))
    timings = {"light": (1, 0.020), "heavy": (1, 0.025), PLD: (1, 0.0001)}
    for size in (1, 2, 4, 8, 16, 32):
        tested = [(Outcome("light"), True), (Outcome("heavy"), False), (Outcome(PLD), True)]
        policy.observe_step(tested, size, 0.04, timings)
    estimates = {node: 0.9**node for node in range(tree_size)}
    drafts = ["light", "heavy", PLD, RECYCLE]
    benchmark(policy.plan, _ChainDrafter(tree_size), estimates, drafts)
