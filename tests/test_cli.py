"""The command line: clear errors for bad input, and one real run with --json."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from casspec_ref.tools.cli import main


@pytest.mark.parametrize(
    "argv, message",
    [
        (["generate", "   "], "prompt is empty"),
        (["generate", "hi", "--temperature", "-1"], "temperature"),
        (["generate", "hi", "--top-p", "0"], "top_p"),
        (["generate", "hi", "--top-p", "1.5"], "top_p"),
        (["generate", "hi", "--top-k", "-3"], "top_k"),
        (["generate", "hi", "--max-new-tokens", "-1"], "max-new-tokens"),
        (["generate", "hi", "--method", "warp-drive"], "unknown --method 'warp-drive'"),
        (["generate", "hi", "--device", "tpu"], "not supported"),
        (["generate", "hi", "--model", "/nonexistent/model.gguf"], "nonexistent"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(argv, message, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ")
    assert message in err


def test_help_lists_the_methods(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["generate", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for method in ("ar", "pld", "cas-spec"):
        assert method in out


@pytest.mark.real_model
@pytest.mark.parametrize("method", ["ar", "cas-spec"])
def test_generate_json_on_the_real_model(method: str) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "casspec_ref",
            "generate",
            "What is the capital of France?",
            "--method",
            method,
            "--max-new-tokens",
            "12",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {"prompt_ids", "generated_ids", "text", "timing", "stats"} <= set(out)
    assert "Paris" in out["text"]
    assert out["timing"]["tokens_per_s"] > 0
    if method != "ar":
        assert out["stats"]["mat"] >= 1.0


def test_bench_subcommand_passes_its_options_through(capsys) -> None:
    assert main(["bench", "--methods", "ar,warp-drive", "--max-new-tokens", "4"]) == 2
    assert "warp-drive" in capsys.readouterr().err


@pytest.mark.real_model
def test_compare_ar_reports_a_measured_speedup_and_identity() -> None:
    cmd = [
        sys.executable,
        "-m",
        "casspec_ref",
        "generate",
        "Name three colours.",
        "--method",
        "pld",
        "--max-new-tokens",
        "12",
        "--compare-ar",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    summary, exact, plain = lines[-3:]
    assert "speedup" in summary and "over the" in summary and "naive loop" in summary
    assert "identical to the exact naive loop's" in summary  # greedy: the same tokens
    assert "estimate" not in summary
    assert exact.startswith("naive loop, exact:") and plain.startswith("naive loop, plain:")
    base = "exact" if "<- the base" in exact else "plain"
    assert f"over the {base} naive loop" in summary and ("<- the base" in plain) == (
        base == "plain"
    )


@pytest.mark.parametrize("method", ["ar", "pld", "cas-spec"])
def test_a_single_timed_run_says_it_is_cold(method, tmp_path, capsys) -> None:
    """Without --compare-ar the speed printed is one cold run's: the line says what it includes
    (a fresh DyTC policy's first timings for CAS-Spec) and how to time warm runs."""
    from hostile_support import write_tiny_gguf

    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    argv = ["generate", "--model", str(model), "--max-new-tokens", "4", "--method", method, "hi"]
    assert main(argv) == 0
    summary = capsys.readouterr().out.strip().splitlines()[-1]
    assert summary.startswith(f"[{method}] ") and "a cold run: one-time setup" in summary
    assert ("fresh DyTC policy's first timings" in summary) == (method == "cas-spec")
    assert ("--compare-ar times warm runs" in summary) == (method != "ar")


@pytest.mark.parametrize("method", ["pld", "cas-spec"])
def test_compare_ar_states_the_verify_costs_when_a_policy_timed_them(method, tmp_path, capsys):
    from hostile_support import write_tiny_gguf

    model = write_tiny_gguf(tmp_path / "tiny.gguf")
    argv = ["generate", "--model", str(model), "--max-new-tokens", "6", "--method", method]
    assert main([*argv, "--compare-ar", "hi"]) == 0
    out = capsys.readouterr().out
    assert "speedup" in out and "a cold run" not in out  # every loop warmed up first
    assert ("verify costs on this machine (DyTC's timings)" in out) == (method == "cas-spec")


def test_the_base_is_the_faster_naive_loop_with_the_same_tokens() -> None:
    """The plain loop is the base only when its tokens are the same; the exact loop otherwise
    (and when neither is), whatever the speeds."""
    from casspec_ref.tools.naive import NaiveRun, fastest_equal

    exact, plain = NaiveRun("exact", [1, 2], 2.0), NaiveRun("plain", [1, 2], 1.0)
    assert fastest_equal([exact, plain], [1, 2]) is plain
    other = NaiveRun("plain", [1, 3], 0.5)
    assert fastest_equal([exact, other], [1, 2]) is exact
    assert fastest_equal([exact, other], [9]) is exact
    slower = NaiveRun("plain", [1, 2], 4.0)
    assert fastest_equal([exact, slower], [1, 2]) is exact


def test_demo_rejects_a_bad_length(capsys) -> None:
    from casspec_ref.tools.demo import run_demo

    assert run_demo(0) == 2


def test_the_demo_states_the_verify_costs_its_policy_timed() -> None:
    """The ratios are the policy's own timings, each against one token's, for the sizes timed."""
    from casspec_ref.dytc import DyTC
    from casspec_ref.dytc_refinements import RefinedDyTC
    from casspec_ref.tools.naive import verify_costs

    for policy in (DyTC(["exit1"]), RefinedDyTC(["exit1"])):
        assert verify_costs(policy) == "verify costs: not timed yet"
        for tokens, seconds in ((1, 0.04), (2, 0.06), (8, 0.12)):
            policy.verify_cost.observe(tokens, seconds)
        assert verify_costs(policy).startswith(
            "verify costs on this machine (DyTC's timings), against one token's: 2 tokens 1.5x, "
            "8 tokens 3.0x\n"
        )


@pytest.mark.parametrize(
    "method, policy", [("cas-spec", "RefinedDyTC"), ("cas-spec:paper", "DyTC"), ("pld", None)]
)
def test_the_warm_up_hands_cas_spec_a_policy_that_has_measured_its_costs(method, policy) -> None:
    """`naive.warm_up` runs every loop once; for a DyTC method it returns the policy, which has
    timed the target (its cost curve is not empty) and which the timed run accepts."""
    import torch

    from casspec_ref.base.random_weights import random_init_
    from casspec_ref.config import tiny_llama
    from casspec_ref.generate import generate_ar
    from casspec_ref.model import Transformer
    from casspec_ref.speculative import generate_speculative
    from casspec_ref.tools.naive import warm_up

    model = random_init_(Transformer(tiny_llama(vocab_size=32, max_seq_len=128)), seed=0)
    model = model.to(torch.float64)
    carried = warm_up(model, [1, 2, 3, 1, 2], method)
    if policy is None:
        assert carried == {}
        return
    assert type(carried["policy"]).__name__ == policy and carried["policy"].ready()
    timed = generate_speculative(model, [1, 2, 3, 1, 2], 12, method=method, **carried)
    assert timed.tokens == generate_ar(model, [1, 2, 3, 1, 2], 12).tokens
