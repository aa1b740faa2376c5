"""pytest-benchmark micro-benchmarks (``make bench``; never part of ``make test``).

- the target's forward time against the number of tree tokens (1 to 64) after 256 cached tokens,
  on the embedded SmolLM2-135M (fp32): the verify cost that DyTC's latency model learns;
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


@pytest.mark.parametrize("tree_size", [1, 8, 24])
def test_dytc_planning_time_per_decision(benchmark, tree_size: int) -> None:
    """One `DyTCPolicy.plan_expansion` call on a partial tree of `tree_size` nodes, with trained
    estimates (two model levels and PLD): the policy's own cost, excluding draft forwards."""
    from casspec_ref.dytc import PLD, DyTCConfig, DyTCPolicy

    policy = DyTCPolicy(["light", "heavy"], DyTCConfig(warmup=0))
    for seq_len in (100, 200, 300):
        policy.observe_verify(seq_len, 1, 0.040)
        policy.observe_verify(seq_len, 4, 0.060)
        for name, seconds in (("light", 0.020), ("heavy", 0.025), (PLD, 0.0001)):
            policy.observe_draft(name, seq_len, 1, seconds)
            policy.observe_draft(name, seq_len, 1, seconds)
    for name, outcomes in (("light", [1, 0, 1]), ("heavy", [1, 1, 1, 0]), (PLD, [0, 1])):
        policy.observe_acceptance(name, [bool(o) for o in outcomes])
    leaves = [(node, 0.9**node, min(node, 8)) for node in range(max(1, tree_size // 2), tree_size)]
    leaves = leaves or [(0, 1.0, 0)]
    available = {node: ["light", "heavy", PLD] for node, _, _ in leaves}
    benchmark(policy.plan_expansion, leaves, tree_size, 1.5, 0.01, 250, available)
