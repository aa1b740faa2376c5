"""The speculative-step harness: a toy language model, drafted trees, and plain AR laws.

`ToyLM` is a context-dependent toy model given by a few fixed laws; `DraftSpec`/`ChildSpec`
describe a tree shape with its child rules and draft levels; `draft_tree` drafts it through a
random source; `speculative_tokens` runs one step (draft, verify, then plain AR sampling up to n
tokens); `ar_law` is the law of plain AR sampling, computed by direct recursion (an oracle by a
different code path than any speculative step).

Why finishing with AR sampling is a complete check: a step emits at most depth + 1 tokens, and
the emitted sequence is lossless iff for every n the law of the first n tokens of "this step,
then plain AR" equals the law of n plain AR tokens; for n = depth + 1 that is every token the step
decides, and longer n only append AR tokens to both sides (docs/oracle.md).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import torch

from casspec_ref.proof.enumerate import Law, Prob
from casspec_ref.sampling import RandomSource, target_law
from casspec_ref.tree import ChildRule, DraftTree
from casspec_ref.verify import VerifyResult, verify_tree


class ToyLM:
    """A context-dependent toy model: the law at a context is one of a few fixed laws.

    Which law a context gets is a fixed hash of (salt, context), so different prefixes see
    different laws, as with a real model. ``raw_laws`` are the unprocessed laws (softmax of the
    raw logits) for bug replicas that use them; they default to ``laws``.
    """

    def __init__(
        self,
        laws: Sequence[np.ndarray],
        salt: int = 0,
        raw_laws: Sequence[np.ndarray] | None = None,
        logits: Sequence[np.ndarray] | None = None,
    ) -> None:
        if not laws:
            raise ValueError("a ToyLM needs at least one law")
        self.laws = [np.asarray(law) for law in laws]
        self.raw_laws = [np.asarray(law) for law in raw_laws] if raw_laws else self.laws
        self.logits = [np.asarray(x, dtype=np.float64) for x in logits] if logits else None
        self.salt = salt
        self.vocab_size = self.laws[0].shape[0]

    @classmethod
    def from_logits(
        cls,
        logits: Sequence[np.ndarray],
        temperature: float,
        top_k: int = 0,
        top_p: float = 1.0,
        salt: int = 0,
    ) -> ToyLM:
        """Processed laws from raw logits through `target_law` (float64)."""
        raw = torch.tensor(np.asarray(logits, dtype=np.float64))  # (M, V)
        laws = target_law(raw, temperature, top_k, top_p).numpy()  # (M, V)
        raw_laws = target_law(raw, 1.0).numpy()  # (M, V)
        return cls(list(laws), salt, list(raw_laws), list(np.asarray(logits, dtype=np.float64)))

    def index(self, context: tuple[int, ...]) -> int:
        h = self.salt * 7919 + 17
        for token in context:
            h = (h * 31 + token + 1) % 1_000_003
        return h % len(self.laws)

    def law(self, context: tuple[int, ...]) -> np.ndarray:
        return self.laws[self.index(context)]

    def raw_law(self, context: tuple[int, ...]) -> np.ndarray:
        return self.raw_laws[self.index(context)]

    def raw_logits(self, context: tuple[int, ...]) -> np.ndarray:
        if self.logits is None:
            with np.errstate(divide="ignore"):
                return np.log(self.raw_law(context).astype(np.float64))
        return self.logits[self.index(context)]


@dataclass(frozen=True)
class ChildSpec:
    """One child of a `DraftSpec`.

    Attributes:
        draft: index of the draft model that proposes it (INDEPENDENT: its own q_i;
            WITHOUT_REPLACEMENT: the first child's model gives the shared q; DETERMINISTIC: the
            model whose ranking ``rank`` refers to).
        rank: DETERMINISTIC: the rank-th most likely token of that model (ties: lowest id).
        token: DETERMINISTIC: a fixed token instead (prompt-lookup style; may repeat, may have
            p = 0).
        then: the spec of this child's own children (None: a leaf).
    """

    draft: int = 0
    rank: int = 0
    token: int | None = None
    then: DraftSpec | None = None


@dataclass(frozen=True)
class DraftSpec:
    """How the children of one node are proposed: one rule, then one `ChildSpec` per child."""

    rule: ChildRule
    children: tuple[ChildSpec, ...]


def draft_tree(
    spec: DraftSpec | None,
    context: tuple[int, ...],
    drafts: Sequence[ToyLM],
    rng: RandomSource,
) -> tuple[DraftTree, list[tuple[int, ...]]]:
    """Draft a tree after ``context`` (its last token is the root) following ``spec``.

    Sampled children are drawn through ``rng``; WITHOUT_REPLACEMENT children are drawn in order
    from q with earlier children removed, and stop early if q's support is exhausted. Returns the
    tree and each node's context (``context`` + the path to the node).
    """
    if not context:
        raise ValueError("context must hold at least the root token")
    tree = DraftTree(context[-1])
    contexts = [context]

    def grow(node: int, ctx: tuple[int, ...], node_spec: DraftSpec | None) -> None:
        if node_spec is None:
            return
        rule = node_spec.rule
        remaining: np.ndarray | None = None
        shared_q: np.ndarray | None = None
        for child in node_spec.children:
            if rule is ChildRule.INDEPENDENT:
                q = drafts[child.draft].law(ctx)
                token = int(rng.categorical(q))
                index = tree.add_child(node, token, rule, q)
            elif rule is ChildRule.WITHOUT_REPLACEMENT:
                if shared_q is None:
                    shared_q = drafts[node_spec.children[0].draft].law(ctx)
                    remaining = shared_q
                assert remaining is not None
                if not any(v > 0 for v in remaining):
                    break
                token = int(rng.categorical(remaining))
                index = tree.add_child(node, token, rule, shared_q)
                remaining = remaining.copy()
                remaining[token] = 0
                mass = remaining.sum()
                remaining = remaining / mass if mass > 0 else remaining
            else:
                vocab = drafts[child.draft].vocab_size
                if child.token is not None:
                    token = child.token % vocab
                else:
                    law = np.asarray(drafts[child.draft].law(ctx), dtype=np.float64)
                    order = np.argsort(-law, kind="stable")  # (V,) most likely first
                    token = int(order[child.rank % vocab])
                index = tree.add_child(node, token, rule)
            contexts.append((*ctx, token))
            grow(index, (*ctx, token), child.then)

    grow(0, context, spec)
    return tree, contexts


#: A verifier as the harness calls it: (tree, processed target law per node, rng) -> emitted.
TreeVerifier = Callable[[DraftTree, list[np.ndarray], RandomSource], Sequence[int]]


def casspec_tree_verifier(
    stop_ids: Iterable[int] = (), max_accept: int | None = None
) -> TreeVerifier:
    """casspec_ref's own `verify_tree` with the harness's calling convention."""
    stops = tuple(stop_ids)

    def verifier(tree: DraftTree, laws: list[np.ndarray], rng: RandomSource) -> list[int]:
        result: VerifyResult = verify_tree(tree, laws, rng, stop_ids=stops, max_accept=max_accept)
        return result.emitted

    return verifier


def speculative_tokens(
    rng: RandomSource,
    *,
    target: ToyLM,
    drafts: Sequence[ToyLM],
    spec: DraftSpec | None,
    context: tuple[int, ...],
    n: int,
    verifier: TreeVerifier | None = None,
    stop_ids: Iterable[int] = (),
) -> tuple[int, ...]:
    """One speculative step (draft, verify), then plain AR sampling up to ``n`` tokens.

    The sequence ends early after a stop token. ``verifier`` defaults to `verify_tree`.
    """
    stops = frozenset(stop_ids)
    verify = verifier if verifier is not None else casspec_tree_verifier(stops)
    tree, contexts = draft_tree(spec, context, drafts, rng)
    laws = [target.law(c) for c in contexts]
    out = [int(t) for t in verify(tree, laws, rng)][:n]
    for i, token in enumerate(out):
        if token in stops:
            return tuple(out[: i + 1])
    while len(out) < n:
        token = int(rng.categorical(target.law((*context, *out))))
        out.append(token)
        if token in stops:
            break
    return tuple(out)


def ar_law(
    target: ToyLM,
    context: tuple[int, ...],
    n: int,
    *,
    stop_ids: Iterable[int] = (),
    exact: bool = False,
) -> Law:
    """The law of ``n`` tokens of plain AR sampling from ``target`` (ending early at a stop)."""
    stops = frozenset(stop_ids)
    law: Law = {}

    def walk(prefix: tuple[int, ...], prob: Prob) -> None:
        if len(prefix) == n or (prefix and prefix[-1] in stops):
            law[prefix] = law.get(prefix, 0) + prob
            return
        p = target.law((*context, *prefix))
        for token in range(p.shape[0]):
            mass = Fraction(p[token]) if exact else float(p[token])
            if mass > 0:
                walk((*prefix, token), prob * mass)

    walk((), Fraction(1) if exact else 1.0)
    return law


def spec_depth(spec: DraftSpec | None) -> int:
    """The depth of the deepest node a spec can draft."""
    if spec is None or not spec.children:
        return 0
    return 1 + max(spec_depth(c.then) for c in spec.children)
