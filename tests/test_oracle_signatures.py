"""Known calling conventions, contract errors, hidden paths and budgets: the oracle checks the
field's code as it is written, and tells a glue mistake or its own budget apart from a verdict.

The targets are the installed transformers ``_speculative_sampling`` and faithful ports in
tests/oracle_gallery/ (vLLM v0's sampler with its ``@torch.jit.script`` kept). Each check runs
on a few small cases; the whole catalogue is in test_oracle_gallery.py (the vLLM v0 port's under
the ``thorough`` marker)."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from oracle_gallery import float32_chain, textbook_chain
from transformers.generation.utils import _speculative_sampling

from casspec_ref.proof import (
    JSON_KEYS,
    ChainInputs,
    CheckReport,
    EnumerationStats,
    assert_lossless,
    check_verifier,
    exact_law,
    hidden_paths,
    route_all,
    run_check_command,
)
from casspec_ref.proof.adapters import PendingDraw, Thunk

REPO = Path(__file__).resolve().parents[1]
SMALL = {"families": ["random"], "vocab": [2, 3], "k": [1, 2]}
PORT = "oracle_gallery.vllm_v0_port"


# --- known signatures --------------------------------------------------------------------------


def test_transformers_function_with_no_glue() -> None:
    """The installed function, unmodified: LOSSLESS; with DIVERSE's ensemble weight (lossy by
    design): NOT LOSSLESS."""
    families = ["random", "top_k", "disjoint"]
    report = check_verifier(_speculative_sampling, signature="hf", families=families, vocab=[2, 3])
    assert report.verdict == "LOSSLESS", report.format()
    assert report.signature == "hf"
    lossy = functools.partial(_speculative_sampling, assistant_ensemble_weight=0.5)
    report = check_verifier(lossy, signature="hf", families=["random"], vocab=[2])
    assert report.verdict == "NOT LOSSLESS" and report.worst_tv > 0.1, report.format()


def plain_verify(p: torch.Tensor, q: torch.Tensor, draft_tokens: torch.Tensor) -> torch.Tensor:
    """The textbook rule in the plain (p, q, draft_tokens) convention, returning a tensor."""
    for i, x in enumerate(draft_tokens.tolist()):
        if torch.rand(()) >= p[i, x] / q[i, x]:
            residual = torch.clamp(p[i] - q[i], min=0)
            return torch.cat([draft_tokens[:i], torch.multinomial(residual, 1)])
    return torch.cat([draft_tokens, torch.multinomial(p[-1], 1)])


def test_plain_signature() -> None:
    report = check_verifier(plain_verify, signature="plain", **SMALL)
    assert report.verdict == "LOSSLESS", report.format()


def test_vllm_v0_port_with_torchscript_kept_gets_a_verdict_from_the_command() -> None:
    """The command finds the scripted ``_multinomial`` and imports the port again with
    TorchScript disabled; the one-line-broken sampler is caught the same way. An earlier test
    may have left the port imported without TorchScript: a fresh import keeps it scripted, as a
    new process would find it."""
    sys.modules.pop(PORT, None)
    out = io.StringIO()
    small = {"families": ["random"], "vocab": [3], "k": [2], "as_json": True, "stream": out}
    code = run_check_command(f"{PORT}:RejectionSampler", signature="vllm-v0", **small)
    data = json.loads(out.getvalue())
    assert code == 0 and data["verdict"] == "LOSSLESS", data
    assert any("_multinomial" in n and "TorchScript" in n for n in data["notes"])
    assert 0 < data["pruned_mass"] < 1e-12 and data["prune_below"] == 1e-15
    out.truncate(0), out.seek(0)
    code = run_check_command(f"{PORT}:BrokenRejectionSampler", signature="vllm-v0", **small)
    assert code == 1 and json.loads(out.getvalue())["verdict"] == "NOT LOSSLESS"


def test_torchscript_through_the_api_is_not_checkable_naming_function_and_switch() -> None:
    sys.modules.pop(PORT, None)  # the command above may have imported it without TorchScript
    vllm_v0_port = importlib.import_module(PORT)
    assert [h.kind for h in hidden_paths(vllm_v0_port.RejectionSampler)] == ["TorchScript"]
    report = check_verifier(vllm_v0_port.RejectionSampler, signature="vllm-v0", **SMALL)
    assert report.verdict == "NOT CHECKABLE" and report.exit_code == 3
    error = report.error or ""
    assert "_multinomial" in error and "vllm_v0_port.py:" in error and "PYTORCH_JIT=0" in error
    assert assert_lossless(vllm_v0_port.RejectionSampler, signature="vllm-v0", **SMALL).lossless


def test_torch_compile_runs_eagerly_with_a_note() -> None:
    compiled = torch.compile(textbook_chain.verify)

    def verify(inputs: ChainInputs, rng) -> list[int]:  # type: ignore[no-untyped-def]
        return compiled(inputs, rng)

    report = check_verifier(verify, families=["random"], vocab=[2])
    assert report.verdict == "LOSSLESS", report.format()
    assert any("torch.compile" in n and "ran eagerly" in n for n in report.notes)


# --- contract errors are not verdicts ----------------------------------------------------------


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        ("returns_hf_tuple", "--signature hf"),
        ("returns_vllm_padding", "--signature vllm-v0"),
        ("wrong_signature", "missing a required argument"),
    ],
)
def test_glue_mistakes_are_contract_errors(target: str, expected: str) -> None:
    out = io.StringIO()
    code = run_check_command(f"oracle_gallery.glue_mistakes:{target}", stream=out, **SMALL)
    text = out.getvalue()
    assert code == 3 and "CONTRACT ERROR" in text and "NOT LOSSLESS" not in text, text
    assert expected in text and "fn(inputs: ChainInputs) or fn(inputs, rng)" in text


def test_two_parameters_are_not_silently_read_as_inputs_and_rng() -> None:
    report = check_verifier(lambda inputs, temperature: [0], **SMALL)
    assert report.verdict == "CONTRACT ERROR", report.format()
    assert "missing a required argument: 'temperature'" in (report.error or "")


def test_wrong_return_under_a_known_signature() -> None:
    report = check_verifier(lambda *args: [0, 0], signature="hf", **SMALL)
    assert report.verdict == "CONTRACT ERROR"
    assert "(valid_tokens, n_matches)" in (report.error or "") and "[0, 0]" in (report.error or "")


def test_a_contract_error_quotes_a_long_output_shortened() -> None:
    report = check_verifier(lambda p, q, drafts: [0] * 10**6, signature="plain", **SMALL)
    assert report.verdict == "CONTRACT ERROR"
    assert "returned 1000000 tokens" in (report.error or "")
    assert "list of 1000000 items" in (report.error or "")
    assert len(json.dumps(report.to_json())) < 10_000


def _seeded_chain(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> list[int]:
    """A correct chain verifier drawing as vLLM v1 does for a seeded request: the batch's
    uniforms first, then the request's slice again from its own generator; the residual raced
    by ``weights * (1 / E)``."""
    k, vocab = len(drafts), p.shape[-1]
    u = torch.rand(k, dtype=torch.float64)
    u[0:k].uniform_(generator=torch.Generator().manual_seed(3))
    inv_e = torch.empty(vocab, dtype=torch.float64).exponential_().reciprocal()
    out = []
    for i, token in enumerate(drafts.tolist()):
        if u[i] < p[i, token] / q[i, token]:
            out.append(token)
            continue
        return [*out, int((torch.clamp(p[i] - q[i], min=0) * inv_e).argmax())]
    bonus = (p[k] / torch.empty(vocab, dtype=torch.float64).exponential_()).argmax()
    return [*out, int(bonus)]


def test_draws_into_a_view_of_draws_and_the_reciprocal_race_are_followed() -> None:
    report = check_verifier(_seeded_chain, signature="plain", families=["random"], vocab=[3])
    assert report.verdict == "LOSSLESS", report


def test_a_draw_into_a_view_of_a_plain_tensor_is_refused_by_name() -> None:
    def into_view(p: torch.Tensor, q: torch.Tensor, drafts: torch.Tensor) -> list[int]:
        e = torch.empty(2, p.shape[-1])
        e[0].exponential_()
        return [int(drafts[0])]

    report = check_verifier(into_view, signature="plain", **SMALL)
    assert report.verdict == "NOT CHECKABLE"
    assert "in-place draw into a view" in (report.error or "")


def test_asking_a_pending_tokens_layout_does_not_decide_it() -> None:
    """vLLM v1 asserts ``bonus_token_ids.is_contiguous()`` before it uses the bonus token: a
    question about layout must leave the pending draw undecided (decided, it would add a branch
    per token to every path, used or not)."""

    def decide() -> int:
        raise AssertionError("the pending token was decided by a layout query")

    bonus = PendingDraw.make(np.array([[Thunk(decide)]], dtype=object))
    assert bonus.is_contiguous() and bonus.stride() == (1, 1) and bonus.storage_offset() == 0
    assert bonus.ndimension() == 2 and bonus.get_device() == -1 and bonus.is_signed()
    assert not bonus.is_complex()


# --- rounding, budget, pruning -----------------------------------------------------------------


def test_float32_rounding_is_named_and_the_preset_suggested() -> None:
    report = check_verifier(float32_chain.verify, families=["random"], vocab=[3])
    assert report.verdict == "NOT LOSSLESS" and report.worst_tv < 1e-6
    assert any("computes in float32" in n and "--tolerance float32" in n for n in report.notes)


def test_the_oracles_budget_is_inconclusive_not_a_failure_of_the_code() -> None:
    def slow(inputs: ChainInputs, rng) -> list[int]:  # type: ignore[no-untyped-def]
        time.sleep(0.05)
        return textbook_chain.verify(inputs, rng)

    report = check_verifier(slow, families=["random"], vocab=[4], k=[2], timeout=0.5)
    assert report.verdict == "INCONCLUSIVE" and report.exit_code == 3, report.format()
    assert "INCONCLUSIVE: budget" in (report.error or "")
    report = check_verifier(textbook_chain.verify, families=["random"], vocab=[3], max_paths=3)
    assert report.verdict == "INCONCLUSIVE" and "max_paths" in (report.error or "")


def test_a_python_float_threshold_keeps_float64_precision() -> None:
    """``u < 0.1`` with a lazy uniform u has probability 0.1 in float64; rounding the threshold
    to float32 first (torch.as_tensor of a Python float) would give 0.10000000149."""

    def fn(rng) -> bool:  # type: ignore[no-untyped-def]
        with route_all(rng):
            return bool(torch.rand(()) < 0.1)

    assert exact_law(fn)[True] == 0.1


def test_pruned_mass_is_accounted_for() -> None:
    """A branch of probability 1e-20 is not run; its mass is what the law is missing."""

    def fn(rng) -> int:  # type: ignore[no-untyped-def]
        return 2 if rng.bernoulli(1e-20) else int(rng.bernoulli(0.25))

    stats = EnumerationStats()
    law = exact_law(fn, prune_below=1e-15, stats=stats)
    assert law == pytest.approx({0: 0.75, 1: 0.25})
    assert stats.pruned_mass == pytest.approx(1e-20)
    assert sum(law.values()) + stats.pruned_mass == pytest.approx(1.0)


# --- the report and assert_lossless ------------------------------------------------------------


def test_json_keys_are_pinned_to_attributes() -> None:
    report = check_verifier(textbook_chain.verify, families=["random"], vocab=[2])
    data = report.to_json()
    fields = {f.name for f in dataclasses.fields(CheckReport)}
    assert set(JSON_KEYS) == fields
    assert set(data) == set(JSON_KEYS.values()) | {"exit_code"}
    for attribute, key in JSON_KEYS.items():
        if attribute != "seconds":
            assert data[key] == getattr(report, attribute), attribute
    docs = (REPO / "docs" / "oracle.md").read_text()
    for attribute, key in JSON_KEYS.items():
        assert f"`{attribute}`" in docs and f"`{key}`" in docs, attribute


def test_assert_lossless_from_a_test_file_outside_the_package(tmp_path: Path) -> None:
    """The documented example file and the fixture run from another directory."""
    example = REPO / "docs" / "examples" / "test_lossless_with_oracle.py"
    (tmp_path / "test_example.py").write_text(example.read_text())
    (tmp_path / "conftest.py").write_text('pytest_plugins = ["casspec_ref.proof.pytest_plugin"]\n')
    (tmp_path / "test_fixture.py").write_text(
        "import numpy as np\n\n"
        "def broken(inputs, rng):\n"
        "    return [int(rng.categorical(np.asarray(inputs.draft_probs[0], dtype=float)))]\n\n"
        "def test_fixture(assert_lossless):\n"
        "    assert_lossless(broken, families=['random'], vocab=[2])\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    assert "2 passed" in done.stdout and "1 failed" in done.stdout, done.stdout[-3000:]
    assert "test_fixture" in done.stdout and "first_difference" in done.stdout


def test_a_total_variation_within_the_pruning_bound_is_inconclusive() -> None:
    """TV 2e-9 at tolerance 1e-9 fails with nothing pruned, and is INCONCLUSIVE when 4e-9 of
    mass was pruned (the true TV is then anywhere in [0, 4e-9])."""
    from casspec_ref.proof.cases import default_cases
    from casspec_ref.proof.checker import _judge

    case = default_cases()[0]
    got, want = {(0,): 0.5 + 2e-9, (1,): 0.5 - 2e-9}, {(0,): 0.5, (1,): 0.5}
    for pruned, failing, verdict in ((0.0, [case.name], ""), (4e-9, [], "INCONCLUSIVE")):
        report = CheckReport(True, 0.0, "", 1, 1e-9, [], None, verdict="LOSSLESS")
        _judge(case, got, want, pruned, report)
        assert report.failing_cases == failing
        assert report.verdict == (verdict or "LOSSLESS")
        assert report.pruned_mass == pruned
