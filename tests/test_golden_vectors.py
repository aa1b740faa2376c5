"""The golden vectors, cross-checked by a second implementation of the tree process.

casspec_ref/data/oracle_vectors.json stores, for fixed trees and target laws, the exact law of
the tokens one verification emits. Those laws are produced by `verify_tree` run under the
enumerating source, so replaying them through `verify_tree` alone would only show that the code
agrees with itself. Here `brute_force_law` computes the same law a different way:

- it reads the tree from the JSON (plain lists of `Fraction`, no `DraftTree`, no numpy);
- it does not enumerate coins: it walks the rules of docs/method.md §5 as a recursion over
  (node, residual), multiplying the probability of each acceptance and rejection;
- it states every rule from its definition (the conditional law of a without-replacement
  sibling, the one-hot law of a deterministic child), sharing no helper with verify.py.

The stored vectors must equal both the brute force and `verify_tree`'s enumerated law, exactly.
A property test then compares the two implementations on random trees with every rule, three
without-replacement siblings, duplicates, zeros, stop tokens and length limits.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from casspec_ref.proof import (
    VECTORS_PATH,
    build_vectors,
    exact_law,
    load_vectors,
    tree_from_json,
)
from casspec_ref.verify import verify_tree

Dist = dict[tuple[int, ...], Fraction]


def _normalize(weights: list[Fraction]) -> list[Fraction]:
    total = sum(weights, Fraction(0))
    return [w / total for w in weights]


def brute_force_law(
    nodes: list[dict],
    target: list[list[Fraction]],
    stop_ids: frozenset[int] = frozenset(),
    max_accept: int | None = None,
) -> Dist:
    """The exact law of the emitted tokens of one tree verification, by recursion.

    ``nodes[i - 1]`` describes node i (``token``, ``parent``, ``rule``, ``draft_probs``), as in
    the JSON vectors; ``target[i]`` is the target law at node i.
    """
    children: dict[int, list[int]] = {}
    for index, node in enumerate(nodes, start=1):
        children.setdefault(node["parent"], []).append(index)

    def at_node(node: int, depth: int) -> Dist:
        kids = children.get(node, [])
        if max_accept is not None and depth >= max_accept:
            kids = []
        return tested(node, depth, kids, 0, list(target[node]), [])

    def tested(
        node: int, depth: int, kids: list[int], i: int, residual: list[Fraction], drawn: list[int]
    ) -> Dist:
        if i == len(kids):
            # Every child rejected (or none): the next token is drawn from the residual.
            return {(x,): r for x, r in enumerate(residual) if r > 0}
        child = nodes[kids[i] - 1]
        x = child["token"]
        if child["rule"] == "deterministic":
            q = [Fraction(int(y == x)) for y in range(len(residual))]
        elif child["rule"] == "without_replacement":
            # The law the i-th sibling was drawn from: q with the earlier siblings removed.
            q0 = [Fraction(v) for v in child["draft_probs"]]
            q = _normalize([Fraction(0) if y in drawn else v for y, v in enumerate(q0)])
        else:
            q = [Fraction(v) for v in child["draft_probs"]]
        accept = min(Fraction(1), residual[x] / q[x]) if q[x] > 0 else Fraction(0)
        law: Dist = {}
        if accept > 0:
            if x in stop_ids:
                tail: Dist = {(): Fraction(1)}
            else:
                tail = at_node(kids[i], depth + 1)
            for rest, prob in tail.items():
                law[(x, *rest)] = law.get((x, *rest), Fraction(0)) + accept * prob
        if accept < 1:
            excess = [max(r - v, Fraction(0)) for r, v in zip(residual, q, strict=True)]
            after = _normalize(excess) if sum(excess) > 0 else residual
            for out, prob in tested(node, depth, kids, i + 1, after, [*drawn, x]).items():
                law[out] = law.get(out, Fraction(0)) + (1 - accept) * prob
        return {k: v for k, v in law.items() if v > 0}

    return at_node(0, 0)


def _verify_tree_law(vector: dict, stop_ids=(), max_accept=None) -> Dist:
    tree = tree_from_json(vector["root_token"], vector["nodes"])
    laws = [np.array([Fraction(v) for v in row], dtype=object) for row in vector["target_probs"]]

    def emitted(rng):  # type: ignore[no-untyped-def]
        return verify_tree(tree, laws, rng, stop_ids=stop_ids, max_accept=max_accept).emitted

    return exact_law(emitted, exact=True)  # type: ignore[return-value]


def _stored_law(vector: dict) -> Dist:
    return {
        tuple(int(t) for t in key.split()): Fraction(value)
        for key, value in vector["emitted_law"].items()
    }


def _target(vector: dict) -> list[list[Fraction]]:
    return [[Fraction(v) for v in row] for row in vector["target_probs"]]


def test_stored_vectors_equal_the_brute_force_and_verify_tree():
    data = load_vectors(VECTORS_PATH)
    names = [vector["name"] for vector in data["vectors"]]
    assert len(names) >= 5
    for vector in data["vectors"]:
        stored = _stored_law(vector)
        brute = brute_force_law(vector["nodes"], _target(vector))
        assert sum(stored.values()) == 1, vector["name"]
        assert brute == stored, vector["name"]
        assert _verify_tree_law(vector) == stored, vector["name"]
    # The vectors cover every rule (otherwise the cross-check would leave one untested).
    rules = {node["rule"] for vector in data["vectors"] for node in vector["nodes"]}
    assert rules == {"independent", "without_replacement", "deterministic"}


def test_stored_vectors_are_the_ones_the_package_builds():
    assert load_vectors(VECTORS_PATH)["vectors"] == build_vectors()["vectors"]


def test_the_brute_force_sees_a_wrong_vector():
    """Control: a vector with one probability moved must disagree with the brute force."""
    vector = load_vectors(VECTORS_PATH)["vectors"][0]
    stored = _stored_law(vector)
    first, second = sorted(stored)[:2]
    shift = Fraction(1, 1000)
    stored[first] += shift
    stored[second] -= shift
    assert brute_force_law(vector["nodes"], _target(vector)) != stored


# --- Random trees: the two implementations agree ------------------------------------------------


def _law_strings(draw: st.DrawFn, vocab: int) -> list[str]:
    weights = draw(st.lists(st.integers(0, 4), min_size=vocab, max_size=vocab))
    if not any(weights):
        weights[draw(st.integers(0, vocab - 1))] = 1
    total = sum(weights)
    return [str(Fraction(w, total)) for w in weights]


@st.composite
def random_vectors(draw: st.DrawFn) -> tuple[dict, tuple[int, ...], int | None]:
    """A random tree (depth <= 3, up to 3 children per node, every rule) with rational laws,
    in the JSON vector format, plus stop tokens and a length limit."""
    vocab = draw(st.integers(2, 5))
    nodes: list[dict] = []
    frontier = [(0, 0)]
    while frontier and len(nodes) < 7:
        parent, depth = frontier.pop(0)
        if depth >= 3:
            continue
        rule = draw(st.sampled_from(["independent", "without_replacement", "deterministic"]))
        shared = _law_strings(draw, vocab)
        support = [t for t in range(vocab) if Fraction(shared[t]) > 0]
        count = draw(st.integers(0 if parent else 1, 3))
        if rule == "without_replacement":
            tokens = draw(st.permutations(support))[: min(count, len(support))]
        else:
            tokens = [draw(st.integers(0, vocab - 1)) for _ in range(count)]
        for token in tokens:
            if rule == "independent":
                q = _law_strings(draw, vocab)
                if Fraction(q[token]) == 0:
                    q = [str(Fraction(int(t == token))) for t in range(vocab)]
            else:
                q = shared if rule == "without_replacement" else None
            nodes.append({"token": token, "parent": parent, "rule": rule, "draft_probs": q})
            frontier.append((len(nodes), depth + 1))
    vector = {
        "root_token": 0,
        "nodes": nodes,
        "target_probs": [_law_strings(draw, vocab) for _ in range(len(nodes) + 1)],
    }
    stops = tuple(draw(st.lists(st.integers(0, vocab - 1), max_size=1)))
    max_accept = draw(st.none() | st.integers(0, 2))
    return vector, stops, max_accept


def _wor3(shared: list[str], target: list[list[str]]) -> tuple[dict, tuple[int, ...], None]:
    nodes = [
        {"token": t, "parent": 0, "rule": "without_replacement", "draft_probs": shared}
        for t in (2, 0, 1)
    ]
    return {"root_token": 0, "nodes": nodes, "target_probs": target}, (), None


#: Three siblings drawn without replacement, the third tested against q without both others.
THREE_WOR = _wor3(
    ["1/4", "1/8", "1/2", "1/8"],
    [["1/10", "3/10", "1/5", "2/5"], ["1/4"] * 4, ["1/4"] * 4, ["1/4"] * 4],
)


@given(case=random_vectors())
@example(case=THREE_WOR)
def test_brute_force_equals_verify_tree_on_random_trees(case):
    vector, stops, max_accept = case
    target = [[Fraction(v) for v in row] for row in vector["target_probs"]]
    want = brute_force_law(vector["nodes"], target, frozenset(stops), max_accept)
    assert sum(want.values()) == 1
    assert _verify_tree_law(vector, stops, max_accept) == want


def test_brute_force_checks_the_third_sibling_law():
    """Control: testing the third without-replacement sibling with q minus only the second
    sibling (a plausible bug) changes the law on THREE_WOR."""
    vector, _, _ = THREE_WOR
    target = [[Fraction(v) for v in row] for row in vector["target_probs"]]
    right = brute_force_law(vector["nodes"], target)
    # Mislabel the siblings as independent, each with q without the second sibling only.
    q = [Fraction(v) for v in vector["nodes"][0]["draft_probs"]]
    wrong_q = [str(v) for v in _normalize([Fraction(0) if y == 0 else v for y, v in enumerate(q)])]
    nodes = [dict(vector["nodes"][0], rule="independent")]
    nodes += [dict(n, rule="independent", draft_probs=wrong_q) for n in vector["nodes"][1:]]
    assert brute_force_law(nodes, target) != right
