"""The speculative decoding loop: draft a tree, verify it in one target forward, commit, repeat.

One step (docs/method.md §4-§5): a schedule (`casspec_ref.schedules`) drafts a `DraftTree` whose
root is the last committed token; ONE target forward over [root + every node], with the tree's
mask and positions, gives the processed law p of every node; `verify.verify_tree` accepts a path
and draws the next token; `KVCache.commit` keeps the root and the accepted path, so the cache
equals a fresh prefill of the accepted prefix. Choices and statistics: docs/design.md.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from casspec_ref.base import input_checks as checks
from casspec_ref.draft import DraftSampling, StepDrafter
from casspec_ref.dsia.compose import Hierarchy
from casspec_ref.dsia.prompt_lookup import PromptLookup, PromptLookupConfig
from casspec_ref.dsia.recycle import TokenRecycler
from casspec_ref.dsia.virtual_draft import DraftRunner
from casspec_ref.dytc import FREE_DRAFTS, DyTCConfig
from casspec_ref.generate import GenerationResult, generate_ar
from casspec_ref.kv_cache import KVCache
from casspec_ref.plan import ExecutionPlan
from casspec_ref.sampling import RandomSource, TorchRandomSource, target_law
from casspec_ref.schedules import SCHEDULES, Schedule, ScheduleSpec
from casspec_ref.tree import DraftTree
from casspec_ref.verify import VerifyResult, verify_tree

#: Every method the loop (and the CLI's --method) knows: plain AR, the registered baselines,
#: and CAS-Spec last (the order of the bench's tables).
METHODS = ("ar", *[name for name in SCHEDULES if name != "cas-spec"], "cas-spec")


@dataclass(frozen=True)
class StepTrace:
    """What `on_step` receives after each speculative step (for a --show-tree trace): the tree,
    each node's draft name, the verifier's result, the tokens whose K/V the cache holds after
    the commit (prompt + committed, root included) and the live cache (read it only)."""

    step: int
    tree: DraftTree
    sources: list[str]
    result: VerifyResult
    prefix: list[int]
    cache: KVCache


def default_drafts(model: Any) -> tuple[ExecutionPlan, ...]:
    """The DSIA hierarchy used when `drafts` is None, cheapest level first: the preset a loader
    attached (``model.preset_drafts``); else, from 12 layers on, the blocks found cheapest to
    skip on SmolLM2 (docs/smollm2.md); else an early exit and a skipped middle MLP."""
    if preset := getattr(model, "preset_drafts", None):
        return tuple(preset)
    n = model.config.n_layers
    if n >= 12:
        skips = frozenset(i for i in (3, 4, 5, 6, 7, 10, 14) if i < n - 2)
        return (ExecutionPlan(skip_attention=skips, skip_mlp=skips, name="skip7"),)
    early = ExecutionPlan(exit_after=max(1, n - 1), name=f"exit{max(1, n - 1)}")
    skip = ExecutionPlan(skip_mlp=frozenset({n // 2}), name=f"skipmlp{n // 2}")
    return (early, skip)


@dataclass
class Decoding:
    """What one speculative generation carries from step to step: `prefill` starts it, each
    `speculative_step` advances it by one draft-verify-commit step."""

    model: Any
    prompt: list[int]
    max_new_tokens: int
    schedule: Schedule
    levels: dict[str, ExecutionPlan]
    sampling: DraftSampling
    rng: RandomSource
    stops: frozenset[int]
    cache: KVCache
    pld: PromptLookup
    recycler: TokenRecycler | None
    clock: Callable[[], float]
    on_token: Callable[[int], None] | None = None
    on_step: Callable[[StepTrace], None] | None = None
    tokens: list[int] = field(default_factory=list)
    done: bool = False
    stopped: bool = False
    stats: dict[str, Any] = field(default_factory=dict)

    def emit(self, token: int) -> None:
        """Append one generated token; mark the generation done on a stop token or the limit."""
        self.tokens.append(token)
        self.pld.append(token)
        if self.on_token is not None:
            self.on_token(token)
        self.stopped = token in self.stops
        self.done = self.stopped or len(self.tokens) >= self.max_new_tokens


def prefill(state: Decoding) -> None:
    """Run the whole prompt through the target and draw the first token, as `generate_ar` does."""
    t0 = state.clock()
    prompt_t = torch.tensor([state.prompt], dtype=torch.long, device=state.cache.k.device)  # (1,P)
    logits = state.model.forward(prompt_t, None, cache=state.cache, last_only=True)  # (1, 1, V)
    s = state.sampling
    law = target_law(logits[0, -1], s.temperature, s.top_k, s.top_p).cpu().numpy()  # (V,)
    state.stats["time_verify_s"] += state.clock() - t0
    state.stats["target_forwards"] += 1
    state.emit(int(state.rng.categorical(law)))


def draft_tree(state: Decoding) -> StepDrafter:
    """Step part 1: the schedule drafts a tree whose root is the last committed token."""
    t0 = state.clock()
    room = state.cache.max_len - state.cache.length
    remaining = state.max_new_tokens - len(state.tokens)
    runner = DraftRunner(state.model, state.cache)
    drafter = StepDrafter(
        state.tokens[-1], state.pld.tokens, runner, state.pld, state.levels, state.sampling,
        state.rng, max_nodes=min(state.schedule.max_nodes, room),
        max_depth=max(0, min(remaining - 1, room - 1)), clock=state.clock,
        recycler=state.recycler,
    )  # fmt: skip
    if drafter.max_depth > 0:
        state.schedule.build(drafter)
    state.stats["draft_forwards"] += runner.forwards
    runner.release()  # scratch rows go; the cache holds the verified prefix again
    elapsed = state.clock() - t0
    state.stats["time_draft_s"] += elapsed
    # Planning: drafting time not spent in draft forwards or lookups (policy, bookkeeping).
    state.stats["time_plan_s"] += max(0.0, elapsed - drafter.seconds())
    return drafter


def verify_step(state: Decoding, drafter: StepDrafter) -> tuple[VerifyResult, float]:
    """Step part 2: ONE target forward over the tree, the verifier, and the cache commit."""
    t0 = state.clock()
    tree, cache, base = drafter.tree, state.cache, state.cache.length
    device = cache.k.device
    node_tokens = torch.tensor([tree.tokens], dtype=torch.long, device=device)  # (1, N)
    positions = tree.positions(base)[None].to(device)  # (1, N)
    # A chain (the root alone included) is causal: no mask takes the naive loop's path.
    is_chain = all(tree.parent(i) == i - 1 for i in range(1, len(tree)))
    mask = None if is_chain else tree.attention_mask(base).to(device)  # (N, base + N)
    logits = state.model.forward(node_tokens, positions, cache=cache, attn_mask=mask)  # (1,N,V)
    s = state.sampling
    target_probs = target_law(logits[0], s.temperature, s.top_k, s.top_p).cpu().numpy()  # (N, V)
    remaining = state.max_new_tokens - len(state.tokens)
    result = verify_tree(tree, target_probs, state.rng, stop_ids=state.stops,
                         max_accept=remaining - 1)  # fmt: skip
    cache.commit(base, [0, *result.accepted])
    if state.recycler is not None:
        state.recycler.update(tree.tokens, logits[0])  # what the target predicted, for later
    seconds = state.clock() - t0
    state.stats["time_verify_s"] += seconds
    state.stats["target_forwards"] += 1
    return result, seconds


def speculative_step(state: Decoding) -> VerifyResult:
    """One step: draft a tree, verify it in one forward, commit, let the schedule learn."""
    drafter = draft_tree(state)
    result, seconds = verify_step(state, drafter)
    state.schedule.observe(drafter, result.accepted, seconds)
    tree, stats = drafter.tree, state.stats
    stats["steps"] += 1
    stats["accepted_lengths"].append(len(result.accepted))
    stats["tree_sizes"].append(len(tree))
    stats["branching_steps"] += int(any(len(tree.children(n)) > 1 for n in range(len(tree))))
    sources = [info.source for info in drafter.info]
    stats["proposed"].update(sources[1:])
    stats["accepted"].update(sources[node] for node in result.accepted)
    if state.on_step is not None:
        prefix = state.prompt + state.tokens + result.accepted_tokens
        state.on_step(StepTrace(stats["steps"], tree, sources, result, prefix, state.cache))
    for token in result.emitted:  # a stop token the verifier accepted is emitted last
        state.emit(token)
        if state.done:
            break
    return result


def start_decoding(
    model: Any, prompt: list[int], max_new_tokens: int, method: str, sampling: DraftSampling,
    rng: RandomSource, stops: frozenset[int] = frozenset(),
    drafts: Hierarchy | Sequence[ExecutionPlan] | None = None,
    options: dict[str, Any] | None = None,
) -> Decoding:  # fmt: skip
    """The state of one generation: drafts, schedule, cache, prompt lookup, counters. Takes the
    arguments as checked; ``options`` are `generate_speculative`'s keyword options."""
    options = options or {}
    policy = options.get("policy")
    dytc_config = policy.config if policy is not None else options.get("dytc", DyTCConfig())
    checks.check_option_type(dytc_config, DyTCConfig)
    kind = SCHEDULES[method]
    drafts = default_drafts(model) if drafts is None else drafts
    plans = drafts.levels if isinstance(drafts, Hierarchy) else drafts
    levels = tuple(plans) if kind.uses_levels else ()
    checks.check_draft_levels(levels, ExecutionPlan, model.config, FREE_DRAFTS)
    names = [p.name for p in levels]
    spec = ScheduleSpec(names, model.config.n_layers, dytc_config, policy, options.get("schedule"))
    schedule = kind(spec)
    param = next(model.parameters())
    total = len(prompt) + max_new_tokens + max(schedule.max_nodes, 64) + 1
    cache = KVCache(model.config, min(model.config.max_seq_len, total), param.dtype, param.device)
    stats: dict[str, Any] = {
        "method": method, "levels": names, "accepted_lengths": [], "steps": 0,
        "target_forwards": 0, "proposed": Counter(), "accepted": Counter(), "draft_forwards": 0,
        "tree_sizes": [], "branching_steps": 0,
        "time_draft_s": 0.0, "time_plan_s": 0.0, "time_verify_s": 0.0,
    }  # fmt: skip
    pld = PromptLookup(prompt, options.get("pld", PromptLookupConfig()))
    recycler = TokenRecycler() if schedule.uses_recycler else None
    return Decoding(
        model, prompt, max_new_tokens, schedule, {p.name: p for p in levels}, sampling, rng,
        stops, cache, pld, recycler, options.get("clock", time.perf_counter), stats=stats,
    )  # fmt: skip


def generate_speculative(
    model: Any, prompt_ids: Sequence[int] | torch.Tensor, max_new_tokens: int, *,
    method: str = "cas-spec", temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0,
    seed: int | None = None, rng: RandomSource | None = None, stop_ids: Iterable[int] = (),
    on_token: Callable[[int], None] | None = None,
    drafts: Hierarchy | Sequence[ExecutionPlan] | None = None,
    on_step: Callable[[StepTrace], None] | None = None, **options: Any,
) -> GenerationResult:  # fmt: skip
    """Generate with speculative decoding; the output law equals `generate_ar`'s.

    Args (those `generate_ar` also takes mean the same there):
        method: one of `METHODS`.
        drafts: the DSIA hierarchy, cheapest level first (default: `default_drafts(model)`).
        on_step: called with a `StepTrace` after every step.
        options: `dytc=DyTCConfig(...)`, `schedule=ScheduleOptions(...)` (the baselines'),
            `pld=PromptLookupConfig(...)`, `clock=` a seconds counter (tests inject a
            deterministic one), `policy=` a `DyTCPolicy` carried across calls (updated in place).
    Returns:
        A `GenerationResult`; its ``stats`` are listed in docs/design.md (`speculative.py`).
    """
    checks.check_choice("method", method, METHODS)
    checks.check_options(options, {"dytc", "schedule", "pld", "clock", "policy"})
    prompt, stops = checks.check_generation_args(
        model.config, prompt_ids, max_new_tokens, temperature, top_k, top_p, stop_ids, seed, rng
    )
    rng = rng if rng is not None else TorchRandomSource(seed=seed)
    if method == "ar":  # the naive loop itself, with the step statistics of a speculative run
        ar = generate_ar(model, prompt, max_new_tokens, temperature=temperature, top_k=top_k,
                         top_p=top_p, rng=rng, stop_ids=stops, on_token=on_token)  # fmt: skip
        steps = max(0, len(ar.tokens) - 1)
        ar.stats.update(accepted_lengths=[0] * steps, steps=steps)
        return ar
    sampling = DraftSampling(temperature, top_k, top_p)
    state = start_decoding(
        model, prompt, max_new_tokens, method, sampling, rng, stops, drafts, options
    )
    state.on_token, state.on_step = on_token, on_step
    t_start = t_decode = state.clock()
    with torch.no_grad():
        if max_new_tokens > 0:
            prefill(state)
            t_decode = state.clock()  # the prompt's forward and the first token are behind
            while not state.done:
                speculative_step(state)
    elapsed, stats, n = state.clock() - t_start, state.stats, len(state.tokens)
    stats["mat"] = n / max(1, stats["target_forwards"]) if n else 0.0
    stats["time_other_s"] = max(0.0, elapsed - stats["time_draft_s"] - stats["time_verify_s"])
    timing = {"prefill_s": t_decode - t_start, "decode_s": t_start + elapsed - t_decode}
    timing.update(total_s=elapsed, tokens_per_s=n / elapsed if elapsed > 0 else 0.0)
    return GenerationResult(state.tokens, state.prompt, state.stopped, timing, stats)
