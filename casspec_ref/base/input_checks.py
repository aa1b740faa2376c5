"""Argument checks of the generation loops and the sampling functions: each raises `ValueError`
naming the argument, the value and what is allowed. They do the checks the core did, moved here
unchanged (same messages), so that the core's lines stay on the method."""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch


def validate_sampling(temperature: float, top_k: int, top_p: float) -> None:
    """Allowed: ``temperature >= 0`` (0 = greedy, finite), ``top_k >= 0`` (0 = off, an int),
    ``0 < top_p <= 1`` (1 = off)."""
    if not isinstance(temperature, int | float) or isinstance(temperature, bool):
        raise ValueError(f"temperature must be a real number >= 0, got {temperature!r}")
    if math.isnan(temperature) or temperature < 0 or math.isinf(temperature):
        raise ValueError(
            f"temperature must be a finite number >= 0 (0 = greedy), got {temperature}"
        )
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0:
        raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {top_k!r}")
    if not isinstance(top_p, int | float) or isinstance(top_p, bool):
        raise ValueError(f"top_p must be a real number in (0, 1], got {top_p!r}")
    if math.isnan(top_p) or not (0.0 < top_p <= 1.0):
        raise ValueError(f"top_p must be in (0, 1] (1 = off), got {top_p}")


def check_logits(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float
) -> torch.Tensor:
    """The sampling settings, and logits (..., V) that a law can be made from; returns them
    detached, in their own dtype (float64 holds every value exactly). Every row needs at least
    one finite logit."""
    validate_sampling(temperature, top_k, top_p)
    if not isinstance(logits, torch.Tensor):
        raise ValueError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
    if logits.ndim == 0 or logits.shape[-1] == 0:
        raise ValueError(f"logits must have shape (..., V) with V >= 1, got {tuple(logits.shape)}")
    if not (logits.is_floating_point()):
        raise ValueError(f"logits must be a floating-point tensor, got dtype {logits.dtype}")
    x = logits.detach()
    # One pass: a row's maximum is NaN if the row holds a NaN, +inf if it holds +inf (and no NaN),
    # -inf only if every entry is -inf.
    row_max = x.amax(dim=-1)  # (...)
    if torch.isnan(row_max).any() or torch.isposinf(row_max).any():
        raise ValueError("logits contain NaN or +inf; only finite values and -inf are allowed")
    if torch.isneginf(row_max).any():
        raise ValueError("a row of logits is entirely -inf: no token can be sampled")
    return x


def check_weights(probs: object) -> np.ndarray:
    """A categorical law: a non-empty 1-D array of finite, non-negative weights with some mass;
    returned as float64."""
    law = np.asarray(probs)
    if law.ndim != 1 or law.shape[0] == 0:
        raise ValueError(f"categorical needs a non-empty 1-D law, got shape {law.shape}")
    weights = law.astype(np.float64)
    if (weights < 0).any() or not np.isfinite(weights).all():
        raise ValueError("categorical law has negative or non-finite entries")
    if not weights.any():
        raise ValueError("categorical law has no mass")
    return weights


def check_seed_or_generator(seed: object, generator: object) -> None:
    """A random source is seeded by at most one of ``seed`` and ``generator``."""
    if seed is not None and generator is not None:
        raise ValueError("give either seed or generator, not both")


def check_probability(prob: object) -> float:
    """A probability in [0, 1] (a float or `Fraction`), as a float."""
    p = float(prob)  # type: ignore[arg-type]
    if math.isnan(p) or p < 0.0 or p > 1.0:
        raise ValueError(f"bernoulli probability must be in [0, 1], got {prob}")
    return p


def is_token_id(value: object, vocab_size: int) -> bool:
    if isinstance(value, bool | float):
        return False
    try:
        index = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return False
    return 0 <= index < vocab_size


def as_token_list(value: object, what: str, vocab_size: int) -> list[int]:
    """``value`` (a sequence of ints, or an integer tensor/array of shape (T,) or (1, T)) as a
    list of token ids in ``0 .. vocab_size - 1``; anything else raises `ValueError` that names
    ``what`` and describes the value without dumping it."""
    if isinstance(value, torch.Tensor | np.ndarray):
        shape = tuple(value.shape)
        dtype = value.dtype
        if isinstance(value, torch.Tensor):
            is_int = not (value.is_floating_point() or value.is_complex() or dtype == torch.bool)
        else:
            is_int = bool(np.issubdtype(value.dtype, np.integer))
        if not is_int:
            raise ValueError(
                f"{what} is a {type(value).__name__} of dtype {dtype}: token ids must be "
                "integers (a float or bool tensor is not silently converted)"
            )
        if len(shape) == 2 and shape[0] == 1:
            value = value[0]
        elif len(shape) != 1:
            raise ValueError(
                f"{what} has shape {list(shape)}: allowed are (T,) or (1, T); generation runs "
                "one sequence at a time"
            )
        ids = [int(t) for t in value.tolist()]
    elif isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ValueError(
            f"{what} must be a sequence of token ids, got {type(value).__name__}"
            + (" (encode text with a tokenizer first)" if isinstance(value, str) else "")
        )
    else:
        ids = list(value)
    bad = [t for t in ids if not is_token_id(t, vocab_size)]
    if bad:
        shown = ", ".join(repr(t)[:20] for t in bad[:5])
        raise ValueError(
            f"{what} contains [{shown}{', ...' if len(bad) > 5 else ''}]: token ids must be "
            f"integers in 0..{vocab_size - 1} (vocab_size {vocab_size})"
        )
    return [operator.index(t) for t in ids]  # numpy / torch integers -> int


def check_generation_args(
    config: Any,
    prompt_ids: object,
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    top_p: float,
    stop_ids: Iterable[int],
    seed: int | None,
    rng: object,
    plan: Any = None,
) -> tuple[list[int], frozenset[int]]:
    """The checks every generation loop shares, against the model's ``config``; returns the
    prompt as a list and the stop ids as a set. ``prompt_ids`` may be a sequence of ints or an
    integer tensor of shape (T,) or (1, T) (floats, bools and batches are refused, never
    converted); ``rng`` (if given) must provide the `RandomSource` methods; ``plan`` (if given,
    an `ExecutionPlan`) must fit the model."""
    prompt = as_token_list(prompt_ids, "prompt_ids", config.vocab_size)
    if not prompt:
        raise ValueError("prompt_ids is empty: give at least one token id")
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise ValueError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens!r}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    validate_sampling(temperature, top_k, top_p)
    stops = frozenset(as_token_list(list(stop_ids), "stop_ids", config.vocab_size))
    if seed is not None and rng is not None:
        raise ValueError("give either seed or rng, not both")
    if rng is not None and not all(
        callable(getattr(rng, name, None)) for name in ("bernoulli", "categorical")
    ):
        raise ValueError(
            f"rng is a {type(rng).__name__}: it must provide the RandomSource methods "
            "bernoulli(prob) and categorical(probs) (e.g. casspec_ref.sampling.TorchRandomSource)"
        )
    if len(prompt) + max_new_tokens > config.max_seq_len:
        raise ValueError(
            f"prompt of {len(prompt)} tokens + max_new_tokens={max_new_tokens} = "
            f"{len(prompt) + max_new_tokens} exceeds the model context max_seq_len="
            f"{config.max_seq_len}"
        )
    if plan is not None:
        plan.validate(config)
    return prompt, stops


def check_choice(kind: str, value: str, allowed: Sequence[str]) -> None:
    """``value`` must be one of ``allowed`` (e.g. kind "method")."""
    if value not in allowed:
        raise ValueError(f"unknown {kind} {value!r}: allowed are {', '.join(allowed)}")


def check_options(options: Iterable[str], allowed: set[str]) -> None:
    """Keyword options must all be in ``allowed``."""
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise ValueError(f"unknown options {unknown}: allowed are {sorted(allowed)}")


def check_option_type(value: object, allowed: type) -> None:
    """`generate_speculative`'s ``dytc`` and ``schedule`` options must be their config types."""
    if not isinstance(value, allowed):
        raise ValueError("options dytc and schedule must be DyTCConfig and ScheduleOptions")


def check_draft_levels(
    levels: Sequence[Any], plan_type: type[Any], config: Any, reserved: Sequence[str]
) -> None:
    """Draft levels must be ``plan_type`` (`ExecutionPlan`) instances valid for the model's
    ``config``, with unique names other than the ``reserved`` free drafts' names."""
    for plan in levels:
        if not isinstance(plan, plan_type):
            raise ValueError(
                "drafts must be a Hierarchy or a sequence of ExecutionPlan, got "
                f"{type(plan).__name__}"
            )
        plan.validate(config)
    names = [plan.name for plan in levels]
    if len(set(names)) != len(names) or set(names) & set(reserved):
        raise ValueError(
            f"draft levels need unique names other than {reserved} (statistics are kept per "
            "name); "
            f"got {names}"
        )


def check_policy_knows(policy_drafts: Sequence[str], levels: Sequence[str]) -> None:
    """A DyTC policy handed in must know every level of the hierarchy."""
    missing = sorted(set(levels) - set(policy_drafts))
    if missing:
        raise ValueError(
            f"the DyTC policy knows drafts {list(policy_drafts)} but the hierarchy has "
            f"levels {missing} it does not know"
        )
