"""The verify-cost curve: one target forward over T new tokens after 256 cached, before and after
the per-machine kernel table, next to the weight-reading floor.

Scope: speculative decoding pays only if a forward over the T tokens of a draft tree costs little
more than a forward over one token (docs/method.md §7). On a memory-bound CPU every forward reads
all the weights once, so the floor for any T is (fp32 weight bytes) / (memory bandwidth). This
script measures, on SmolLM2-135M (the embedded GGUF, or ``--random-weights``):

- the cost of ``model.forward`` over T = 1, 2, 3, 4, 6, 8, 12, 16, 24, 32 new tokens after 256
  cached tokens (causal), and of the 256-token prefill itself, median of ``--repeats`` (7), with
  every linear in plain ``F.linear`` ("before") and with the table calibrated by
  `casspec_ref.accel.kernel_table` ("after"; above 16 rows, its row classes), the two
  interleaved in every repeat so that a change in the machine's speed hits both alike;
- the read bandwidth (median of 7 sums over a 512 MiB buffer) and the floor it implies;
- with ``--ar N``: greedy `generate_ar` of N tokens on one prompt, before and after (fp32).

It prints the table chosen on this machine and a JSON record (``--json PATH`` to keep it; its
``environment`` names the command, machine and commit). docs/results.md shows the record
docs/bench/cpu_verify_curve.json, written (with ``OMP_NUM_THREADS=2``) by
``python benchmarks/verify_curve.py --ar 128 --json docs/bench/cpu_verify_curve.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import torch

from casspec_ref.accel import kernel_table
from casspec_ref.base import kernels
from casspec_ref.base.random_weights import random_init_
from casspec_ref.config import smollm2_135m
from casspec_ref.generate import generate_ar
from casspec_ref.kv_cache import KVCache
from casspec_ref.model import Transformer
from casspec_ref.tools.bench import command_line, environment

SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32)
CONTEXT = 256
PROMPT = "Explain in a few sentences why the sky is blue."


def load(random_weights: bool) -> tuple[Transformer, list[int]]:
    """The model and a prompt for ``--ar`` (token ids)."""
    if random_weights:
        model = random_init_(Transformer(smollm2_135m()), seed=0).eval()
        return model, list(range(100, 120))
    from casspec_ref.io.weights import load_model

    model, tokenizer = load_model()
    assert tokenizer is not None
    return model, tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}])


def read_bandwidth(repeats: int = 7, mib: int = 512) -> float:
    """Bytes per second of a sum over a buffer far larger than any cache (median)."""
    buf = torch.ones(mib << 18)  # float32: mib MiB
    buf.sum()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        buf.sum()
        times.append(time.perf_counter() - start)
    return buf.numel() * buf.element_size() / statistics.median(times)


def forward_curve(
    model: Transformer, tables: dict[str, kernels.KernelTable], repeats: int
) -> dict[str, dict[int, float]]:
    """Median ms of one forward over T new tokens after `CONTEXT` cached, per table; key
    ``-CONTEXT``: the prefill of those `CONTEXT` tokens (an empty cache, last logits only)."""
    c = model.config
    gen = torch.Generator().manual_seed(0)
    context = torch.randint(0, c.vocab_size, (1, CONTEXT), generator=gen)
    cache = KVCache(c, CONTEXT + max(SIZES), model.tok_emb.weight.dtype)
    model(context, cache=cache, last_only=True)
    new = torch.randint(0, c.vocab_size, (1, max(SIZES)), generator=gen)
    sizes = (*SIZES, -CONTEXT)
    samples: dict[str, dict[int, list[float]]] = {n: {t: [] for t in sizes} for n in tables}
    for table in tables.values():  # warm-up: one forward per size and table
        kernels.use_table(table)
        for t in SIZES:
            model(new[:, :t], cache=cache)
            cache.truncate(CONTEXT)
    for rep in range(repeats):
        for name in list(tables)[rep % 2 :] + list(tables)[: rep % 2]:
            kernels.use_table(tables[name])
            for t in SIZES:
                start = time.perf_counter()
                model(new[:, :t], cache=cache)
                samples[name][t].append((time.perf_counter() - start) * 1e3)
                cache.truncate(CONTEXT)
            cache.truncate(0)
            start = time.perf_counter()
            model(context, cache=cache, last_only=True)
            samples[name][-CONTEXT].append((time.perf_counter() - start) * 1e3)
    return {n: {t: statistics.median(s) for t, s in per.items()} for n, per in samples.items()}


def time_ar(
    model: Transformer, prompt: list[int], n: int, tables: dict[str, kernels.KernelTable]
) -> dict[str, dict[str, float]]:
    """Greedy `generate_ar` of ``n`` tokens per table (after a short warm-up), tokens/s."""
    out: dict[str, dict[str, float]] = {}
    tokens: dict[str, list[int]] = {}
    for name, table in tables.items():
        kernels.use_table(table)
        generate_ar(model, prompt, 8)
        start = time.perf_counter()
        result = generate_ar(model, prompt, n)
        seconds = time.perf_counter() - start
        tokens[name] = list(result.tokens)
        out[name] = {"seconds": seconds, "tokens_per_s": len(result.tokens) / seconds}
    first = next(iter(tokens.values()))
    for name in out:
        out[name]["same_tokens_as_first"] = float(tokens[name] == first)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--ar", type=int, default=0, help="also time generate_ar of N tokens")
    parser.add_argument("--random-weights", action="store_true")
    parser.add_argument("--json", default=None, help="write the record to this path")
    args = parser.parse_args()

    os.environ.setdefault(kernel_table.ENV_VAR, "auto")
    model, prompt = load(args.random_weights)
    after = kernel_table.prepare(kernel_table.model_shapes(model), torch.float32)
    tables = {"before": kernels.KernelTable(), "after": after}
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor()}")
    print(f"load average at start: {os.getloadavg()}")
    print("kernel table (· = F.linear):")
    print(kernel_table.format_table(after))

    weight_bytes = sum(
        p.numel() * p.element_size() for n, p in model.named_parameters() if p.dim() == 2
    )
    bandwidth = read_bandwidth()
    floor_ms = weight_bytes / bandwidth * 1e3
    curve = forward_curve(model, tables, args.repeats)
    print(f"\nforward over T new tokens after {CONTEXT} cached, median of {args.repeats} (ms)")
    print(f"{'T':>8} " + " ".join(f"{t:>7}" for t in SIZES))
    for name, row in curve.items():
        print(f"{name:>8} " + " ".join(f"{row[t]:7.1f}" for t in SIZES))
        print(f"{'x T=1':>8} " + " ".join(f"{row[t] / row[1]:7.2f}" for t in SIZES))
    prefill = {name: row[-CONTEXT] for name, row in curve.items()}
    print(
        f"prefill of {CONTEXT} tokens (ms): "
        + ", ".join(f"{n} {v:.1f}" for n, v in prefill.items())
    )
    print(
        f"\nweights {weight_bytes / 1e6:.0f} MB, read bandwidth {bandwidth / 1e9:.1f} GB/s, "
        f"floor {floor_ms:.1f} ms; T=1 after / floor = {curve['after'][1] / floor_ms:.2f}"
    )
    command = command_line(sys.argv[1:], ("benchmarks/verify_curve.py",))
    record: dict[str, object] = {
        "environment": environment("cpu", "float32", command),
        "curve_ms": curve,
        "weight_bytes": weight_bytes,
        "bandwidth_bytes_per_s": bandwidth,
        "floor_ms": floor_ms,
        "table": kernel_table.table_to_json(after),
        "threads": torch.get_num_threads(),
    }
    if args.ar:
        ar = time_ar(model, prompt, args.ar, tables)
        record["generate_ar"] = ar
        for name, r in ar.items():
            print(
                f"generate_ar {args.ar} tokens, {name}: {r['tokens_per_s']:.1f} tok/s "
                f"({r['seconds']:.2f} s), same tokens as before: {bool(r['same_tokens_as_first'])}"
            )
    print(f"load average at end: {os.getloadavg()}")
    record["loadavg_end"] = os.getloadavg()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(record, fh, indent=1)


if __name__ == "__main__":
    main()
