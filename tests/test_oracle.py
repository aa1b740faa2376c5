"""Tests of casspec_ref.proof.replicas: exact enumeration, third-party check, CLI and vectors."""

from __future__ import annotations

import functools
import inspect
import io
import json
import subprocess
import sys
from fractions import Fraction as F
from pathlib import Path

import numpy as np
import pytest
import torch

from casspec_ref.proof import (
    VECTORS_PATH,
    ChainInputs,
    NonDeterministicFunctionError,
    build_vectors,
    check_verifier,
    default_cases,
    exact_law,
    load_vectors,
    raw_bonus_replica,
    reference_chain_verifier,
    route_all,
    run_check_command,
    total_variation,
    tree_from_json,
)
from casspec_ref.sampling import RandomSource
from casspec_ref.verify import verify_tree

REPO = Path(__file__).resolve().parents[1]


# --- exact_law ---------------------------------------------------------------------------------


def test_exact_law_of_coins_and_categoricals():
    def fn(rng: RandomSource) -> tuple[int, ...]:
        first = rng.categorical(np.array([F(1, 2), F(0), F(1, 2)], dtype=object))
        if first == 0:
            return (first, int(rng.bernoulli(F(1, 3))))
        return (first,)

    law = exact_law(fn, exact=True)
    assert law == {(0, 1): F(1, 6), (0, 0): F(1, 3), (2,): F(1, 2)}
    law_float = exact_law(fn)
    assert total_variation(law, law_float) < 1e-15
    assert all(isinstance(v, float) for v in law_float.values())


def test_exact_law_prunes_impossible_branches():
    calls = []

    def fn(rng: RandomSource) -> int:
        calls.append(1)
        return int(rng.bernoulli(1.0)) + rng.categorical(np.array([0.0, 1.0, 0.0]))

    assert exact_law(fn) == {2: 1.0}
    assert len(calls) == 1


def test_exact_law_detects_hidden_randomness():
    state = {"n": 0}

    def fn(rng: RandomSource) -> int:
        state["n"] += 1
        # Draws a different kind of decision on the replay: not a function of its draws.
        if state["n"] == 1:
            return int(rng.bernoulli(0.5))
        return rng.categorical(np.array([0.1, 0.2, 0.3, 0.4]))

    with pytest.raises(NonDeterministicFunctionError):
        exact_law(fn)


def test_exact_law_path_limit():
    def fn(rng: RandomSource) -> int:
        return sum(rng.categorical(np.full(4, 0.25)) for _ in range(6))

    with pytest.raises(ValueError, match="max_paths"):
        exact_law(fn, max_paths=100)


def test_total_variation():
    assert total_variation({"a": F(1, 2), "b": F(1, 2)}, {"a": F(1)}) == F(1, 2)
    assert total_variation({"a": 1.0}, {"b": 1.0}) == 1.0


# --- check_verifier on our verifier, a replica of a shipped bug, and transformers --------------


def test_reference_verifier_is_lossless_in_float64_and_exactly():
    report = check_verifier(reference_chain_verifier)
    assert report.lossless, report.format()
    assert report.worst_tv < 1e-12
    exact = check_verifier(reference_chain_verifier, exact=True)
    assert exact.lossless and exact.worst_tv == 0


def test_raw_bonus_replica_is_flagged_with_a_minimal_counterexample():
    report = check_verifier(raw_bonus_replica)
    assert not report.lossless
    assert report.worst_tv > 1e-3
    cx = report.counterexample
    assert cx is not None
    # The smallest failing case comes first: vocabulary 2, one drafted token.
    assert (cx["vocab_size"], cx["draft_length"]) == (2, 1)
    assert cx["temperature"] != 1.0 or cx["top_k"] or cx["top_p"] < 1.0
    assert cx["total_variation"] > 1e-9
    # Cases at temperature 1 with no other transform are (correctly) not failing.
    untransformed = [c.name for c in default_cases() if c.name.startswith(("random", "p_eq"))]
    assert not set(untransformed) & set(report.failing_cases)


def hf_chain_verifier(inputs: ChainInputs) -> list[int]:
    """Hugging Face transformers' `_speculative_sampling`, unmodified: its ``torch.rand_like`` and
    ``torch.multinomial`` draws are routed by the oracle's adapters. The module must be imported
    before the check (see the test below)."""
    from transformers.generation.utils import _speculative_sampling

    k = len(inputs.draft_tokens)
    ids = torch.tensor([[0, *inputs.draft_tokens]])  # (1, 1 + K)
    with np.errstate(divide="ignore"):
        # HF takes logits already processed by its warpers; log p has the processed law p.
        candidate_logits = torch.tensor(np.log(inputs.draft_probs.astype(np.float64)))[None]
        new_logits = torch.tensor(np.log(inputs.target_probs.astype(np.float64)))[None]
    params = inspect.signature(_speculative_sampling).parameters
    extra = {}
    if "is_done_candidate" in params:
        extra["is_done_candidate"] = False
    if "last_assistant_token_is_eos" in params:
        extra["last_assistant_token_is_eos"] = False
    if "max_matches" in params:
        extra["max_matches"] = k
    valid_tokens, _ = _speculative_sampling(ids, candidate_logits, k, new_logits, **extra)
    return [int(t) for t in valid_tokens.flatten().tolist()]


def test_transformers_speculative_sampling_is_lossless():
    pytest.importorskip("transformers")
    # Imported here, outside the check: importing transformers.generation.utils imports sympy
    # (through torch.distributed.tensor and torch.fx), whose module code draws once from `random`
    # (sympy.core.symbol: `Dummy._base_dummy_index = _prng.randint(10**6, 9*10**6)`). Made
    # inside the check, that draw is routed on the first call only, and the oracle rightly
    # answers NOT CHECKABLE (tests/test_oracle_checker.py: the lazy-import test).
    import transformers.generation.utils  # noqa: F401

    report = check_verifier(hf_chain_verifier)
    assert report.lossless, report.format()


def test_a_local_torch_verifier_is_checked_unchanged():
    """The adapters on a small torch chain verifier written here (transformers-free)."""

    def torch_verifier(inputs: ChainInputs) -> list[int]:
        p = torch.tensor(inputs.target_probs)
        q = torch.tensor(inputs.draft_probs)
        tokens = torch.tensor(inputs.draft_tokens)
        k = len(inputs.draft_tokens)
        ratio = p[torch.arange(k), tokens] / q[torch.arange(k), tokens]  # (K,)
        accepted = torch.rand_like(ratio) <= ratio
        n = int((~accepted).cumsum(0).eq(0).sum())
        law = p[n] if n == k else torch.clamp(p[n] - q[n], min=0)
        law = law / law.sum()
        nxt = torch.multinomial(law, 1)
        return [*inputs.draft_tokens[:n], int(nxt[0])]

    def step(rng: RandomSource) -> list[int]:
        with route_all(rng):
            return torch_verifier(inputs)

    report = check_verifier(torch_verifier)
    assert report.lossless, report.format()
    inputs = ChainInputs(
        target_probs=np.array([[0.5, 0.5], [0.25, 0.75]]),
        draft_probs=np.array([[1.0, 0.0]]),
        draft_tokens=(0,),
        target_logits=np.log(np.array([[0.5, 0.5], [0.25, 0.75]])),
    )
    assert exact_law(step) == {(0, 0): 0.125, (0, 1): 0.375, (1,): 0.5}


# --- the CLI helper --------------------------------------------------------------------------


def test_run_check_command_exit_codes_and_json():
    out = io.StringIO()
    assert run_check_command("casspec_ref.proof.replicas:reference_chain_verifier", stream=out) == 0
    assert "LOSSLESS" in out.getvalue()
    out = io.StringIO()
    code = run_check_command(
        "casspec_ref.proof.replicas:raw_bonus_replica", as_json=True, stream=out
    )
    assert code == 1
    data = json.loads(out.getvalue())
    assert data["lossless"] is False and data["minimal_counterexample"]["case"]
    for bad in [
        "no_colon",
        "casspec_ref.nope:fn",
        "casspec_ref.proof.replicas:nope",
        "casspec_ref:__doc__",
    ]:
        assert run_check_command(bad, stream=io.StringIO()) == 2


def test_cli_end_to_end():
    cmd = [sys.executable, "-m", "casspec_ref", "oracle", "check"]
    small = ["--family", "top_k"]  # the whole catalogue runs in-process in the tests above
    ok = subprocess.run(
        [*cmd, "casspec_ref.proof.replicas:reference_chain_verifier", *small], cwd=REPO
    )
    assert ok.returncode == 0
    bad = subprocess.run(
        [*cmd, "casspec_ref.proof.replicas:raw_bonus_replica", "--json", *small],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["lossless"] is False


# --- JSON test vectors -------------------------------------------------------------------------


def test_vectors_file_is_up_to_date():
    assert load_vectors() == json.loads(json.dumps(build_vectors()))


def test_vectors_replay():
    data = load_vectors(VECTORS_PATH)
    assert len(data["vectors"]) >= 5
    for vector in data["vectors"]:
        tree = tree_from_json(vector["root_token"], vector["nodes"])
        laws = [np.array([F(v) for v in row], dtype=object) for row in vector["target_probs"]]
        run = functools.partial(lambda t, ls, rng: verify_tree(t, ls, rng).emitted, tree, laws)
        got = exact_law(run, exact=True)
        want = {
            tuple(int(t) for t in key.split()): F(value)
            for key, value in vector["emitted_law"].items()
        }
        assert sum(want.values()) == 1
        assert got == want, vector["name"]


def test_load_vectors_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_vectors(tmp_path / "missing.json")
    wrong = tmp_path / "wrong.json"
    wrong.write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="format"):
        load_vectors(wrong)
