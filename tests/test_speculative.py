"""The speculative loop: greedy equality with generate_ar for every method, the KV-cache
invariant after every step, statistics, stop tokens, streaming and bad input."""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator

import pytest
import torch

from casspec_ref.base.random_weights import random_init_
from casspec_ref.baselines import ScheduleOptions
from casspec_ref.config import ModelConfig, smollm2_135m, tiny_gpt2, tiny_llama
from casspec_ref.dytc_config import DyTCConfig
from casspec_ref.dytc_refinements import RefinedDyTC
from casspec_ref.generate import generate_ar
from casspec_ref.io.presets import attach_preset_drafts, smollm2_cascade
from casspec_ref.kv_cache import KVCache
from casspec_ref.model import Transformer
from casspec_ref.plan import ExecutionPlan
from casspec_ref.speculative import METHODS, default_drafts, generate_speculative
from casspec_ref.step_stats import StepStats, StepTrace


class _TickingClock:
    """A deterministic clock advanced by the model's forwards (DyTC times its drafts with it)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class _CheapDraftModel(Transformer):
    """Forwards advance a fake clock, 1 + 0.05 T for the target and 0.1 T for a draft plan, so
    that DyTC's decisions do not depend on the load of the machine running the test."""

    clock: _TickingClock

    def forward(self, tokens, positions=None, cache=None, attn_mask=None, plan=None, **kw):  # type: ignore[no-untyped-def, override]
        width = tokens.shape[1]
        identity = plan is None or plan.is_identity
        self.clock.now += (1.0 + 0.05 * width) if identity else 0.1 * width
        return super().forward(tokens, positions, cache, attn_mask, plan, **kw)


def _model(family: str = "llama", seed: int = 0, damp: float = 0.1) -> _CheapDraftModel:
    """A tiny float64 model whose last block is damped, so that drafts skipping or exiting
    before it agree with the target often but not always (partial acceptance)."""
    make = tiny_llama if family == "llama" else tiny_gpt2
    model = _CheapDraftModel(make(vocab_size=32, max_seq_len=128))
    model.clock = _TickingClock()
    model = random_init_(model.to(torch.float64), seed=seed)
    last = model.config.n_layers - 1
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.startswith(f"layers.{last}.") and name.endswith(("o.weight", "down.weight")):
                param.mul_(damp)
            if name.startswith(f"layers.{last}.") and name.endswith(("proj.weight",)):
                param.mul_(damp)
    return model


def _drafts(model: Transformer) -> tuple[ExecutionPlan, ...]:
    n = model.config.n_layers
    return (
        ExecutionPlan(exit_after=n - 1, name="exit"),
        ExecutionPlan(skip_mlp=frozenset({n - 1}), name="skipmlp"),
    )


PROMPTS = ([3, 5, 7, 9, 3, 5, 7, 11], [1, 2, 3, 4, 5, 6], [30, 30, 4, 30, 30, 4, 30])


@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("method", METHODS)
def test_greedy_equals_ar_with_partial_acceptance(method: str, family: str) -> None:
    partial = 0
    drafted = 0
    for seed in range(2):
        model = _model(family, seed)
        for prompt in PROMPTS:
            want = generate_ar(model, prompt, 30).tokens
            lengths: list[tuple[int, int]] = []

            def trace(t: StepTrace, lengths: list[tuple[int, int]] = lengths) -> None:
                lengths.append((len(t.result.accepted), t.tree.max_depth))

            got = generate_speculative(
                model,
                prompt,
                30,
                method=method,
                drafts=_drafts(model),
                on_step=trace,
                clock=model.clock,
            )
            assert got.tokens == want, f"{method} diverged from generate_ar on {prompt}"
            partial += sum(1 for a, d in lengths if 0 < a < d)
            drafted += sum(1 for _, d in lengths if d > 0)
    if method != "ar":
        assert drafted > 0, f"{method} never drafted"
    if method not in ("ar", "swift-tree"):
        # Partial acceptance (some but not all of the deepest path) must have been exercised.
        assert partial > 0, f"{method}: no step with partial acceptance"


@pytest.mark.parametrize("method", ["pld", "chain", "vchc", "static-tree", "cas-spec"])
@pytest.mark.parametrize("temperature", [0.0, 0.9])
def test_cache_equals_fresh_prefill_after_every_step(method: str, temperature: float) -> None:
    model = _model("llama", 3)
    checked = []

    def check(trace: StepTrace) -> None:
        cache = trace.cache
        assert cache.length == len(trace.prefix)
        fresh = KVCache(model.config, cache.max_len, torch.float64)
        with torch.no_grad():
            model.forward(torch.tensor([trace.prefix]), None, cache=fresh)
        n = cache.length
        torch.testing.assert_close(cache.k[..., :n, :], fresh.k[..., :n, :], rtol=0, atol=1e-12)
        torch.testing.assert_close(cache.v[..., :n, :], fresh.v[..., :n, :], rtol=0, atol=1e-12)
        checked.append(len(trace.result.accepted))

    generate_speculative(
        model,
        PROMPTS[0],
        24,
        method=method,
        temperature=temperature,
        seed=1,
        drafts=_drafts(model),
        on_step=check,
    )
    assert checked and max(checked) >= 1, "the invariant must be checked after accepting drafts"


def test_stats_are_consistent() -> None:
    model = _model()
    result = generate_speculative(model, PROMPTS[0], 30, method="cas-spec", drafts=_drafts(model))
    stats = result.stats
    n = len(result.tokens)
    assert stats["steps"] == len(stats["accepted_lengths"])
    assert stats["target_forwards"] == stats["steps"] + 1  # the prefill forward
    # Every committed token is a drafted token accepted or one next/bonus token per forward.
    assert n == sum(stats["accepted_lengths"]) + stats["target_forwards"]
    assert math.isclose(stats["mat"], n / stats["target_forwards"])
    assert sum(stats["accepted"].values()) == sum(stats["accepted_lengths"])
    for name, count in stats["accepted"].items():
        assert count <= stats["proposed"][name]
    for key in ("time_draft_s", "time_verify_s", "time_other_s"):
        assert stats[key] >= 0.0
    ar = generate_speculative(model, PROMPTS[0], 30, method="ar")
    assert ar.stats["mat"] == 1.0


def test_timing_splits_the_prompt_from_the_decoding() -> None:
    """`timing` has generate_ar's keys; prefill and decoding add up to the total. A clock that
    moves one unit a read shows which part each read falls in: one token is the prefill's alone
    (its decoding is the clock's last read), thirty tokens' decoding holds every step."""
    model = _model()
    keys = set(generate_ar(model, PROMPTS[0], 3).timing)
    for n in (1, 30):
        result = generate_speculative(
            model,
            PROMPTS[0],
            n,
            method="cas-spec",
            drafts=_drafts(model),
            clock=itertools.count().__next__,
        )
        timing = result.timing
        assert set(timing) == keys
        assert timing["prefill_s"] + timing["decode_s"] == timing["total_s"]
        assert timing["prefill_s"] > 0
        if n == 1:
            assert timing["decode_s"] == 1.0
        else:
            assert timing["decode_s"] > 10 * timing["prefill_s"]


@pytest.mark.parametrize("method", ["pld", "chain", "cas-spec"])
def test_stop_ids_and_streaming(method: str) -> None:
    model = _model()
    reference = generate_ar(model, PROMPTS[1], 30).tokens
    stop = reference[7]
    want = generate_ar(model, PROMPTS[1], 30, stop_ids=[stop])
    streamed: list[int] = []
    got = generate_speculative(
        model,
        PROMPTS[1],
        30,
        method=method,
        stop_ids=[stop],
        on_token=streamed.append,
        drafts=_drafts(model),
    )
    assert got.tokens == want.tokens and got.stopped == want.stopped is True
    assert streamed == got.tokens


@pytest.mark.parametrize("n", [0, 1, 2, 5])
def test_short_generations(n: int) -> None:
    model = _model()
    want = generate_ar(model, PROMPTS[0], n).tokens
    for method in ("static-tree", "cas-spec"):
        got = generate_speculative(model, PROMPTS[0], n, method=method, drafts=_drafts(model))
        assert got.tokens == want


def test_fills_the_context_exactly() -> None:
    model = _model()
    prompt = PROMPTS[0]
    n = model.config.max_seq_len - len(prompt)
    got = generate_speculative(model, prompt, n, method="static-tree", drafts=_drafts(model))
    assert got.tokens == generate_ar(model, prompt, n).tokens


class _Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


class _CostlyDraftModel(Transformer):
    """Forwards advance a fake clock: every draft forward costs as much as a target forward."""

    clock: _Clock

    def forward(self, tokens, positions=None, cache=None, attn_mask=None, plan=None, **kw):  # type: ignore[no-untyped-def, override]
        self.clock.now += 1.0 + 0.05 * tokens.shape[1]
        return super().forward(tokens, positions, cache, attn_mask, plan, **kw)


def test_dytc_falls_back_to_plain_steps_when_drafts_do_not_pay() -> None:
    """Drafts as expensive as the target and a lookup that is never accepted: after probing each
    level, DyTC's trees are the root alone, i.e. plain decoding steps."""
    model = _CostlyDraftModel(tiny_llama(vocab_size=32, max_seq_len=128))
    random_init_(model, seed=0)
    model = model.to(torch.float64)
    model.clock = _Clock()
    sizes: list[int] = []
    got = generate_speculative(
        model,
        [1, 2, 3, 4, 5, 6],
        40,
        method="cas-spec",
        drafts=_drafts(model),
        dytc=DyTCConfig(prior_pld_alpha=0.0, prior_recycle_alpha=0.0, warmup=0),
        clock=model.clock,
        on_step=lambda t: sizes.append(len(t.tree)),
    )
    assert got.tokens == generate_ar(model, [1, 2, 3, 4, 5, 6], 40).tokens
    assert sizes[0] == 1  # the first step times the target
    assert sizes[1:5] == [2, 2, 2, 2]  # two probes per level (the first timing is discarded)
    assert set(sizes[5:]) == {1}, sizes


def test_bad_input() -> None:
    model = _model()
    with pytest.raises(ValueError, match="unknown method"):
        generate_speculative(model, [1], 4, method="eagle")
    with pytest.raises(ValueError, match="temperature"):
        generate_speculative(model, [1], 4, temperature=-1.0)
    with pytest.raises(ValueError, match="top_p"):
        generate_speculative(model, [1], 4, top_p=0.0)
    with pytest.raises(ValueError, match="prompt_ids is empty"):
        generate_speculative(model, [], 4)
    with pytest.raises(ValueError, match="prompt_ids"):
        generate_speculative(model, [999], 4)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate_speculative(model, [1], -1)
    with pytest.raises(ValueError, match="max_seq_len"):
        generate_speculative(model, [1], 500)
    with pytest.raises(ValueError, match="either seed or rng"):
        from casspec_ref.sampling import TorchRandomSource

        generate_speculative(model, [1], 4, seed=1, rng=TorchRandomSource(1))
    with pytest.raises(ValueError, match="unknown options"):
        generate_speculative(model, [1], 4, beam=3)
    dup = (ExecutionPlan(exit_after=1, name="a"), ExecutionPlan(exit_after=2, name="a"))
    with pytest.raises(ValueError, match="unique names"):
        generate_speculative(model, [1], 4, method="chain", drafts=dup)
    with pytest.raises(ValueError, match="exit_after"):
        generate_speculative(
            model, [1], 4, method="chain", drafts=(ExecutionPlan(exit_after=9, name="x"),)
        )
    with pytest.raises(ValueError, match="needs at least one model draft"):
        generate_speculative(model, [1], 4, method="chain", drafts=())
    with pytest.raises(ValueError, match="Hierarchy or a sequence of ExecutionPlan"):
        generate_speculative(model, [1], 4, method="chain", drafts=("skip",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="static_branching"):
        ScheduleOptions(static_branching=())
    stranger = RefinedDyTC(["other"])
    with pytest.raises(ValueError, match="does not know"):
        generate_speculative(model, [1], 4, drafts=_drafts(model), policy=stranger)


@pytest.mark.real_model
@pytest.mark.slow
def test_real_model_greedy_equals_ar() -> None:
    """SmolLM2-135M, float32, 32 tokens: each speculative method on a prompt of its own, with the
    real model's DSIA drafts (tests/test_shape_invariance.py runs prompt lookup, chain and
    CAS-Spec on a held-out question in both dtypes). A divergence reports its position and the
    target's logit gap instead of hiding it."""
    from casspec_ref.io.weights import load_model

    if os.environ.get("CASSPEC_SKIP_REAL") == "1":
        pytest.skip("CASSPEC_SKIP_REAL=1")
    model, tokenizer = load_model()
    questions = [
        "What is the capital of France?",
        "Translate 'good morning' into Spanish.",
        "What is 17 times 23?",
        "Summarize: The cat sat on the mat. The cat was happy. The mat was red.",
        "Explain what a CPU does in one sentence.",
        "Repeat after me: one two three four five.",
        "Write a Python function that adds two numbers.",
        "What color is the sky on a clear day?",
        "Count from 1 to 10.",
        "Spell the word 'banana' letter by letter.",
        "What is 2 + 2?",
    ]
    speculative = [m for m in METHODS if m != "ar"]
    assert len(questions) == len(speculative)  # each method once
    failures = []
    for i, question in enumerate(questions):
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}])
        want = generate_ar(model, prompt, 32).tokens
        method = speculative[i]
        got = generate_speculative(model, prompt, 32, method=method).tokens
        if got != want:
            pos = next(
                (j for j, (a, b) in enumerate(zip(got, want, strict=False)) if a != b),
                min(len(got), len(want)),
            )
            with torch.no_grad():
                ctx = torch.tensor([prompt + want[:pos]])
                logits = model.forward(ctx, None)[0, -1]
            gap = (
                float(logits[want[pos]] - logits[got[pos]])
                if pos < min(len(got), len(want))
                else float("nan")
            )
            failures.append(
                f"prompt {i} ({method}): first divergence at {pos}, logit gap {gap:.3g}"
            )
    assert not failures, "; ".join(failures)


def test_prefill_and_one_step_can_be_called_alone() -> None:
    """`generate_speculative` is `prefill` plus `speculative_step` in a loop: the two calls,
    made by hand, give the naive loop's tokens and a cache holding exactly the verified prefix."""
    from casspec_ref.draft import DraftSampling
    from casspec_ref.sampling import TorchRandomSource
    from casspec_ref.speculative import prefill, speculative_step, start_decoding

    model = _model()
    prompt = [1, 2, 3, 4, 1, 2, 3, 4, 1, 2]
    state = start_decoding(
        model,
        prompt,
        12,
        "pld",
        DraftSampling(),
        TorchRandomSource(0),
        drafts=_drafts(model),
        options={"clock": model.clock},
    )
    prefill(state)
    assert len(state.tokens) == 1 and state.cache.length == len(prompt)
    while not state.done:
        result = speculative_step(state)
        assert result.emitted and state.cache.length == len(prompt) + len(state.tokens) - 1
    assert state.tokens == generate_ar(model, prompt, 12).tokens
    assert state.stats.steps < 11  # prompt lookup drafted and some drafts were accepted


class _Checkpoint:
    """What `attach_preset_drafts` reads of a loaded model: its config and its dtype."""

    def __init__(self, config: ModelConfig, dtype: torch.dtype) -> None:
        self.config = config
        self.weight = torch.zeros(1, dtype=dtype)
        self.preset_drafts = None

    def parameters(self) -> Iterator[torch.Tensor]:
        return iter([self.weight])


def _loaded(config: ModelConfig, dtype: torch.dtype, name: str) -> list[ExecutionPlan]:
    model = _Checkpoint(config, dtype)
    attach_preset_drafts(model, name)  # type: ignore[arg-type]
    return list(default_drafts(model))


def test_default_drafts_are_the_loaders_preset_else_generic() -> None:
    """SmolLM2-135M in float32 gets its int8 cascade, in another dtype its layer-skip draft;
    any other checkpoint, however deep, gets the core's generic pair."""
    config = smollm2_135m()
    cascade = _loaded(config, torch.float32, "SmolLM2-135M-Instruct")
    assert cascade == list(smollm2_cascade(config).levels)
    (skip,) = _loaded(config, torch.bfloat16, "smollm2-135m-instruct.gguf")
    assert skip.name == "skip7"
    assert skip.skip_attention == skip.skip_mlp == frozenset({3, 4, 5, 6, 7, 10, 14})
    generic = _loaded(config, torch.float32, "another-llama")
    assert [(p.exit_after, p.skip_mlp) for p in generic] == [
        (29, frozenset()),
        (None, frozenset({15})),
    ]
    tiny = _loaded(tiny_llama(), torch.float64, "SmolLM2-135M")
    assert [p.name for p in tiny] == ["exit2", "skipmlp1"]


def test_the_statistics_are_what_an_observer_of_the_steps_sees() -> None:
    """`stats` is what `StepStats` gathers from the prefill and every `StepTrace`: an observer
    given the same traces through ``on_step`` counts the same, field for field."""
    model = _model()
    traces: list[StepTrace] = []
    result = generate_speculative(
        model, PROMPTS[0], 30, drafts=_drafts(model), on_step=traces.append, clock=model.clock
    )
    seen = StepStats("cas-spec", [plan.name for plan in _drafts(model)])
    # The clock moves in forwards only, so the prefill's seconds are its forward's.
    seen.observe_prefill(result.timing["prefill_s"])
    for trace in traces:
        seen.observe(trace)
    assert seen.steps == len(traces) > 1 and seen.time_verify_s > 0 and seen.time_draft_s > 0
    assert seen.summary(len(result.tokens), result.timing["total_s"]) == result.stats
