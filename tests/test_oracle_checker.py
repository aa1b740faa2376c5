"""The checker's honesty: adapters, hidden randomness, the contract, isolation, exit codes,
precision, filters, trees and loops (casspec_ref.proof.adapters and .checker)."""

from __future__ import annotations

import io
import json
import random
import subprocess
import sys
from fractions import Fraction as F
from pathlib import Path

import numpy as np
import pytest
import torch

from casspec_ref.proof import (
    ChainInputs,
    HiddenRandomnessError,
    UnfollowableDrawError,
    check_loop,
    check_tree_verifier,
    check_verifier,
    default_cases,
    exact_law,
    first_difference,
    lazy_uniform,
    rational_process,
    reference_chain_verifier,
    reference_tree_verifier,
    route_all,
    run_check_command,
)
from casspec_ref.sampling import RandomSource

REPO = Path(__file__).resolve().parents[1]
SMALL = {"families": ["random"], "vocab": [2, 3]}  # a few cases: enough for failures to show


def textbook(inputs: ChainInputs, rng: RandomSource) -> list[int]:
    return reference_chain_verifier(inputs, rng)


# --- adapters ----------------------------------------------------------------------------------


def test_lazy_uniform_allows_many_comparisons_of_one_draw():
    def fn(rng: RandomSource) -> int:
        u = lazy_uniform(rng)
        return 0 if u < F(1, 4) else 1 if u < F(1, 2) else 2 if u <= F(3, 4) else 3

    assert exact_law(fn, exact=True) == {0: F(1, 4), 1: F(1, 4), 2: F(1, 4), 3: F(1, 4)}


def test_adapters_give_exact_laws_of_torch_numpy_and_random_draws():
    def fn(rng: RandomSource) -> tuple[int, ...]:
        with route_all(rng):
            a = int(torch.multinomial(torch.tensor([0.25, 0.75]), 1))
            b = int(torch.rand(1)[0] < 0.1)
            c = int(np.random.default_rng(3).choice(3, p=[0.5, 0.5, 0.0]))
            d = int(random.random() >= 0.6)
            race = torch.tensor([0.2, 0.8]).div(torch.empty(2).exponential_()).argmax()
            return a, b, c, d, int(race)

    law = exact_law(fn)
    marginals = [{v: sum(p for k, p in law.items() if k[i] == v) for v in (0, 1)} for i in range(5)]
    assert marginals[0][1] == pytest.approx(0.75)
    assert marginals[1][1] == pytest.approx(0.1)
    assert marginals[2][1] == pytest.approx(0.5)
    assert marginals[3][1] == pytest.approx(0.4)
    assert marginals[4][1] == pytest.approx(0.8)
    assert sum(law.values()) == pytest.approx(1.0)


def test_reseeded_generators_repeat_their_draws():
    def fn(rng: RandomSource) -> tuple[int, int]:
        with route_all(rng):
            out = []
            for _ in range(2):
                gen = torch.Generator().manual_seed(7)
                out.append(int(torch.multinomial(torch.tensor([0.5, 0.5]), 1, generator=gen)))
            return out[0], out[1]

    assert exact_law(fn) == {(0, 0): 0.5, (1, 1): 0.5}


def test_unfollowable_uses_of_a_draw_are_named():
    def fn(rng: RandomSource) -> int:
        with route_all(rng):
            return int((torch.rand(2) * 2).sum() > 1)

    with pytest.raises(UnfollowableDrawError, match="torch mul"):
        exact_law(fn)

    def normal(rng: RandomSource) -> int:
        with route_all(rng):
            return int(torch.randn(1) > 0)

    with pytest.raises(UnfollowableDrawError, match="torch.randn"):
        exact_law(normal)


# --- hidden randomness -------------------------------------------------------------------------

_OUTSIDE = np.random.default_rng(0)  # created before the check: the adapters cannot see it


def hidden_numpy(inputs: ChainInputs) -> list[int]:
    p, q, drafts = inputs.target_probs, inputs.draft_probs, inputs.draft_tokens
    for i, x in enumerate(drafts):
        if _OUTSIDE.random() >= p[i, x] / q[i, x]:
            residual = np.maximum(p[i] - q[i], 0)
            return [*drafts[:i], int(torch.multinomial(torch.tensor(residual), 1))]
    return [*drafts, int(torch.multinomial(torch.tensor(p[-1]), 1))]


def draws_normal(inputs: ChainInputs) -> list[int]:
    """A draw the adapters cannot follow (a normal variate): NOT CHECKABLE, whatever its value."""
    return [int(torch.randn(()) > 0) % inputs.target_probs.shape[1]]


def test_hidden_randomness_is_not_checkable_never_a_verdict():
    report = check_verifier(hidden_numpy, **SMALL)
    assert report.verdict == "NOT CHECKABLE", report.format()
    assert report.error_case and report.error_case.startswith("random-V")
    assert "randomness the oracle does not see" in (report.error or "")
    assert report.exit_code == 3
    # The call site of the hidden draw is named: the line of `_OUTSIDE.random()`.
    line = next(
        i
        for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
        if "_OUTSIDE.random()" in text
    )
    assert f"call site: {__file__}:{line} in hidden_numpy" in (report.error or ""), report.error


def test_a_replay_that_stops_early_is_hidden_randomness():
    calls = []

    def fn(rng: RandomSource) -> int:
        calls.append(1)
        return int(rng.bernoulli(0.5)) if len(calls) == 1 else 0

    with pytest.raises(HiddenRandomnessError, match="stopped after 0 of the 1") as err:
        exact_law(fn)
    assert "first call" not in str(err.value)  # the replay was not the first call's repeat
    calls.clear()
    with pytest.raises(HiddenRandomnessError, match="stopped after 0 of the 1") as err:
        exact_law(fn, recheck=1)
    assert "this replayed the first call" in str(err.value)


def test_a_module_that_draws_when_lazily_imported_is_not_checkable_until_imported(tmp_path):
    """The pattern of transformers.generation.utils, which imports sympy, whose module code draws
    ``random.Random().randint(...)``: imported inside the checked call, that draw is made by the
    first call only. The oracle must refuse (never a verdict), name the draw and say what to do;
    once the module is imported before the check, the same verifier gets its verdict."""
    name = "oracle_lazy_import_probe"
    (tmp_path / f"{name}.py").write_text(
        "import random\n_prng = random.Random()\nBASE = _prng.randint(10**4, 9 * 10**4)\n"
    )

    def lazily_importing(inputs: ChainInputs, rng: RandomSource) -> list[int]:
        __import__(name)
        return reference_chain_verifier(inputs, rng)

    sys.path.insert(0, str(tmp_path))
    try:
        report = check_verifier(lazily_importing, **SMALL, timeout=None)  # a draw of 8e4 options
        assert report.verdict == "NOT CHECKABLE", report.format()
        assert "random.randrange/choice" in (report.error or "")
        assert "categorical/80001" in (report.error or "")
        assert "this replayed the first call" in (report.error or "")
        assert name in sys.modules  # the first call imported it
        report = check_verifier(lazily_importing, **SMALL)
        assert report.verdict == "LOSSLESS", report.format()
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop(name, None)


# --- the contract ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fn", "reason"),
    [
        (lambda inputs, rng: [], "returned 0 tokens"),
        (lambda inputs, rng: [*textbook(inputs, rng), 0], "tokens"),
        (lambda inputs, rng: [inputs.target_probs.shape[1]], "outside"),
        (lambda inputs, rng: "0", "not tokens"),
    ],
    ids=["empty", "bonus-twice", "out-of-range", "a-string"],
)
def test_contract_violations_are_reported_not_repaired(fn, reason):
    """A value outside the return convention is a contract error (exit 3), never NOT LOSSLESS,
    and the message names the convention and quotes the value."""
    report = check_verifier(fn, **SMALL)
    assert report.verdict == "CONTRACT ERROR" and report.exit_code == 3, report.format()
    assert report.violations and reason in report.violations[0]["reason"]
    assert report.counterexample["contract_violation"]["case"] == report.error_case
    assert "fn(inputs: ChainInputs) or fn(inputs, rng)" in (report.error or "")
    assert not report.failing_cases


# --- isolation and exit codes ------------------------------------------------------------------


def exits(inputs: ChainInputs, rng: RandomSource) -> list[int]:
    sys.exit(0)


def interrupts(inputs: ChainInputs, rng: RandomSource) -> list[int]:
    raise KeyboardInterrupt


def crashes(inputs: ChainInputs, rng: RandomSource) -> list[int]:
    return [int(inputs.draft_tokens[5])]  # IndexError on every case


def chatty(inputs: ChainInputs, rng: RandomSource) -> list[int]:
    print("accepted so far:", inputs.draft_tokens)
    return textbook(inputs, rng)


def hangs(inputs: ChainInputs, rng: RandomSource) -> list[int]:
    while True:
        pass


@pytest.mark.parametrize("fn", [exits, interrupts, crashes])
def test_the_checked_code_failing_is_exit_3_with_case_and_traceback(fn):
    report = check_verifier(fn, **SMALL)
    assert report.verdict == "CHECKED CODE FAILED" and report.exit_code == 3
    assert report.error_case == "random-V2-K1"
    assert report.traceback and fn.__name__ in report.traceback


def test_printing_cannot_break_the_json(capsys):
    out = io.StringIO()
    code = run_check_command(
        "test_oracle_checker:chatty", as_json=True, stream=out, families=["random"], vocab=[2]
    )
    assert code == 0
    data = json.loads(out.getvalue())
    assert data["verdict"] == "LOSSLESS" and data["checked_code_stdout_chars"] > 0
    assert "accepted so far" not in capsys.readouterr().out


def test_a_hanging_case_times_out():
    report = check_verifier(hangs, families=["random"], vocab=[2], timeout=0.5)
    assert report.verdict == "CHECKED CODE FAILED"
    assert "timed out" in (report.error or "") and report.error_case == "random-V2-K1"


def test_exit_codes_for_each_verdict():
    small = {"families": ["random"], "vocab": [2], "stream": io.StringIO()}
    replicas = "casspec_ref.proof.replicas"
    assert run_check_command(f"{replicas}:reference_chain_verifier", **small) == 0
    top_k = {"families": ["top_k"], "stream": io.StringIO()}
    assert run_check_command(f"{replicas}:raw_bonus_replica", **top_k) == 1
    assert run_check_command(f"{replicas}:nope", **small) == 2
    assert run_check_command(f"{replicas}:reference_chain_verifier", tolerance="x", **small) == 2
    assert run_check_command("test_oracle_checker:exits", **small) == 3
    assert run_check_command("test_oracle_checker:draws_normal", **small) == 3


def test_cli_tree_mode_end_to_end():
    cmd = [sys.executable, "-m", "casspec_ref", "oracle", "check", "--tree", "--json"]
    target = "casspec_ref.proof.replicas:reference_tree_verifier"
    done = subprocess.run([*cmd, target, "--vocab", "2"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["mode"] == "tree" and data["verdict"] == "LOSSLESS" and data["cases"] == 5


# --- precision ---------------------------------------------------------------------------------


def float_chain(inputs: ChainInputs, rng: RandomSource) -> list[int]:
    p = np.asarray(inputs.target_probs, dtype=np.float64)
    q = np.asarray(inputs.draft_probs, dtype=np.float64)
    for i, x in enumerate(inputs.draft_tokens):
        if not rng.bernoulli(min(1.0, p[i, x] / q[i, x])):
            residual = np.maximum(p[i] - q[i], 0.0)
            return [*inputs.draft_tokens[:i], rng.categorical(residual / residual.sum())]
    return [*inputs.draft_tokens, rng.categorical(p[-1])]


def test_exact_mode_refuses_float_code_and_runs_every_family():
    refused = check_verifier(float_chain, exact=True, families=["random"], vocab=[3])
    assert refused.verdict == "REFUSED" and refused.exit_code == 2
    assert "floats reached the random source" in (refused.error or "")
    exact = check_verifier(reference_chain_verifier, exact=True, vocab=[2, 3])
    assert exact.verdict == "LOSSLESS" and exact.worst_tv == 0
    assert {"temperature", "top_k", "top_p"} <= set(exact.families)


def test_rational_transforms_match_the_float_ones():
    raw = np.array([F(1, 2), F(1, 4), F(1, 8), F(1, 8)], dtype=object)
    assert list(rational_process(raw, F(1, 2))) == [F(16, 22), F(4, 22), F(1, 22), F(1, 22)]
    assert list(rational_process(raw, F(1), top_k=2)) == [F(2, 3), F(1, 3), 0, 0]
    assert list(rational_process(raw, F(1), top_p=F(7, 10))) == [F(2, 3), F(1, 3), 0, 0]
    with pytest.raises(ValueError, match="1/n"):
        rational_process(raw, F(2, 3))


def test_tolerance_names_its_allowed_values():
    with pytest.raises(ValueError, match="float32"):
        check_verifier(textbook, tolerance="float16")


# --- the catalogue -----------------------------------------------------------------------------


def top8_residual(inputs: ChainInputs, rng: RandomSource) -> list[int]:
    """A residual restricted to the 8 most likely tokens of p: invisible at V <= 8."""
    p, q, drafts = inputs.target_probs, inputs.draft_probs, inputs.draft_tokens
    for i, x in enumerate(drafts):
        if not rng.bernoulli(min(1.0, p[i, x] / q[i, x])):
            residual = np.maximum(p[i] - q[i], 0.0)
            residual[np.argsort(-p[i], kind="stable")[8:]] = 0.0
            return [*drafts[:i], rng.categorical(residual / residual.sum())]
    return [*drafts, rng.categorical(p[-1])]


def test_larger_vocabularies_catch_what_small_ones_cannot():
    names = [c.name for c in default_cases()]
    assert "random-V16-K1" in names and "top_k-V12-K1" in names
    small = check_verifier(top8_residual, vocab=[2, 3, 4])
    assert small.verdict == "LOSSLESS"
    report = check_verifier(top8_residual, vocab=[12, 16])
    assert report.verdict == "NOT LOSSLESS" and report.worst_tv > 1e-4


def test_filters_and_unknown_families():
    report = check_verifier(textbook, families=["greedy"], k=[2])
    assert report.n_cases == 2 and report.families == ["greedy"]
    with pytest.raises(ValueError, match="unknown chain families"):
        check_verifier(textbook, families=["nope"])
    assert check_verifier(textbook, vocab=[99]).verdict == "REFUSED"


def test_first_difference_names_the_position():
    want = {(0, 0): 0.25, (0, 1): 0.25, (1, 0): 0.25, (1, 1): 0.25}
    got = {(0, 0): 0.25, (0, 1): 0.25, (1, 0): 0.2, (1, 1): 0.3}
    diff = first_difference(got, want, 1e-9)
    assert diff is not None and diff["position"] == 2 and diff["after_tokens"] == [1]
    assert first_difference(want, want, 1e-9) is None


# --- trees and loops ---------------------------------------------------------------------------


def test_tree_reference_and_a_tree_bug():
    assert check_tree_verifier(reference_tree_verifier).verdict == "LOSSLESS"
    exact = check_tree_verifier(reference_tree_verifier, exact=True, vocab=[2])
    assert exact.verdict == "LOSSLESS" and exact.worst_tv == 0 and exact.n_cases == 5

    def stale_p(tree, rng):  # after a rejected sibling, the next one is tested against p
        node, out = 0, []
        while True:
            p = np.asarray(tree.target_probs[node], dtype=np.float64)
            for child in tree.children(node):
                x, q = tree.tokens[child], np.asarray(tree.draft_probs[child], dtype=np.float64)
                if rng.bernoulli(min(1.0, p[x] / q[x])):
                    out.append(x)
                    node = child
                    break
            else:
                residual = np.maximum(p - q, 0.0) if tree.children(node) else p
                return [*out, rng.categorical(residual / residual.sum())]

    report = check_tree_verifier(stale_p, families=["independent"])
    assert report.verdict == "NOT LOSSLESS"


def test_candidate_paths_format():
    seen = {}

    def spy(tree, rng):
        seen["tree"] = tree
        return reference_tree_verifier(tree, rng)

    check_tree_verifier(spy, families=["deterministic"], vocab=[3])
    tree = seen["tree"]
    for row, path in zip(tree.candidates, tree.retrieve_indices, strict=True):
        assert path[0] == 0
        for depth, token in enumerate(row):
            if token >= 0:
                assert tree.tokens[path[depth + 1]] == token
                assert tree.parents[path[depth + 1]] == path[depth]


def test_loop_with_the_oracle_rng_and_a_short_output():
    def ar_only(target, draft, prompt, max_new_tokens, temperature, rng):
        ids = list(prompt)
        for _ in range(max_new_tokens):
            logits = target(torch.tensor([ids]))[0, -1]
            ids.append(rng.categorical(torch.softmax(logits / temperature, -1).numpy()))
        return ids[len(prompt) :]

    assert check_loop(ar_only).verdict == "LOSSLESS"
    short = check_loop(lambda t, d, prompt, n, temp: [0])
    assert short.verdict == "CONTRACT ERROR" and "max_new_tokens" in short.violations[0]["reason"]


def test_loop_mode_from_the_command_helper():
    out = io.StringIO()
    assert run_check_command("oracle_gallery.loops:reseeding_loop", mode="loop", stream=out) == 1
    assert "first_difference" in out.getvalue() or "NOT LOSSLESS" in out.getvalue()
    code = run_check_command("oracle_gallery.loops:reseeding_loop", mode="loop", exact=True)
    assert code == 2


def test_unused_races_add_no_branches_and_views_are_refused():
    runs = []

    def fn(rng: RandomSource) -> int:
        with route_all(rng):
            probs = torch.tensor([[0.5, 0.5, 0.0], [0.1, 0.2, 0.7], [0.3, 0.3, 0.4]])
            tokens = probs.div(torch.empty(3).exponential_().unsqueeze(0)).argmax(dim=-1)
            return int(tokens[1])  # only the second row's race is used

    law = exact_law(fn, on_run=runs.append)
    assert law == pytest.approx({0: 0.1, 1: 0.2, 2: 0.7}) and len(runs) == 3

    def into_a_view(rng: RandomSource) -> int:
        with route_all(rng):
            q = torch.empty(2, 3)
            q[0].exponential_()
            return int(torch.tensor([0.5, 0.5, 0.0]).div(q[0]).argmax())

    with pytest.raises(UnfollowableDrawError, match="view"):
        exact_law(into_a_view)


def _unconditional_q_tree_verifier(inputs, rng):  # type: ignore[no-untyped-def]
    """A SpecInfer-style tree verifier that tests every sibling against the unconditional q,
    even for siblings drawn without replacement (the bug of EAGLE #74 / #110)."""
    node, out = 0, []
    while True:
        r = np.asarray(inputs.target_probs[node], dtype=np.float64)  # (V,)
        for child in inputs.children(node):
            x = inputs.tokens[child]
            q = np.asarray(inputs.draft_probs[child], dtype=np.float64)  # (V,)
            if rng.bernoulli(min(1.0, r[x] / q[x])):
                out.append(x)
                node = child
                break
            residual = np.maximum(r - q, 0.0)  # (V,)
            r = residual / residual.sum()
        else:
            return out + [rng.categorical(r)]


def test_default_tree_cases_catch_the_unconditional_q_bug() -> None:
    """The built-in without-replacement tree cases include V = 5, where the bug shows (with
    V = 2 the second sibling is forced and the bug cannot change the law)."""
    report = check_tree_verifier(_unconditional_q_tree_verifier, families=["without_replacement"])
    assert report.verdict == "NOT LOSSLESS", report
    assert report.failing_cases and all("V5" in c for c in report.failing_cases)
