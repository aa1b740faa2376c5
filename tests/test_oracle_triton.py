"""The oracle on Triton kernels: vLLM v1's convention (``--signature vllm-v1``), the kernels run in
Triton's interpreter with the draws carried through them (casspec_ref/proof/triton_draws.py).

The sampler checked is this project's own, in vLLM v1's layout (tests/triton_rejection.py), with
a gallery of planted one-line bugs; every verdict is exact (the enumeration), so none of these
tests can fail by chance. Triton is installed by ``make test``; without it this module is
skipped and pytest's summary names it.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

os.environ.setdefault("TRITON_INTERPRET", "1")
triton = pytest.importorskip("triton", reason="triton is not installed: no Triton oracle test ran")
tl = pytest.importorskip("triton.language")

sys.path.insert(0, str(Path(__file__).parent))
import triton_rejection  # noqa: E402

from casspec_ref.proof import triton_draws  # noqa: E402
from casspec_ref.proof.cases import CheckCase, default_cases  # noqa: E402
from casspec_ref.proof.checker import check_verifier  # noqa: E402


def _cases(*names: str) -> list[CheckCase]:
    by_name = {c.name: c for c in default_cases()}
    return [by_name[n] for n in names]


def _check(fn, cases):  # type: ignore[no-untyped-def]
    return check_verifier(fn, cases=cases, signature="vllm-v1")


# ------------------------------------------------------------------ marks in memory
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_a_mark_names_its_entry_and_a_plain_value_names_none(dtype: type) -> None:
    indices = np.array([0, 1, 7, 65535])
    marks = triton_draws.encode(indices, np.dtype(dtype))
    assert marks.dtype == dtype
    assert triton_draws.decode(marks).tolist() == indices.tolist()
    plain = np.array([0, 1, -1, 5], dtype=dtype)
    assert triton_draws.decode(plain) is None
    if np.dtype(dtype).kind == "f":  # a NaN numpy makes is not a mark
        assert triton_draws.decode(np.array([np.nan, 1.0], dtype=dtype)) is None


def test_a_float_mark_survives_casts_between_float32_and_float64() -> None:
    marks = triton_draws.encode(np.array([3, 4096]), np.dtype(np.float64))
    assert triton_draws.decode(marks.astype(np.float32)).tolist() == [3, 4096]
    assert triton_draws.decode(marks.astype(np.float32).astype(np.float64)).tolist() == [3, 4096]
    with_torch = torch.from_numpy(marks).float().double().numpy()
    assert triton_draws.decode(with_torch).tolist() == [3, 4096]


def test_a_marked_operand_beside_keyword_arguments_is_not_passed_through() -> None:
    """The builder wrapper looks for marks in every argument: a marked positional operand of a
    call that also has keywords is refused, never computed with as if it were a number."""
    from triton.runtime.interpreter import TensorHandle

    from casspec_ref.proof.adapters import Draws, UnfollowableDrawError

    book = Draws(None)
    follow = triton_draws._Follow(book, TensorHandle)
    marked = TensorHandle(triton_draws.encode(np.array([0]), np.dtype(np.float32)), tl.float32)
    plain = TensorHandle(np.array([1.0], dtype=np.float32), tl.float32)

    def add(builder, lhs, rhs, **kwargs):  # type: ignore[no-untyped-def]
        return TensorHandle(lhs.data + rhs.data, lhs.dtype)

    assert follow.call("create_fadd", add, None, (plain, plain), {"flag": 1}).data[0] == 2.0
    with pytest.raises(UnfollowableDrawError, match="fadd on a random draw"):
        follow.call("create_fadd", add, None, (marked, plain), {"flag": 1})


# ------------------------------------------------------------------ the sampler and its bugs
def test_the_sampler_is_lossless_on_every_path() -> None:
    """Random rows, zeros in both laws, a top-k target, greedy rows (the greedy kernel, the
    bonus token a pending draw) and point-mass drafts (no draft_probs, vLLM's n-gram path)."""
    cases = _cases("random-V3-K2", "zeros-V3-K2", "top_k-V4-K2", "greedy-V3-K2", "random-V3-K3")
    cases += _cases("point_mass-V3-K2", "point_mass-V4-K3")
    report = _check(triton_rejection.rejection_sample, cases)
    assert report.verdict == "LOSSLESS", (report.error, report.traceback)
    assert report.worst_tv < 1e-12


@pytest.mark.parametrize(
    "variation",
    [{"pad_score": -0.0}, {"clamp": False}],
    ids=["lanes past the vocabulary at -0.0", "residual not clamped"],
)
def test_variations_that_are_not_bugs_are_lossless(variation: dict) -> None:
    """Lanes past the vocabulary at -0.0 (``p / q`` with q loaded as -inf there) instead of -inf,
    and the residual p - q raced without its clamp: a score <= 0 never beats a positive one, and
    a rejected draft leaves some token with p > q. No false alarm."""
    fn = functools.partial(triton_rejection.rejection_sample, **variation)
    report = _check(fn, _cases("random-V3-K2", "zeros-V3-K2", "point_mass-V3-K2"))
    assert report.verdict == "LOSSLESS", (report.error, report.traceback)


@pytest.mark.parametrize(
    "bug", ["residual_from_p", "accept_without_q", "bonus_from_q", "shared_uniform"]
)
def test_each_planted_bug_is_not_lossless(bug: str) -> None:
    fn = functools.partial(triton_rejection.rejection_sample, bug=bug)
    report = _check(fn, _cases("random-V3-K2"))
    assert report.verdict == "NOT LOSSLESS", (bug, report)
    assert report.worst_tv > 1e-3


def test_a_placeholder_in_the_middle_is_a_contract_error() -> None:
    fn = functools.partial(triton_rejection.rejection_sample, bug="placeholder_off_by_one")
    report = _check(fn, _cases("random-V3-K2"))
    assert report.verdict == "CONTRACT ERROR", report
    assert "after the first -1" in str(report.violations)


@pytest.mark.parametrize("variant", ["vllm-v1-seeded", "vllm-v1-mixed"])
def test_the_seeded_and_mixed_paths_are_lossless(variant: str) -> None:
    """``vllm-v1-seeded``: a random request with its own generator draws its uniforms and
    exponentials into slices of the batch's tensors (``u[a:b].uniform_(generator=g)``,
    ``e[i].exponential_(generator=g)``); ``vllm-v1-mixed``: both kernels run and the per-request
    greedy test decides."""
    cases = _cases("random-V3-K2", "zeros-V3-K2", "greedy-V3-K2", "point_mass-V3-K2")
    report = check_verifier(triton_rejection.rejection_sample, cases=cases, signature=variant)
    assert report.verdict == "LOSSLESS", (report.error, report.traceback)


def test_a_bug_of_the_mixed_path_is_seen_by_the_mixed_variant_only() -> None:
    """A greedy kernel that also writes random requests' rows leaves its tokens after a random
    request's shorter output, which only a batch mixing greedy and random requests runs."""
    fn = functools.partial(triton_rejection.rejection_sample, bug="greedy_kernel_on_every_request")
    cases = _cases("random-V3-K1")
    assert check_verifier(fn, cases=cases, signature="vllm-v1").verdict == "LOSSLESS"
    report = check_verifier(fn, cases=cases, signature="vllm-v1-mixed")
    assert report.verdict == "CONTRACT ERROR", report
    assert "not a prefix of the drafts" in str(report.violations)


def test_a_bug_is_seen_on_the_seeded_path() -> None:
    fn = functools.partial(triton_rejection.rejection_sample, bug="shared_uniform")
    report = check_verifier(fn, cases=_cases("random-V3-K2"), signature="vllm-v1-seeded")
    assert report.verdict == "NOT LOSSLESS", report


# ------------------------------------------------------------------ RejectionSampler.forward
_FORMS = [triton_rejection.RejectionSampler, triton_rejection.RejectionSamplerBonusIn]


@pytest.mark.parametrize("form", _FORMS, ids=["bonus by its sampler", "bonus passed in"])
def test_both_rejection_sampler_forms_are_lossless_from_logits(form: type) -> None:
    """The class is built as vLLM builds it (the current form with the oracle's bonus sampler)
    and its ``forward`` is called with logits: judged at the float32 tolerance by default, as
    the report says; this sampler computes in float64, so float64's tolerance passes too."""
    cases = _cases("random-V3-K2", "greedy-V3-K2", "point_mass-V3-K2", "top_k-V4-K2")
    report = check_verifier(form, cases=cases, signature="vllm-v1")
    assert report.verdict == "LOSSLESS", (report.error, report.traceback)
    assert report.tolerance == 1e-5 and any("float32" in n for n in report.notes), report.notes
    strict = check_verifier(form, cases=cases, signature="vllm-v1", tolerance="float64")
    assert strict.verdict == "LOSSLESS" and strict.tolerance == 1e-9, strict


@pytest.mark.parametrize(
    ("form", "bug"),
    [
        (triton_rejection.RejectionSampler, "bonus_from_a_draft_row"),
        (triton_rejection.RejectionSampler, "logits_as_probs"),
        (triton_rejection.RejectionSamplerBonusIn, "logits_as_probs"),
    ],
)
def test_each_planted_forward_bug_is_not_lossless(form: type, bug: str) -> None:
    """The bonus drawn from a draft row's logits (the oracle's sampler draws from the rows it is
    handed), and logits passed on as probabilities."""
    fn = functools.partial(form, bug=bug)
    report = check_verifier(fn, cases=_cases("random-V3-K2"), signature="vllm-v1")
    assert report.verdict == "NOT LOSSLESS", (bug, report)
    assert report.worst_tv > 1e-3


def test_the_command_line_checks_a_rejection_sampler_class(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from casspec_ref.proof.checker import run_check_command

    monkeypatch.chdir(Path(__file__).parent)
    code = run_check_command(
        "triton_rejection:RejectionSampler",
        signature="vllm-v1-seeded",
        families=["random", "point_mass"],
        vocab=[3],
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "LOSSLESS" in out and "tolerance 1.0e-05" in out and "[signature vllm-v1-seeded]" in out


# ------------------------------------------------------------------ what is not followed
@triton.jit
def _log_kernel(out_ptr, u_ptr):
    tl.store(out_ptr, tl.log(tl.load(u_ptr)))


@triton.jit
def _sum_kernel(out_ptr, e_ptr, N: tl.constexpr):
    tl.store(out_ptr, tl.sum(tl.load(e_ptr + tl.arange(0, N)), axis=0))


@triton.jit
def _atomic_kernel(out_ptr, u_ptr):
    tl.atomic_add(out_ptr, tl.load(u_ptr))


def _verifier_calling(kernel_call):  # type: ignore[no-untyped-def]
    def verify(p, q, draft_tokens):  # type: ignore[no-untyped-def]
        kernel_call(p.shape[-1])
        return [int(draft_tokens[0])]

    return verify


@pytest.mark.parametrize(
    ("name", "launch", "construct"),
    [
        (
            "log",
            lambda v: _log_kernel[(1,)](
                torch.empty(1, dtype=torch.float64), torch.rand(1, dtype=torch.float64)
            ),
            "log",
        ),
        (
            "sum",
            lambda v: _sum_kernel[(1,)](torch.empty(1), torch.empty(4).exponential_(), N=4),
            "reduction",
        ),
        (
            "atomic",
            lambda v: _atomic_kernel[(1,)](
                torch.zeros(1, dtype=torch.float64), torch.rand(1, dtype=torch.float64)
            ),
            "atomic",
        ),
    ],
)
def test_a_construct_the_oracle_does_not_follow_is_not_checkable_and_named(
    name: str,
    launch,
    construct: str,  # type: ignore[no-untyped-def]
) -> None:
    report = check_verifier(
        _verifier_calling(launch), cases=_cases("random-V2-K1"), signature="plain"
    )
    assert report.verdict == "NOT CHECKABLE", (name, report)
    assert construct in report.error and "Triton" in report.error, report.error


def test_a_kernel_outside_the_interpreter_is_not_checkable() -> None:
    from triton.runtime.jit import JITFunction

    compiled = JITFunction(_log_kernel.fn)

    def verify(p, q, draft_tokens):  # type: ignore[no-untyped-def]
        compiled[(1,)](torch.empty(1), torch.rand(1))
        return [int(draft_tokens[0])]

    report = check_verifier(verify, cases=_cases("random-V2-K1"), signature="plain")
    assert report.verdict == "NOT CHECKABLE", report
    assert "TRITON_INTERPRET=1" in report.error


def test_triton_imported_before_the_switch_is_not_checkable_and_says_so() -> None:
    """triton's library (``tl.argmax``) is made when triton is imported: a process that imported
    it before TRITON_INTERPRET=1 cannot run the kernels in the interpreter, and is told why."""
    code = (
        "import os, sys\n"
        "os.environ.pop('TRITON_INTERPRET', None)\n"
        "import triton\n"
        "os.environ['TRITON_INTERPRET'] = '1'\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "import triton_rejection\n"
        "from casspec_ref.proof.checker import check_verifier\n"
        "r = check_verifier(triton_rejection.rejection_sample, signature='vllm-v1',\n"
        "                   families=['random'], vocab=[2])\n"
        "print(r.verdict, r.error)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.stdout.startswith("NOT CHECKABLE"), done.stdout + done.stderr[-2000:]
    assert "before TRITON_INTERPRET=1 was set" in done.stdout
