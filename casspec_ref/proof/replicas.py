"""Shipped demonstration targets for the checker: casspec_ref's own verifiers behind the
third-party signatures, and a replica of a shipped bug.

``python -m casspec_ref oracle check casspec_ref.proof.replicas:reference_chain_verifier`` shows
a passing check, ``...:raw_bonus_replica`` a failing one, and ``--tree
casspec_ref.proof.replicas:reference_tree_verifier`` a passing tree check. None of these is part
of any decoder.
"""

from __future__ import annotations

import numpy as np
import torch

from casspec_ref.proof.checker import ChainInputs, TreeInputs
from casspec_ref.sampling import RandomSource, target_law
from casspec_ref.tree import ChildRule, DraftTree
from casspec_ref.verify import verify_tree


def reference_chain_verifier(inputs: ChainInputs, rng: RandomSource) -> list[int]:
    """casspec_ref's `verify_tree` behind the `ChainVerifier` signature (a chain tree)."""
    tree = DraftTree(0)
    node = 0
    for i, token in enumerate(inputs.draft_tokens):
        node = tree.add_child(node, token, ChildRule.INDEPENDENT, inputs.draft_probs[i])
    return verify_tree(tree, list(inputs.target_probs), rng).emitted


def reference_tree_verifier(inputs: TreeInputs, rng: RandomSource) -> list[int]:
    """casspec_ref's `verify_tree` behind the `TreeVerifierFunction` signature."""
    return verify_tree(inputs.tree, list(inputs.target_probs), rng).emitted


def raw_bonus_replica(inputs: ChainInputs, rng: RandomSource) -> list[int]:
    """A replica of a shipped bug (docs/method.md §6): the bonus token from *unprocessed* logits.

    Everything else is right. It is here only so that the CLI can demonstrate a failing check:
    ``python -m casspec_ref oracle check casspec_ref.proof.replicas:raw_bonus_replica``.
    """
    emitted = reference_chain_verifier(inputs, rng)
    k = len(inputs.draft_tokens)
    if len(emitted) == k + 1:  # every draft accepted: the last token is the bonus token
        logits = np.asarray(inputs.target_logits[k], dtype=np.float64)
        raw = target_law(torch.tensor(logits), 1.0).numpy()  # (V,)
        emitted[-1] = int(rng.categorical(raw))
    return emitted
