"""Command line: ``python -m casspec_ref {generate, oracle, bench, demo} ...``.

- ``generate "PROMPT"`` applies the model's chat template, streams the answer, then prints a
  one-line summary (tokens/s, and for speculative methods MAT and the draft statistics).
  ``--json`` prints one JSON object instead, for scripts.
- ``oracle check MODULE:FUNCTION`` asks the exact-law oracle whether someone else's verify
  function is lossless (see docs/oracle.md).
- ``bench`` runs the Spec-Bench-style harness (see docs/benchmarks.md).
- ``demo`` runs plain decoding and CAS-Spec side by side on one prompt (``make demo``).

Argument checking happens here and in the library; every bad value exits with status 2 and a
message that names the value and what is allowed. Ctrl-C exits with 130, a closed pipe on stdout
(``| head``) exits quietly with 141 (see :func:`main`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from casspec_ref.tools.arguments import check_device, method_names, parse_size

DTYPES = ("float32", "bfloat16", "float64")
DEFAULT_METHOD = "cas-spec"


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m casspec_ref",
        description="CAS-Spec reference: lossless cascade self-speculative decoding in PyTorch.",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    gen = sub.add_parser(
        "generate",
        help="generate an answer to a prompt (chat template applied)",
        description="Generate an answer with the naive loop (--method ar) or a speculative "
        "schedule. Greedy by default (temperature 0); the output of every method has exactly "
        "the law of the naive loop (greedy: the same tokens).",
    )
    gen.add_argument("prompt", help="the user message (wrapped in the model's chat template)")
    gen.add_argument(
        "--method",
        default=None,
        help=f"decoding method, one of: {', '.join(method_names())} (default {DEFAULT_METHOD})",
    )
    gen.add_argument(
        "--dytc",
        choices=("best", "paper"),
        default="best",
        help="CAS-Spec's DyTC policy: this reference's (best, default) or the paper's alone "
        "(paper: --method cas-spec:paper)",
    )
    gen.add_argument("--max-new-tokens", type=int, default=128, help="default 128")
    gen.add_argument(
        "--temperature", type=float, default=0.0, help="0 = greedy (default); > 0 samples"
    )
    gen.add_argument("--top-k", type=int, default=0, help="keep the k most likely tokens; 0 = off")
    gen.add_argument("--top-p", type=float, default=1.0, help="nucleus mass in (0, 1]; 1 = off")
    gen.add_argument("--seed", type=int, default=0, help="seed of the random source (default 0)")
    gen.add_argument("--dtype", choices=DTYPES, default="float32", help="model dtype")
    gen.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    gen.add_argument(
        "--model",
        default=None,
        help="a GGUF file or a Hugging Face checkpoint directory "
        "(default: the embedded SmolLM2-135M-Instruct)",
    )
    gen.add_argument(
        "--memory-budget",
        default=None,
        help="bytes the model may use, e.g. 8G or 512M (default: physical memory); a checkpoint "
        "needing more is refused before anything is allocated",
    )
    gen.add_argument(
        "--max-context",
        type=int,
        default=None,
        help="cap the context the model allocates for (default: the checkpoint's)",
    )
    gen.add_argument("--raw", action="store_true", help="do not apply the chat template")
    gen.add_argument(
        "--compare-ar",
        action="store_true",
        help="also run the naive loop (exact and plain) on the same prompt and report the "
        "measured speedup over the faster one with the same tokens; every loop is first run "
        "once, untimed, on a short answer to another request (text output only)",
    )
    gen.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    gen.add_argument(
        "--show-tree",
        action="store_true",
        help="print each speculative step's token tree, accepted tokens colored by draft level "
        "(to stderr with --json, so that stdout stays one JSON object)",
    )

    oracle = sub.add_parser("oracle", help="check a verify function with the exact-law oracle")
    oracle_sub = oracle.add_subparsers(dest="oracle_command", required=True)
    check = oracle_sub.add_parser(
        "check",
        help="say whether MODULE:FUNCTION (a chain or --tree verifier, or a --loop) is lossless",
        description="Enumerate every outcome of a third-party verify function on a catalogue of "
        "small cases and compare its exact output law with the target law (docs/oracle.md).",
    )
    from casspec_ref.proof.checker import add_oracle_arguments

    add_oracle_arguments(check)

    demo = sub.add_parser(
        "demo",
        help="plain decoding and CAS-Spec side by side on a prompt where the cascade pays",
    )
    demo.add_argument("--max-new-tokens", type=int, default=160, help="default 160")
    sub.add_parser(
        "bench",
        help="Spec-Bench-style speed harness (docs/benchmarks.md; 'bench --help' for options)",
    )
    return parser


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


def _resolve_dtype(name: str) -> Any:
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float64": torch.float64}[name]


class _TextStreamer:
    """Prints the decoded text as tokens arrive, holding back an incomplete UTF-8 character."""

    def __init__(self, decode: Any, enabled: bool, hidden: Sequence[int] = ()) -> None:
        self.decode = decode
        self.enabled = enabled
        self.hidden = frozenset(hidden)  # stop tokens: emitted, but not printed
        self.ids: list[int] = []
        self.printed = 0

    def __call__(self, token: int) -> None:
        if token in self.hidden:
            return
        self.ids.append(token)
        if not self.enabled:
            return
        text = self.decode(self.ids)
        if text.endswith("\ufffd"):  # a multi-byte character is still incomplete
            return
        sys.stdout.write(text[self.printed :])
        sys.stdout.flush()
        self.printed = len(text)


def _generate(args: argparse.Namespace) -> int:
    methods = method_names()
    method = args.method or (DEFAULT_METHOD if DEFAULT_METHOD in methods else "ar")
    if args.dytc == "paper":
        if method not in ("cas-spec", "cas-spec:paper"):
            return _fail(f"--dytc paper applies to --method cas-spec, not {method!r}")
        method = "cas-spec:paper"
    if method not in methods:
        return _fail(f"unknown --method {method!r}: allowed are {', '.join(methods)}")
    if not args.prompt.strip():
        return _fail("the prompt is empty: give a non-empty PROMPT")
    device_problem = check_device(args.device)
    if device_problem:
        return _fail(device_problem)

    from casspec_ref.accel import invariance, threads
    from casspec_ref.base.input_checks import validate_sampling
    from casspec_ref.generate import generate_ar
    from casspec_ref.io.weights import load_model

    try:
        validate_sampling(args.temperature, args.top_k, args.top_p)
    except ValueError as exc:
        return _fail(str(exc))
    if args.max_new_tokens < 0:
        return _fail(f"--max-new-tokens={args.max_new_tokens} must be >= 0")
    if not 0 <= args.seed < 2**63:
        return _fail(f"--seed={args.seed}: must be an integer in 0..2^63-1")
    if args.max_context is not None and args.max_context < 1:
        return _fail(f"--max-context={args.max_context}: must be >= 1")
    try:
        memory_budget = parse_size(args.memory_budget, "--memory-budget")
    except ValueError as exc:
        return _fail(str(exc))

    try:
        model, tokenizer = load_model(
            args.model,
            dtype=_resolve_dtype(args.dtype),
            device=args.device,
            memory_budget=memory_budget,
            max_context=args.max_context,
        )
    except (FileNotFoundError, IsADirectoryError, ValueError) as exc:
        return _fail(str(exc))
    if tokenizer is None:
        return _fail(f"no tokenizer could be built for {args.model}: see docs/design.md")

    try:
        if args.raw:
            prompt_ids = tokenizer.encode(args.prompt)
        else:
            messages = [{"role": "user", "content": args.prompt}]
            prompt_ids = tokenizer.apply_chat_template(messages)
    except ValueError as exc:
        return _fail(f"the prompt cannot be tokenized: {exc}")
    # With --show-tree the trace owns the terminal; the text is printed once at the end.
    streamer = _TextStreamer(
        tokenizer.decode, enabled=not (args.json or args.show_tree), hidden=tokenizer.stop_ids
    )
    sampling: dict[str, Any] = dict(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        seed=args.seed,
        stop_ids=tokenizer.stop_ids,
    )
    common: dict[str, Any] = {**sampling, "on_token": streamer}
    # With --json, stdout carries exactly one JSON object: no comparison is printed.
    compare = args.compare_ar and method != "ar" and not args.json
    carried: dict[str, Any] = {}  # what the warm-up hands the timed run (CAS-Spec's policy)
    if compare:
        # Every loop untimed once first, on another request, as the demo and the bench do.
        from casspec_ref.tools.naive import WARM_UP_REQUEST, warm_up

        other = tokenizer.apply_chat_template([{"role": "user", "content": WARM_UP_REQUEST}])
        carried = warm_up(model, other, method, **sampling)
    start = time.perf_counter()
    try:
        if method == "ar":
            result = generate_ar(model, prompt_ids, args.max_new_tokens, **common)
        else:
            from casspec_ref.speculative import generate_speculative

            on_step = None
            if args.show_tree:
                from casspec_ref.tools.trace import TreePrinter

                # With --json, stdout carries exactly one JSON object: the tree goes to stderr.
                stream = sys.stderr if args.json else sys.stdout
                on_step = TreePrinter(tokenizer.decode, stream=stream)
            result = generate_speculative(
                model,
                prompt_ids,
                args.max_new_tokens,
                method=method,
                on_step=on_step,
                **common,
                **carried,
            )
    except ValueError as exc:
        return _fail(str(exc))
    wall = time.perf_counter() - start

    generated = list(result.tokens)
    text = tokenizer.decode([t for t in generated if t not in tokenizer.stop_ids])
    tokens_per_s = len(generated) / wall if wall > 0 else float("nan")
    stats = dict(result.stats)
    if args.json:
        out = {
            "method": method,
            "prompt_ids": list(prompt_ids),
            "generated_ids": generated,
            "text": text,
            "stopped": result.stopped,
            "timing": {**result.timing, "wall_s": wall, "tokens_per_s": tokens_per_s},
            "stats": stats,
            "threads": threads.apply().as_dict(),
            "shape_invariance": invariance.reports(),
        }
        print(json.dumps(out, default=float))
        return 0
    if args.show_tree:
        print("\n" + text)
    else:
        print()
    summary = f"[{method}] {len(generated)} tokens in {wall:.2f} s = {tokens_per_s:.1f} tok/s"
    if "mat" in stats:
        summary += f", MAT {stats['mat']:.2f} (bonus token included)"
    if not compare:
        summary += f"; {_cold_run(method)}"
    else:
        # The naive loop in both forms, run now on the same prompt; the speedup is taken over
        # the faster one whose tokens equal these (`casspec_ref.tools.naive`).
        from casspec_ref.tools.naive import describe, fastest_equal, time_naive_loops, verify_costs

        naive = time_naive_loops(model, prompt_ids, args.max_new_tokens, **sampling)
        base = fastest_equal(naive, generated)
        exact = next(r for r in naive if r.form == "exact")
        same = "identical to" if exact.tokens == generated else "a different sample than"
        summary += (
            f"; speedup {tokens_per_s / base.tokens_per_s:.2f}x over the {base.form} naive loop "
            f"(the faster one with the same tokens; every loop warmed up first, untimed), output "
            f"{same} the exact naive loop's\n"
        )
        summary += "\n".join(describe(naive, base, generated))
        if "policy" in carried:  # what bounds the speedup on this machine
            summary += "\n" + verify_costs(carried["policy"])
    print(summary)
    return 0


def _cold_run(method: str) -> str:
    """What a single timed run includes that a warm one does not, and how to time warm runs."""
    if method == "ar":
        return "a cold run: one-time setup included"
    fresh = " and a fresh DyTC policy's first timings" if method.startswith("cas-spec") else ""
    return f"a cold run: one-time setup{fresh} included; --compare-ar times warm runs"


def _oracle(args: argparse.Namespace) -> int:
    from casspec_ref.proof.checker import run_oracle_args

    return run_oracle_args(args)


#: Exit statuses: 0 success, 2 bad input (argparse's convention), 130 interrupted (128 + SIGINT),
#: 141 stdout closed by its reader (128 + SIGPIPE, what a shell reports for ``yes | head``).
EXIT_OK, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_BROKEN_PIPE = 0, 2, 130, 141


def _discard_stdout() -> None:
    """Point file descriptor 1 at /dev/null, so the interpreter's final flush cannot fail."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, AttributeError, ValueError):
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m casspec_ref``; returns the process exit status.

    Exit statuses: 0 success; 2 bad input (a message on stderr names the value and what is
    allowed); 130 after Ctrl-C; 141, silently, when the reader of stdout went away (``| head``).
    A closed stdout (``>&-``) is replaced by /dev/null rather than crashing.
    """
    if sys.stdout is None:  # started with stdout closed: nothing to print to
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115
    try:
        return _dispatch(argv)
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE


def _dispatch(argv: Sequence[str] | None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["bench"]:
        # The harness owns its options (argparse's REMAINDER would not pass "--x" through).
        from casspec_ref.tools.bench import main as bench_main

        return bench_main(argv[1:])
    args = _build_parser().parse_args(argv)
    if args.command == "generate":
        return _generate(args)
    if args.command == "demo":
        from casspec_ref.tools.demo import run_demo

        return run_demo(args.max_new_tokens)
    return _oracle(args)
