"""One target forward on a CUDA GPU: is it the GPU's time, or the host's?

Scope: on a GPU a verify forward over T tokens should cost about one token's forward (the weights
are read once and the arithmetic is far from the GPU's limit), so self-drafts pay only if the
one-token forward itself is fast. A small model in eager PyTorch can instead be bound by the host:
every operator is a Python call and a kernel launch, whatever the GPU. This script measures, on
SmolLM2-135M (the embedded GGUF) in each dtype asked for:

- ``gpu``: median ms of ``model.forward`` over T new tokens after 256 cached, synchronized;
- ``issue``: median ms the host takes to *issue* the same forward (no synchronization before
  the clock stops; when it equals ``gpu``, the host is the bottleneck, not the GPU);
- ``kernels``: CUDA kernels launched per forward, and the GPU's busy time per forward
  (the sum of kernel times, from the profiler): the time a launch-free forward would take;
- ``syncs``: host-device synchronizations during 16 tokens of `generate_ar`, from
  ``torch.cuda.set_sync_debug_mode`` (one per token is the argmax the loop must read).

With ``--static W`` the model runs through the fixed-shape path (`casspec_ref.accel.static_forward`:
every forward at W rows over the whole static cache, captured as CUDA graphs and replayed), and
``--equality N`` also runs N bundled and N held-out questions (64 tokens, greedy) through the
naive loop and each method, checks every method's tokens equal to the naive loop's, and only
then reports tok/s per method.

Run: ``python benchmarks/cuda_forward.py [--dtypes bfloat16,float32] [--static 16]
[--equality 6] [--model PATH] [--json PATH]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import warnings

import torch

from casspec_ref.generate import generate_ar
from casspec_ref.kv_cache import KVCache
from casspec_ref.model import Transformer

SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
CONTEXT = 256


def forward_costs(model: Transformer, dtype: torch.dtype, repeats: int) -> dict[str, object]:
    """gpu/issue ms per T, kernels and GPU busy ms per one-token forward."""
    c, dev = model.config, torch.device("cuda")
    gen = torch.Generator().manual_seed(0)
    context = torch.randint(0, c.vocab_size, (1, CONTEXT), generator=gen).to(dev)
    cache = KVCache(c, CONTEXT + max(SIZES), dtype, dev)
    model(context, cache=cache, last_only=True)
    new = torch.randint(0, c.vocab_size, (1, max(SIZES)), generator=gen).to(dev)
    out: dict[str, object] = {"gpu_ms": {}, "issue_ms": {}}
    for t in SIZES:
        tokens = new[:, :t]
        for _ in range(3):  # warm-up
            model(tokens, cache=cache)
            cache.truncate(CONTEXT)
        gpu, issue = [], []
        for _ in range(repeats):
            torch.cuda.synchronize()
            start = time.perf_counter()
            model(tokens, cache=cache)
            issued = time.perf_counter()
            torch.cuda.synchronize()
            done = time.perf_counter()
            cache.truncate(CONTEXT)
            issue.append((issued - start) * 1e3)
            gpu.append((done - start) * 1e3)
        out["gpu_ms"][t] = round(statistics.median(gpu), 3)  # type: ignore[index]
        out["issue_ms"][t] = round(statistics.median(issue), 3)  # type: ignore[index]
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            model(new[:, :1], cache=cache)
            cache.truncate(CONTEXT)
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    out["kernels_per_forward"] = len(kernels) / 5
    out["gpu_busy_ms_per_forward"] = round(sum(e.device_time for e in kernels) / 5 / 1e3, 3)
    table = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15)
    out["top_ops"] = table
    return out


def count_syncs(model: Transformer, prompt: list[int], tokens: int) -> int:
    """Synchronizations the naive loop makes over ``tokens`` tokens (warnings from torch)."""
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            generate_ar(model, prompt, tokens)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    return sum("synchroniz" in str(w.message) for w in caught)


METHODS = ("pld", "chain", "vchc", "static-tree", "cas-spec")


def equality_then_speed(model: Transformer, tokenizer, n: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    """Every method's greedy tokens against the naive loop's on the first ``n`` bundled and
    held-out questions (64 tokens); tok/s per method only when all of its outputs are equal."""
    from casspec_ref.speculative import generate_speculative
    from casspec_ref.tools.bench import default_questions_path, load_questions

    out: dict[str, object] = {}
    for name in ("prompts", "prompts_heldout"):
        questions = load_questions(default_questions_path(name))[:n]
        prompts = [
            tokenizer.apply_chat_template([{"role": "user", "content": q.turns[0]}])
            for q in questions
        ]
        stop = tokenizer.stop_ids
        seconds: dict[str, float] = {}
        tokens: dict[str, int] = {}
        diverged: dict[str, int] = {}
        for prompt in prompts:
            torch.cuda.synchronize()
            start = time.perf_counter()
            want = generate_ar(model, prompt, 64, stop_ids=stop).tokens
            torch.cuda.synchronize()
            seconds["ar"] = seconds.get("ar", 0.0) + time.perf_counter() - start
            tokens["ar"] = tokens.get("ar", 0) + len(want)
            for method in METHODS:
                start = time.perf_counter()
                got = generate_speculative(model, prompt, 64, method=method, stop_ids=stop).tokens
                torch.cuda.synchronize()
                seconds[method] = seconds.get(method, 0.0) + time.perf_counter() - start
                tokens[method] = tokens.get(method, 0) + len(got)
                diverged[method] = diverged.get(method, 0) + (got != want)
        out[name] = {
            "diverged": diverged,
            "tok_s": {
                m: round(tokens[m] / seconds[m], 1)
                for m in seconds
                if m == "ar" or diverged[m] == 0
            },
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--json", default=None)
    parser.add_argument("--model", default=None, help="GGUF file (default: the embedded one)")
    parser.add_argument("--static", type=int, default=0, help="fixed width W (0 = eager)")
    parser.add_argument("--equality", type=int, default=0, help="questions per prompt set")
    args = parser.parse_args()
    from casspec_ref.io.weights import load_model

    record: dict[str, object] = {"device": torch.cuda.get_device_name(), "torch": torch.__version__}
    for name in args.dtypes.split(","):
        dtype = getattr(torch, name)
        model, tokenizer = load_model(args.model, dtype=dtype, device="cuda")
        assert tokenizer is not None
        if args.static:
            from casspec_ref.accel.static_forward import StaticModel

            model = StaticModel(model, args.static)
        chat = [{"role": "user", "content": "Why is the sky blue?"}]
        prompt = tokenizer.apply_chat_template(chat)
        with torch.inference_mode():
            costs = forward_costs(model, dtype, args.repeats)
            costs["syncs_per_16_tokens"] = count_syncs(model, prompt, 16)
            start = time.perf_counter()
            n = len(generate_ar(model, prompt, 64).tokens)
            costs["ar_tok_s"] = round(n / (time.perf_counter() - start), 1)
            if args.equality:
                costs["equality"] = equality_then_speed(model, tokenizer, args.equality)
            if args.static:
                costs["graphs"] = {
                    "captured": model.static.captured,
                    "fallbacks": model.static.fallbacks,
                }
        print(f"== {name}: {costs.pop('top_ops')}")
        print(json.dumps(costs, indent=1))
        record[name] = costs
        del model
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(record, f, indent=1)


if __name__ == "__main__":
    main()
