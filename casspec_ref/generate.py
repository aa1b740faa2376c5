"""The naive loop: plain autoregressive decoding, one token per target forward through the KV
cache. It is the baseline every speedup is measured against, and the correctness oracle: a
lossless method emits exactly its tokens when greedy, the same law when sampling (docs/method.md
§1). Its one-row forwards compute each token's logits with the same bits as a verify forward
computes that token's row wherever the model's forward is shape-invariant (on a CPU, in every
dtype whose forms the machine's check found invariant: `casspec_ref.accel.invariance`; how it is
checked: docs/floating_point.md). Why it is a fair
baseline: docs/design.md ("The naive loop is the fair baseline")."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from casspec_ref.base.input_checks import check_generation_args
from casspec_ref.kv_cache import KVCache
from casspec_ref.model import Transformer
from casspec_ref.plan import ExecutionPlan
from casspec_ref.sampling import RandomSource, TorchRandomSource, target_law


@dataclass
class GenerationResult:
    """What a generation loop returns."""

    tokens: list[int]  # the generated ids (prompt excluded, a stop token included)
    prompt_ids: list[int]
    stopped: bool  # True when it ended on a stop token, False at max_new_tokens
    timing: dict[str, float] = field(default_factory=dict)  # seconds; tokens_per_s over total_s
    stats: dict[str, Any] = field(default_factory=dict)  # target_forwards, mat, method, ...


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
    sampling = (temperature, top_k, top_p)
    prompt, stop = check_generation_args(
        model.config, prompt_ids, max_new_tokens, *sampling, stop_ids, seed, rng, plan
    )
    source = rng if rng is not None else TorchRandomSource(seed=seed)
    param = model.tok_emb.weight
    dtype = param.dtype if plan is None or plan.compute_dtype is None else plan.compute_dtype
    tokens: list[int] = []
    stopped = False
    start = prefill_end = time.perf_counter()
    if max_new_tokens > 0:
        # The last generated token is never fed back, hence the - 1.
        cache = KVCache(model.config, len(prompt) + max_new_tokens - 1, dtype, param.device)
        feed = torch.tensor([prompt], dtype=torch.long, device=param.device)  # (1, T_prompt)
        logits = run_prompt(model, feed, cache, plan)  # (1, 1, V)
        while True:
            if temperature == 0:
                token = int(torch.argmax(logits[0, -1]))  # the first maximum: ties to the lowest id
            else:
                probs = target_law(logits[0, -1], temperature, top_k, top_p)  # (V,) float64
                token = source.categorical(probs.cpu().numpy())
            if not tokens:
                prefill_end = time.perf_counter()
            tokens.append(token)
            if on_token is not None:
                on_token(token)
            stopped = token in stop
            if stopped or len(tokens) == max_new_tokens:
                break
            feed = torch.tensor([[token]], dtype=torch.long, device=param.device)  # (1, 1)
            logits = model(feed, cache=cache, plan=plan, last_only=True)  # (1, 1, V)
    end = time.perf_counter()
    timing = {"prefill_s": prefill_end - start, "decode_s": end - prefill_end}
    return GenerationResult(tokens, prompt, stopped, *_ar_records(timing, plan, prompt, tokens))


def run_prompt(
    model: Transformer, prompt: torch.Tensor, cache: KVCache, plan: ExecutionPlan | None = None
) -> torch.Tensor:
    """Write the prompt ``(1, P)``'s K/V into ``cache``; return its last position's logits
    ``(1, 1, V)``. One forward, or, where ``model.prompt_rows`` is set, forwards of at most that
    many rows in order: the same bits wherever the forward is shape-invariant (each row is
    computed as a one-row forward computes it), and no forward larger than the thread policy
    checked (`casspec_ref.accel.threads.watch`)."""
    rows = model.prompt_rows or prompt.shape[1]
    for start in range(0, prompt.shape[1], rows):
        logits = model(prompt[:, start : start + rows], cache=cache, plan=plan, last_only=True)
    return logits


def _ar_records(
    timing: dict[str, float], plan: ExecutionPlan | None, prompt: list[int], tokens: list[int]
) -> tuple[dict[str, float], dict[str, Any]]:
    """The naive loop's timing (``timing`` holds prefill_s and decode_s) and statistics."""
    total = timing["prefill_s"] + timing["decode_s"]
    timing = {**timing, "total_s": total, "tokens_per_s": len(tokens) / total if total > 0 else 0.0}
    stats: dict[str, Any] = {
        "method": "ar",
        "plan": "target" if plan is None else plan.name,
        "prompt_tokens": len(prompt),
        "new_tokens": len(tokens),
        "target_forwards": len(tokens),  # one forward per token: the prefill gives the first
        "mat": 1.0 if tokens else 0.0,
    }
    return timing, stats
