"""``make demo``: plain decoding and CAS-Spec side by side, on a prompt where the cascade pays.

The prompt asks SmolLM2 to rework a passage it is given (a summary that reuses its phrases), the
kind of request where prompt lookup and recycled tokens find long accepted runs. Both loops are
warmed up first on another request (kernels, the int8 weight copy, DyTC's first cost
measurements), then timed on this prompt. The naive loop runs in both forms
(`casspec_ref.tools.naive`): exact, whose tokens CAS-Spec must equal, and plain, the fastest
kernels. The demo prints whether the answers are identical, tokens per second side by side, the
speedup over the faster naive loop that gives the same tokens (and which one that is), the mean
accepted tokens per target forward, what verifying a few tokens costs on this machine against one
(DyTC's own timings: what bounds the speedup here), and one step's tree.
"""

from __future__ import annotations

import time

PASSAGE = (
    "The Great Barrier Reef is the world's largest coral reef system. It is composed of over "
    "2,900 individual reefs and 900 islands stretching for over 2,300 kilometres over an area "
    "of approximately 344,400 square kilometres. The reef is located in the Coral Sea, off the "
    "coast of Queensland, Australia. The Great Barrier Reef can be seen from outer space and is "
    "the world's biggest single structure made by living organisms. This reef structure is "
    "composed of and built by billions of tiny organisms, known as coral polyps. It supports a "
    "wide diversity of life and was selected as a World Heritage Site in 1981."
)
PROMPT = (
    f"Here is a passage:\n\n{PASSAGE}\n\nRewrite the passage as a bulleted list of its facts, "
    "keeping the original wording."
)


def run_demo(max_new_tokens: int = 160) -> int:
    """Print the side-by-side comparison; returns the exit status."""
    from casspec_ref.io.weights import load_model
    from casspec_ref.speculative import generate_speculative
    from casspec_ref.step_stats import StepTrace
    from casspec_ref.tools.naive import (
        WARM_UP_REQUEST,
        describe,
        fastest_equal,
        time_naive_loops,
        verify_costs,
        warm_up,
    )
    from casspec_ref.tools.trace import TreePrinter

    if max_new_tokens < 1:
        print(f"error: --max-new-tokens={max_new_tokens} must be >= 1")
        return 2
    start = time.perf_counter()
    model, tokenizer = load_model()
    assert tokenizer is not None
    print(f"SmolLM2-135M-Instruct loaded in {time.perf_counter() - start:.1f} s")
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}])
    stops = tokenizer.stop_ids
    # Warm-up, untimed: every loop once on a short answer to another request (the policy keeps
    # what it measured).
    other = tokenizer.apply_chat_template([{"role": "user", "content": WARM_UP_REQUEST}])
    carried = warm_up(model, other, "cas-spec", stop_ids=stops)

    naive = time_naive_loops(model, prompt, max_new_tokens, stop_ids=stops)
    steps: list[StepTrace] = []
    start = time.perf_counter()
    fast = generate_speculative(
        model,
        prompt,
        max_new_tokens,
        method="cas-spec",
        stop_ids=stops,
        on_step=steps.append,
        **carried,
    )
    fast_s = time.perf_counter() - start

    print(f"\nPrompt: {PROMPT[:70]}...\n")
    print(tokenizer.decode([t for t in fast.tokens if t not in stops]))
    exact = next(r for r in naive if r.form == "exact")
    base = fastest_equal(naive, fast.tokens)
    same = "IDENTICAL" if fast.tokens == exact.tokens else "DIFFERENT (a bug: please report it)"
    print(f"\nanswers: {same} to the exact naive loop's ({len(fast.tokens)} tokens, greedy)")
    print("\n".join(describe(naive, base, fast.tokens)))
    fast_rate = len(fast.tokens) / fast_s
    speedup = fast_rate / base.tokens_per_s
    print(
        f"CAS-Spec          : {fast_rate:6.1f} tok/s   speedup {speedup:.2f}x over the "
        f"{base.form} naive loop (the faster one with the same tokens)"
    )
    stats = fast.stats
    print(
        f"mean accepted tokens per target forward (MAT): {stats['mat']:.2f}; trees branched in "
        f"{stats['branching_steps']} of {stats['steps']} steps"
    )
    if "policy" in carried:
        print(verify_costs(carried["policy"]))
    if steps:
        # A compact step: many accepted tokens for a small tree.
        best = max(steps, key=lambda t: len(t.result.accepted) - 0.3 * len(t.tree))
        print(f"\none step of CAS-Spec (step {best.step}: {len(best.tree) - 1} drafted nodes):")
        print(TreePrinter(tokenizer.decode, color=False).format(best))
    return 0 if fast.tokens == exact.tokens else 1
