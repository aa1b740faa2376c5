"""Benchmark the naive autoregressive loop (`generate_ar`) on SmolLM2-135M, next to transformers.

Scope: the baseline every speculative speedup is divided by (docs/method.md §7), so it has to be
fast and fair. For each ``--dtype`` this script times greedy `generate_ar` on the embedded
SmolLM2-135M-Instruct GGUF (prefill included in the timed region, after a warm-up run) and, when
``transformers`` is importable, `LlamaForCausalLM.generate` (greedy, same weights, renamed from our
state dict), then prints tokens/s for both, their ratio, and whether the tokens agree.
``--random-weights`` times a random model of the SmolLM2 shape instead (no GGUF needed).
``--linear-forms`` first prints a micro-benchmark of the two matmul formulations that
`casspec_ref.base.kernels.exact_linear` chooses between, on the SmolLM2 shapes.

Run: ``OMP_NUM_THREADS=2 python benchmarks/bench_ar.py --max-new-tokens 128
--dtype float32,bfloat16``.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import time
import timeit
from typing import Any

import torch

from casspec_ref.base.random_weights import random_init_
from casspec_ref.config import smollm2_135m
from casspec_ref.generate import generate_ar
from casspec_ref.io.weights import to_hf_llama_state_dict
from casspec_ref.model import Transformer

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
PROMPT = "Explain in a few sentences why the sky is blue."


def build_hf(model: Transformer) -> Any:
    """transformers' LlamaForCausalLM with our weights (the rotate-half layout both share)."""
    import transformers

    c = model.config
    hf_config = transformers.LlamaConfig(
        vocab_size=c.vocab_size,
        hidden_size=c.d_model,
        intermediate_size=c.d_ff,
        num_hidden_layers=c.n_layers,
        num_attention_heads=c.n_heads,
        num_key_value_heads=c.n_kv_heads,
        max_position_embeddings=c.max_seq_len,
        rms_norm_eps=c.norm_eps,
        tie_word_embeddings=c.tie_embeddings,
        attention_bias=c.attention_bias,
        bos_token_id=c.bos_id,
        eos_token_id=list(c.eos_ids) or None,
    )
    hf_config.rope_parameters = {"rope_type": "default", "rope_theta": c.rope_theta}
    dtype = model.tok_emb.weight.dtype
    hf = transformers.LlamaForCausalLM(hf_config).to(dtype).eval()
    hf.load_state_dict(to_hf_llama_state_dict(model.state_dict()), strict=False)
    if c.tie_embeddings:
        hf.tie_weights()
    return hf


def time_ours(model: Transformer, prompt: list[int], n: int) -> tuple[list[int], float]:
    generate_ar(model, prompt, 8)  # warm-up
    result = generate_ar(model, prompt, n)
    return result.tokens, result.timing["tokens_per_s"]


def time_hf(hf: Any, prompt: list[int], n: int) -> tuple[list[int], float]:
    ids = torch.tensor([prompt])
    kwargs = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        hf.generate(ids, max_new_tokens=8, min_new_tokens=8, **kwargs)  # warm-up
        start = time.perf_counter()
        out = hf.generate(ids, max_new_tokens=n, min_new_tokens=n, **kwargs)
        elapsed = time.perf_counter() - start
    tokens = out[0, len(prompt) :].tolist()
    return tokens, len(tokens) / elapsed


def linear_forms(dtypes: list[torch.dtype]) -> None:
    """Time F.linear against (W @ x^T)^T (one row duplicated) on the SmolLM2 shapes."""
    shapes = [(576, 576), (192, 576), (1536, 576), (576, 1536), (49152, 576)]
    print("linear forms, microseconds per call: F.linear / (W @ x^T)^T")
    for dtype in dtypes:
        for out_f, in_f in shapes:
            w = torch.randn(out_f, in_f).to(dtype)
            cells = []
            for rows in (1, 2, 3, 4, 8):
                x = torch.randn(rows, in_f).to(dtype)
                x2 = x.expand(2, -1) if rows == 1 else x
                number = 10 if out_f > 10_000 else 100
                env = {"F": torch.nn.functional, "x": x, "x2": x2, "w": w}
                t_lin = min(timeit.repeat("F.linear(x, w)", globals=env, number=number, repeat=3))
                t_mm = min(timeit.repeat("(w @ x2.T).T", globals=env, number=number, repeat=3))
                t_lin, t_mm = t_lin / number, t_mm / number
                cells.append(f"T={rows}: {t_lin * 1e6:.0f}/{t_mm * 1e6:.0f}")
            print(f"  {str(dtype):15s} {in_f}->{out_f}: " + "  ".join(cells))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--dtype", default="float32,bfloat16", help="comma-separated dtypes")
    parser.add_argument("--random-weights", action="store_true", help="random SmolLM2-shaped model")
    parser.add_argument("--no-hf", action="store_true", help="skip the transformers comparison")
    parser.add_argument("--linear-forms", action="store_true", help="micro-benchmark the matmuls")
    parser.add_argument("--prompt", default=PROMPT)
    args = parser.parse_args(argv)
    names = [d.strip() for d in args.dtype.split(",") if d.strip()]
    bad = [d for d in names if d not in DTYPES]
    if bad or not names:
        parser.error(f"--dtype {args.dtype!r}: allowed are {', '.join(DTYPES)}")
    if args.max_new_tokens < 1:
        parser.error("--max-new-tokens must be >= 1")
    torch.manual_seed(0)
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
        f"{platform.processor() or platform.machine()}, max_new_tokens {args.max_new_tokens}"
    )
    if args.linear_forms:
        linear_forms([DTYPES[d] for d in names])

    if args.random_weights:
        base = random_init_(Transformer(smollm2_135m()), seed=0)
        prompt = list(range(100, 130))
    else:
        from casspec_ref.io.weights import load_model

        base, tokenizer = load_model()
        assert tokenizer is not None
        prompt = tokenizer.apply_chat_template([{"role": "user", "content": args.prompt}])
    with_hf = not args.no_hf and importlib.util.find_spec("transformers") is not None

    print(f"{'dtype':10s} {'ours tok/s':>11s} {'hf tok/s':>9s} {'ours/hf':>8s}  tokens agree")
    for name in names:
        model = base.to(DTYPES[name]) if name != "float32" else base
        ours, ours_tps = time_ours(model, prompt, args.max_new_tokens)
        if with_hf:
            hf = build_hf(model)
            theirs, hf_tps = time_hf(hf, prompt, args.max_new_tokens)
            same = next(
                (i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b), None
            )
            agree = "all" if same is None else f"first divergence at token {same}"
            print(f"{name:10s} {ours_tps:11.1f} {hf_tps:9.1f} {ours_tps / hf_tps:8.2f}  {agree}")
            del hf
        else:
            print(f"{name:10s} {ours_tps:11.1f} {'-':>9s} {'-':>8s}  -")
        if name != "float32":
            base = model.to(torch.float32)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
