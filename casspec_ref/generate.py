"""Generation loops: plain autoregressive decoding (the baseline every speedup is measured against).

Scope: `generate_ar`, the naive loop, one token per target forward through the KV cache; it is
also the correctness oracle (docs/method.md §1: a lossless speculative method emits exactly the
tokens of this loop under greedy decoding, and the same law when sampling). The speculative loop
is added to this module separately.

Notable choices:
- Fair baseline (docs/smollm2.md, "the naive loop must be fair"): the prompt is prefilled in one
  forward that computes the LM head for the last position only; each later step feeds exactly
  one token; no forward runs after the last token is chosen; linears use the model's fastest
  exact kernels, the same ones the speculative paths use.
- Greedy (temperature 0) takes ``argmax`` of the logits, ties to the lowest token id (this equals
  `casspec_ref.sampling.target_law` at temperature 0, without building a one-hot law). Sampling
  draws from the processed law ``p = target_law(logits, temperature, top_k, top_p)`` through an
  explicit `RandomSource`, one ``categorical`` draw per token.
- Stop tokens: a token in ``stop_ids`` is emitted (it is part of ``tokens`` and passed to
  ``on_token``), then generation stops with ``stopped=True``. ``stop_ids`` defaults to none; pass
  ``model.config.eos_ids`` (or a tokenizer's stop ids) to stop at end of sequence.
- MAT (tau) counts tokens per target forward, bonus token included; for this loop it is 1.00.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from casspec_ref.kv_cache import KVCache
from casspec_ref.model import Transformer
from casspec_ref.plan import ExecutionPlan
from casspec_ref.sampling import RandomSource, TorchRandomSource, target_law, validate_sampling


@dataclass
class GenerationResult:
    """What a generation loop returns.

    Attributes:
        tokens: the generated token ids only (the prompt excluded; a stop token included).
        prompt_ids: the prompt, as given.
        stopped: True when generation ended on a stop token (False: ``max_new_tokens`` reached).
        timing: ``prefill_s`` (prompt forward and first token), ``decode_s`` (the rest),
            ``total_s`` and ``tokens_per_s`` (generated tokens / total_s, prefill included).
        stats: counters, e.g. ``target_forwards``, ``mat`` (tokens per target forward, bonus
            included), ``method``.
    """

    tokens: list[int]
    prompt_ids: list[int]
    stopped: bool
    timing: dict[str, float] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)


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
    bad = [t for t in ids if not _is_token_id(t, vocab_size)]
    if bad:
        shown = ", ".join(repr(t)[:20] for t in bad[:5])
        raise ValueError(
            f"{what} contains [{shown}{', ...' if len(bad) > 5 else ''}]: token ids must be "
            f"integers in 0..{vocab_size - 1} (vocab_size {vocab_size})"
        )
    return [operator.index(t) for t in ids]  # numpy / torch integers -> int


def check_generation_args(
    model: Transformer,
    prompt_ids: Sequence[int] | torch.Tensor,
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    top_p: float,
    stop_ids: Iterable[int],
    seed: int | None = None,
    rng: RandomSource | None = None,
) -> tuple[list[int], frozenset[int], RandomSource]:
    """Validate the arguments every generation loop shares; return the prompt as a list, the
    stop ids as a set and the random source (``rng``, or a `TorchRandomSource` from ``seed``).

    The one boundary check of `generate_ar` and `generate_speculative`: ``prompt_ids`` may be a
    sequence of ints or an integer tensor of shape (T,) or (1, T) (floats, bools and batches
    are refused, never converted), ``rng`` (if given) must provide the `RandomSource` methods.
    Raises `ValueError` naming the bad argument and what is allowed.
    """
    config = model.config
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
    source = rng if rng is not None else TorchRandomSource(seed=seed)
    return prompt, stops, source


def _is_token_id(value: object, vocab_size: int) -> bool:
    if isinstance(value, bool | float):
        return False
    try:
        index = operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return False
    return 0 <= index < vocab_size


def choose_token(
    logits: torch.Tensor, temperature: float, top_k: int, top_p: float, rng: RandomSource
) -> int:
    """The next token from one row of logits ``(V,)``: argmax when greedy, else a draw from p."""
    if temperature == 0:
        return int(torch.argmax(logits))  # first maximal index: ties to the lowest id
    probs = target_law(logits, temperature, top_k, top_p)  # (V,) float64
    return rng.categorical(probs.cpu().numpy())


def generate_ar(
    model: Transformer,
    prompt_ids: Sequence[int] | torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    rng: RandomSource | None = None,
    stop_ids: Iterable[int] = (),
    on_token: Callable[[int], None] | None = None,
    plan: ExecutionPlan | None = None,
) -> GenerationResult:
    """Plain autoregressive decoding, one token per forward through a KV cache.

    Args:
        model: the target model (batch 1).
        prompt_ids: the prompt token ids (non-empty): ints, or an integer tensor (T,)/(1, T).
        max_new_tokens: at most this many tokens are generated (>= 0).
        temperature, top_k, top_p: the sampling transforms (temperature 0 = greedy).
        seed, rng: the random source (one of them; unused when greedy).
        stop_ids: a token in this set is emitted, then generation stops.
        on_token: called with each generated token as soon as it is chosen.
        plan: run the model under this execution plan (``None`` = the target itself).
    Returns:
        A `GenerationResult`.
    """
    prompt, stop, random_source = check_generation_args(
        model, prompt_ids, max_new_tokens, temperature, top_k, top_p, stop_ids, seed, rng
    )
    if plan is not None:
        plan.validate(model.config)
    param = model.tok_emb.weight
    dtype = param.dtype if plan is None or plan.compute_dtype is None else plan.compute_dtype

    tokens: list[int] = []
    stopped = False
    start = prefill_end = time.perf_counter()
    if max_new_tokens > 0:
        # The last generated token is never fed back, hence the - 1.
        cache = KVCache(model.config, len(prompt) + max_new_tokens - 1, dtype, param.device)
        feed = torch.tensor([prompt], dtype=torch.long, device=param.device)  # (1, T_prompt)
        while True:
            logits = model(feed, cache=cache, plan=plan, last_only=True)  # (1, 1, V)
            token = choose_token(logits[0, -1], temperature, top_k, top_p, random_source)
            if not tokens:
                prefill_end = time.perf_counter()
            tokens.append(token)
            if on_token is not None:
                on_token(token)
            stopped = token in stop
            if stopped or len(tokens) == max_new_tokens:
                break
            feed = torch.tensor([[token]], dtype=torch.long, device=param.device)  # (1, 1)
    timing = loop_timing(start, prefill_end, time.perf_counter(), len(tokens))
    stats: dict[str, Any] = {
        "method": "ar",
        "plan": "target" if plan is None else plan.name,
        "prompt_tokens": len(prompt),
        "new_tokens": len(tokens),
        "target_forwards": len(tokens),  # one forward per token: the prefill gives the first
        "mat": 1.0 if tokens else 0.0,
    }
    return GenerationResult(tokens, prompt, stopped, timing, stats)


def loop_timing(start: float, first_token: float, end: float, n_tokens: int) -> dict[str, float]:
    """The ``timing`` of a `GenerationResult` from the clock readings of one generation."""
    total = end - start
    return {
        "prefill_s": first_token - start,
        "decode_s": end - first_token,
        "total_s": total,
        "tokens_per_s": n_tokens / total if total > 0 else 0.0,
    }
