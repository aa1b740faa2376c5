"""JSON test vectors for other languages: exact output laws of tree verification.

Each vector is a fixed tree with rational laws and the exact law of the tokens casspec_ref's
verifier emits (the rules of docs/method.md §5), as "a/b" strings, so that an implementation in
any language can replay them (format `casspec-oracle-vectors/1`, docs/oracle.md).
"""

from __future__ import annotations

import functools
import json
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from casspec_ref.proof.enumerate import Prob, exact_law
from casspec_ref.sampling import RandomSource
from casspec_ref.tree import ChildRule, DraftTree
from casspec_ref.verify import verify_tree

VECTORS_PATH = Path(__file__).parents[1] / "data" / "oracle_vectors.json"
VECTORS_FORMAT = "casspec-oracle-vectors/1"


def _frac_str(value: Prob) -> str:
    f = Fraction(value)
    return f"{f.numerator}/{f.denominator}"


def _vector_trees() -> list[tuple[str, DraftTree, list[np.ndarray]]]:
    """Fixed trees with rational laws: every node rule, duplicates, zeros, one-hots."""
    f = Fraction

    def law(*values: int) -> np.ndarray:
        total = sum(values)
        return np.array([f(v, total) for v in values], dtype=object)

    cases = []
    p, q = law(2, 3, 1, 4), law(1, 1, 1, 1)
    chain = DraftTree(0)
    a = chain.add_child(0, 3, ChildRule.INDEPENDENT, q)
    chain.add_child(a, 1, ChildRule.INDEPENDENT, law(0, 5, 3, 2))
    cases.append(("chain-2", chain, [p, law(1, 1, 2, 0), law(3, 0, 0, 1)]))

    indep = DraftTree(1)
    indep.add_child(0, 2, ChildRule.INDEPENDENT, law(1, 2, 3, 0))
    indep.add_child(0, 2, ChildRule.INDEPENDENT, law(0, 0, 1, 1))
    indep.add_child(0, 0, ChildRule.INDEPENDENT, law(1, 0, 0, 0))
    cases.append(("independent-3", indep, [law(1, 1, 1, 1), law(0, 1, 0, 0), p, law(2, 1, 0, 1)]))

    wor = DraftTree(2)
    wor_q = law(4, 3, 2, 1)
    w1 = wor.add_child(0, 0, ChildRule.WITHOUT_REPLACEMENT, wor_q)
    wor.add_child(0, 2, ChildRule.WITHOUT_REPLACEMENT, wor_q)
    wor.add_child(w1, 3, ChildRule.DETERMINISTIC)
    cases.append(
        ("without-replacement", wor, [law(1, 2, 3, 4), law(1, 1, 1, 1), p, law(5, 1, 1, 1)])
    )

    det = DraftTree(3)
    det.add_child(0, 1, ChildRule.DETERMINISTIC)
    det.add_child(0, 1, ChildRule.DETERMINISTIC)
    det.add_child(0, 3, ChildRule.DETERMINISTIC)
    cases.append(
        ("deterministic-duplicate", det, [p, law(1, 0, 0, 0), law(0, 1, 0, 0), law(1, 1, 1, 1)])
    )

    greedy = DraftTree(0)
    g1 = greedy.add_child(0, 3, ChildRule.DETERMINISTIC)
    greedy.add_child(g1, 2, ChildRule.INDEPENDENT, law(1, 1, 1, 1))
    cases.append(("greedy-one-hot", greedy, [law(0, 0, 0, 1), law(0, 0, 1, 0), law(0, 1, 0, 0)]))
    return cases


def _tree_json(tree: DraftTree) -> list[dict[str, Any]]:
    nodes = []
    for i in range(1, len(tree)):
        q = tree.draft_probs(i)
        rule = tree.child_rule(tree.parent(i))
        assert rule is not None
        nodes.append(
            {
                "token": tree.token(i),
                "parent": tree.parent(i),
                "rule": rule.value,
                "draft_probs": None if q is None else [_frac_str(v) for v in q],
            }
        )
    return nodes


def tree_from_json(root_token: int, nodes: list[dict[str, Any]]) -> DraftTree:
    """Rebuild a `DraftTree` from the ``nodes`` of a test vector."""
    tree = DraftTree(root_token)
    for node in nodes:
        q = node["draft_probs"]
        law = None if q is None else np.array([Fraction(v) for v in q], dtype=object)
        tree.add_child(node["parent"], node["token"], ChildRule(node["rule"]), law)
    return tree


def _emitted(tree: DraftTree, laws: list[np.ndarray], rng: RandomSource) -> list[int]:
    return verify_tree(tree, laws, rng).emitted


def build_vectors() -> dict[str, Any]:
    """The test vectors: for each fixed tree and target laws, the exact law of the emitted
    tokens under casspec_ref's verifier (the rules of docs/method.md §5), as "a/b" strings."""
    vectors = []
    for name, tree, laws in _vector_trees():
        law = exact_law(functools.partial(_emitted, tree, laws), exact=True)
        vectors.append(
            {
                "name": name,
                "vocab_size": len(laws[0]),
                "root_token": tree.token(0),
                "nodes": _tree_json(tree),
                "target_probs": [[_frac_str(v) for v in p] for p in laws],
                "emitted_law": {
                    " ".join(str(t) for t in k): _frac_str(v)  # type: ignore[attr-defined]
                    for k, v in sorted(law.items())  # type: ignore[type-var]
                },
            }
        )
    return {
        "format": VECTORS_FORMAT,
        "description": (
            "Exact output laws of lossless tree verification (casspec_ref, docs/method.md §5). "
            "Node 0 is the root; nodes are listed from 1 in order; 'rule' is how the parent's "
            "children were proposed; target_probs[i] is the processed target law at node i; "
            "emitted_law maps the space-separated emitted tokens (accepted drafts, then the "
            "next token) to its probability. See docs/oracle.md."
        ),
        "vectors": vectors,
    }


def write_vectors(path: Path = VECTORS_PATH) -> None:
    """Regenerate the JSON test vectors."""
    path.write_text(json.dumps(build_vectors(), indent=1) + "\n")


def load_vectors(path: Path = VECTORS_PATH) -> dict[str, Any]:
    """Read the JSON test vectors (plain JSON; no pickle anywhere)."""
    if not path.is_file():
        raise FileNotFoundError(f"no oracle vectors at {path}; regenerate with write_vectors()")
    data: dict[str, Any] = json.loads(path.read_text())
    if data.get("format") != VECTORS_FORMAT:
        raise ValueError(f"{path} is not in format {VECTORS_FORMAT}")
    return data
