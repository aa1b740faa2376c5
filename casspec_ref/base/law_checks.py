"""Checks of the laws, tokens and node indices a draft tree and its verifier receive.

Pure value checks (`casspec_ref.tree`, `casspec_ref.verify`), each raising a `ValueError` that
names the value and what is allowed. A law is a 1-D array of probabilities: float64, or an
object array of `Fraction`s for exact arithmetic; torch tensors are converted to float64. Also
the 0, 1 and one-hot law in a law's own number type, for the verifier's arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import torch

#: How far a float64 law's sum may be from 1 before it is refused as "not a law".
LAW_SUM_TOLERANCE = 1e-6


def check_token(token: Any) -> None:
    if not isinstance(token, int | np.integer) or isinstance(token, bool) or token < 0:
        raise ValueError(f"a token must be a non-negative integer id, got {token!r}")


def check_parent(parent: Any, n_nodes: int) -> None:
    if not (isinstance(parent, int | np.integer) and 0 <= parent < n_nodes):
        raise ValueError(f"parent must be an existing node index in [0, {n_nodes}), got {parent}")


def check_node(node: int, n_nodes: int) -> None:
    if not 0 <= node < n_nodes:
        raise ValueError(f"node must be in [0, {n_nodes}), got {node}")


def check_rule(rule: Any, rule_type: type) -> None:
    if not isinstance(rule, rule_type):
        raise ValueError(f"rule must be a ChildRule, got {rule!r}")


def check_child(rule: Any, parent_rule: Any, parent: int, draft_probs: Any) -> None:
    """One `ChildRule` per parent; a draft law for every child but a DETERMINISTIC one."""
    if parent_rule is not None and parent_rule is not rule:
        raise ValueError(
            f"node {parent} already has {parent_rule.value} children; one rule per parent "
            f"(got {rule.value}). Use INDEPENDENT with a one-hot law for a deterministic child."
        )
    if rule.value == "deterministic" and draft_probs is not None:
        raise ValueError("DETERMINISTIC children carry no draft law; pass draft_probs=None")
    if rule.value != "deterministic" and draft_probs is None:
        raise ValueError(f"{rule.value} children need the draft law they were drawn from")


def check_sibling(
    first: np.ndarray | None, law: np.ndarray | None, token: int, siblings: Iterable[int]
) -> None:
    """A WITHOUT_REPLACEMENT child shares its siblings' law q and repeats none of their tokens."""
    if first is not law and not np.array_equal(first, law):  # type: ignore[arg-type]
        raise ValueError(
            "WITHOUT_REPLACEMENT siblings must share the one unconditional law q they "
            "were drawn from"
        )
    if any(sibling == int(token) for sibling in siblings):
        raise ValueError(f"token {token} repeats a WITHOUT_REPLACEMENT sibling")


def check_prefix_len(prefix_len: int) -> None:
    if prefix_len < 0:
        raise ValueError(f"prefix_len must be >= 0, got {prefix_len}")


def check_max_accept(max_accept: Any) -> None:
    if max_accept is not None and (not isinstance(max_accept, int) or max_accept < 0):
        raise ValueError(f"max_accept must be None or an integer >= 0, got {max_accept!r}")


def as_draft_law(probs: np.ndarray | torch.Tensor, token: int) -> np.ndarray:
    """A 1-D numpy law (float64, or object for Fractions) that ``token`` indexes; torch tensors
    are converted."""
    if isinstance(probs, torch.Tensor):
        probs = probs.detach().to("cpu", torch.float64).numpy()
    law = np.asarray(probs)
    if law.ndim != 1 or law.shape[0] == 0:
        raise ValueError(f"a draft law must be a non-empty 1-D array, got shape {law.shape}")
    if law.dtype != object and law.dtype != np.float64:
        law = law.astype(np.float64)
    if not 0 <= int(token) < law.shape[0]:
        raise ValueError(f"token {token} is outside the draft law's vocabulary")
    return law


def node_laws(
    target_probs: Sequence[np.ndarray] | np.ndarray | torch.Tensor, n_nodes: int
) -> Sequence[np.ndarray]:
    """One target law per tree node, as a list (an (N, V) tensor becomes float64 rows)."""
    if isinstance(target_probs, torch.Tensor):
        if target_probs.ndim != 2:
            raise ValueError(f"target_probs tensor must be (N, V), got {tuple(target_probs.shape)}")
        target_probs = target_probs.detach().to("cpu", torch.float64).numpy()
    if len(target_probs) != n_nodes:
        raise ValueError(f"need one target law per tree node ({n_nodes}), got {len(target_probs)}")
    return list(target_probs)


def check_law(law: np.ndarray | None, kind: str, node: int, vocab: int | None = None) -> np.ndarray:
    """Validate the ``kind`` ("target" or "draft") law of tree node ``node`` (1-D, non-negative,
    sums to 1, ``vocab`` entries if given) and return it as a float64 or Fraction array."""
    what = f"{kind} law of node {node}"
    if law is None:
        raise ValueError(f"{what} is missing")
    if isinstance(law, torch.Tensor):
        law = law.detach().to("cpu", torch.float64).numpy()
    array = np.asarray(law)
    if array.ndim != 1 or array.shape[0] == 0:
        raise ValueError(f"{what} must be a non-empty 1-D array, got shape {array.shape}")
    if array.dtype == object:
        if not all(isinstance(v, Fraction) for v in array):
            array = np.array([Fraction(v) for v in array], dtype=object)
        total = array.sum()
        if any(v < 0 for v in array) or total != 1:
            raise ValueError(f"{what} must be non-negative and sum exactly to 1, sums to {total}")
    else:
        if array.dtype != np.float64:
            array = array.astype(np.float64)
        if not np.isfinite(array).all() or (array < 0).any():
            raise ValueError(f"{what} must be finite and non-negative")
        total = float(array.sum())
        if abs(total - 1.0) > LAW_SUM_TOLERANCE:
            raise ValueError(f"{what} must sum to 1 (within {LAW_SUM_TOLERANCE}), sums to {total}")
    if vocab is not None and array.shape[0] != vocab:
        versus = "not" if kind == "target" else "the target law"
        raise ValueError(f"{what} has {array.shape[0]} entries, {versus} {vocab}")
    return array


def one_hot(token: int, like: np.ndarray) -> np.ndarray:
    """The law certain of `token`, exact (`Fraction`s) when `like` is."""
    if like.dtype == object:
        law = np.full(like.shape[0], Fraction(0), dtype=object)
        law[token] = Fraction(1)
        return law
    law = np.zeros(like.shape[0], dtype=np.float64)
    law[token] = 1.0
    return law


def zero(like: np.ndarray) -> Fraction | float:
    """0 in the number type of the law `like`."""
    return Fraction(0) if like.dtype == object else 0.0


def one(like: Fraction | float) -> Fraction | float:
    """1 in the number type of `like`."""
    return Fraction(1) if isinstance(like, Fraction) else 1.0
