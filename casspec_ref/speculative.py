"""The speculative decoding loop, top to bottom: `generate_speculative` prefills, then repeats
`speculative_step` until the answer is done. One step (docs/method.md §4-§5):

1. `draft_tree`: the method's schedule (`casspec_ref.schedules`; CAS-Spec's asks DyTC) grows a
   `DraftTree` whose root is the last committed token;
2. `verify`: ONE target forward over [root + every node], with the tree's mask and positions,
   gives the processed law p of every node; `verify.verify_tree` accepts a path and draws the
   next token;
3. `commit`: the cache keeps the root and the accepted path, so it equals a fresh prefill of the
   accepted prefix;
4. `observe`: the schedule learns from the step, and the step's observers see it as a
   `StepTrace` (`casspec_ref.step_stats`, which also gathers the run's statistics).

What a generation carries from step to step (`Decoding`) and how it starts (`start_decoding`)
come last. Choices: docs/design.md ("The loop, the baselines and the bench").
"""

from __future__ import annotations

import time
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
from casspec_ref.dytc_config import FREE_DRAFTS, DyTCConfig
from casspec_ref.generate import GenerationResult, generate_ar, run_prompt
from casspec_ref.kv_cache import KVCache
from casspec_ref.plan import ExecutionPlan
from casspec_ref.sampling import RandomSource, TorchRandomSource, target_law
from casspec_ref.schedules import SCHEDULES, Schedule, ScheduleSpec
from casspec_ref.step_stats import StepStats, StepTrace
from casspec_ref.tree import DraftTree
from casspec_ref.verify import VerifyResult, verify_tree

#: Every method the loop (and the CLI's --method) knows: plain AR, the registered baselines,
#: and CAS-Spec last (the order of the bench's tables).
METHODS = ("ar", *[name for name in SCHEDULES if name != "cas-spec"], "cas-spec")


def generate_speculative(
    model: Any,
    prompt_ids: Sequence[int] | torch.Tensor,
    max_new_tokens: int,
    *,
    method: str = "cas-spec",
    temperature: float = 0.0,
    top_k: int = 0,
    top_p: float = 1.0,
    seed: int | None = None,
    rng: RandomSource | None = None,
    stop_ids: Iterable[int] = (),
    on_token: Callable[[int], None] | None = None,
    drafts: Hierarchy | Sequence[ExecutionPlan] | None = None,
    on_step: Callable[[StepTrace], None] | None = None,
    **options: Any,
) -> GenerationResult:
    """Generate with speculative decoding; the output law equals `generate_ar`'s.

    Args (those `generate_ar` also takes mean the same there):
        method: one of `METHODS`.
        drafts: the DSIA hierarchy, cheapest level first (default: `default_drafts(model)`).
        on_step: called with a `StepTrace` after every step.
        options: `dytc=DyTCConfig(...)`, `schedule=ScheduleOptions(...)` (the baselines'),
            `pld=PromptLookupConfig(...)`, `clock=` a seconds counter (tests inject a
            deterministic one), `policy=` a `RefinedDyTC` carried across calls (updated in place).
    Returns:
        A `GenerationResult`; its ``stats`` are `StepStats.summary`'s: every `StepStats` field,
        plus ``mat`` and ``time_other_s``.
    """
    checks.check_choice("method", method, METHODS)
    checks.check_options(options, {"dytc", "schedule", "pld", "clock", "policy"})
    prompt, stops = checks.check_generation_args(
        model.config, prompt_ids, max_new_tokens, temperature, top_k, top_p, stop_ids, seed, rng
    )
    rng = rng if rng is not None else TorchRandomSource(seed=seed)
    if method == "ar":  # the naive loop itself, with the step statistics of a speculative run
        ar = generate_ar(
            model,
            prompt,
            max_new_tokens,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            rng=rng,
            stop_ids=stops,
            on_token=on_token,
        )
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
    elapsed, n = state.clock() - t_start, len(state.tokens)
    timing = {"prefill_s": t_decode - t_start, "decode_s": t_start + elapsed - t_decode}
    timing.update(total_s=elapsed, tokens_per_s=n / elapsed if elapsed > 0 else 0.0)
    return GenerationResult(
        state.tokens, state.prompt, state.stopped, timing, state.stats.summary(n, elapsed)
    )


def prefill(state: Decoding) -> None:
    """Run the whole prompt through the target and draw the first token, as `generate_ar` does."""
    start = state.clock()
    prompt_t = torch.tensor([state.prompt], dtype=torch.long, device=state.cache.k.device)  # (1,P)
    logits = run_prompt(state.model, prompt_t, state.cache)  # (1, 1, V)
    s = state.sampling
    law = target_law(logits[0, -1], s.temperature, s.top_k, s.top_p).cpu().numpy()  # (V,)
    state.stats.observe_prefill(state.clock() - start)
    state.emit(int(state.rng.categorical(law)))


def speculative_step(state: Decoding) -> VerifyResult:
    """One step: draft a tree, verify it in one target forward, commit the accepted path, let
    the observers see the step; then emit its tokens."""
    start = state.clock()
    drafter = draft_tree(state)
    drafted = state.clock()
    result, logits = verify(state, drafter.tree)
    commit(state, drafter.tree, result, logits)
    observe(state, drafter, result, drafted - start, state.clock() - drafted)
    for token in result.emitted:  # a stop token the verifier accepted is emitted last
        state.emit(token)
        if state.done:
            break
    return result


def draft_tree(state: Decoding) -> StepDrafter:
    """Draft: the schedule grows a tree whose root is the last committed token."""
    room = state.cache.max_len - state.cache.length
    remaining = state.max_new_tokens - len(state.tokens)
    runner = DraftRunner(state.model, state.cache)
    drafter = StepDrafter(
        state.tokens[-1],
        state.pld.tokens,
        runner,
        state.pld,
        state.levels,
        state.sampling,
        state.rng,
        max_nodes=min(state.schedule.max_nodes, room),
        max_depth=max(0, min(remaining - 1, room - 1)),
        clock=state.clock,
        recycler=state.recycler,
    )
    if drafter.max_depth > 0:
        state.schedule.build(drafter)
    runner.release()  # scratch rows go; the cache holds the verified prefix again
    return drafter


def verify(state: Decoding, tree: DraftTree) -> tuple[VerifyResult, torch.Tensor]:
    """Verify: ONE target forward over [root + every node] gives each node's processed law p;
    the verifier accepts a path and draws the next token. Returns it and the logits (N, V)."""
    cache, base = state.cache, state.cache.length
    device = cache.k.device
    node_tokens = torch.tensor([tree.tokens], dtype=torch.long, device=device)  # (1, N)
    positions = tree.positions(base)[None].to(device)  # (1, N)
    # A chain (the root alone included) is causal: no mask takes the naive loop's path.
    is_chain = all(tree.parent(i) == i - 1 for i in range(1, len(tree)))
    mask = None if is_chain else tree.attention_mask(base).to(device)  # (N, base + N)
    logits = state.model(node_tokens, positions, cache=cache, attn_mask=mask)  # (1,N,V)
    s = state.sampling
    target_probs = target_law(logits[0], s.temperature, s.top_k, s.top_p).cpu().numpy()  # (N, V)
    remaining = state.max_new_tokens - len(state.tokens)
    result = verify_tree(
        tree, target_probs, state.rng, stop_ids=state.stops, max_accept=remaining - 1
    )
    return result, logits[0]


def commit(state: Decoding, tree: DraftTree, result: VerifyResult, logits: torch.Tensor) -> None:
    """Commit: of the rows the verify forward appended, the cache keeps the root's and the
    accepted path's, so it equals a fresh prefill of the accepted prefix; the token recycler
    keeps what the target predicted after every node (`logits` (N, V)), for later steps."""
    base = state.cache.length - len(tree)  # the verify forward appended one row per node
    state.cache.commit(base, [0, *result.accepted])
    if state.recycler is not None:
        state.recycler.update(tree.tokens, logits)


def observe(
    state: Decoding, drafter: StepDrafter, result: VerifyResult, draft_s: float, verify_s: float
) -> None:
    """Observe: the schedule learns from the step; the statistics, then ``on_step``, see its
    `StepTrace`."""
    state.schedule.observe(drafter, result.accepted, verify_s)
    trace = StepTrace(
        step=state.stats.steps + 1,
        tree=drafter.tree,
        sources=[info.source for info in drafter.info],
        result=result,
        prefix=state.prompt + state.tokens + result.accepted_tokens,
        cache=state.cache,
        draft_forwards=drafter.runner.forwards if drafter.runner is not None else 0,
        draft_s=draft_s,
        plan_s=max(0.0, draft_s - drafter.seconds()),
        verify_s=verify_s,
    )
    state.stats.observe(trace)
    if state.on_step is not None:
        state.on_step(trace)


# ------------------------------------------------------------------ what a generation carries
@dataclass
class Decoding:
    """What one speculative generation carries from step to step: `prefill` starts it, each
    `speculative_step` advances it by one draft-verify-commit-observe step."""

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
    stats: StepStats = field(default_factory=StepStats)

    def emit(self, token: int) -> None:
        """Append one generated token; mark the generation done on a stop token or the limit."""
        self.tokens.append(token)
        self.pld.append(token)
        if self.on_token is not None:
            self.on_token(token)
        self.stopped = token in self.stops
        self.done = self.stopped or len(self.tokens) >= self.max_new_tokens


def start_decoding(
    model: Any,
    prompt: list[int],
    max_new_tokens: int,
    method: str,
    sampling: DraftSampling,
    rng: RandomSource,
    stops: frozenset[int] = frozenset(),
    drafts: Hierarchy | Sequence[ExecutionPlan] | None = None,
    options: dict[str, Any] | None = None,
) -> Decoding:
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
    return Decoding(
        model=model,
        prompt=prompt,
        max_new_tokens=max_new_tokens,
        schedule=schedule,
        levels={p.name: p for p in levels},
        sampling=sampling,
        rng=rng,
        stops=stops,
        cache=cache,
        pld=PromptLookup(prompt, options.get("pld", PromptLookupConfig())),
        recycler=TokenRecycler() if schedule.uses_recycler else None,
        clock=options.get("clock", time.perf_counter),
        stats=StepStats(method, names),
    )


def default_drafts(model: Any) -> tuple[ExecutionPlan, ...]:
    """The DSIA hierarchy used when `drafts` is None, cheapest level first: the preset a loader
    attached for a known checkpoint (``model.preset_drafts``, `casspec_ref.io.presets`); else a
    generic pair that fits any model: an exit before the last block and a skipped middle MLP."""
    if preset := getattr(model, "preset_drafts", None):
        return tuple(preset)
    n = model.config.n_layers
    early = ExecutionPlan(exit_after=max(1, n - 1), name=f"exit{max(1, n - 1)}")
    skip = ExecutionPlan(skip_mlp=frozenset({n // 2}), name=f"skipmlp{n // 2}")
    return (early, skip)
