"""The checker: an honest verdict on someone else's chain verifier, tree verifier or whole loop.

For every case of the catalogue (`casspec_ref.proof.cases`) the checker computes the exact law
of what the checked code produces and compares it with the law of plain autoregressive decoding
(`ar_law`, computed by direct recursion):

- a chain verifier (`check_verifier`): draft K tokens from q, call the verifier, finish with
  plain AR sampling up to K + 1 tokens;
- a tree verifier (`check_tree_verifier`): draft a tree (independent siblings, siblings without
  replacement, deterministic top-k children, mixed draft levels), call the verifier, finish up to
  depth + 1 tokens;
- a whole loop (`check_loop`): the user's generate function runs, with its own drafter and
  verifier, on the toy models for as many steps as it needs; the law of its first M tokens is
  compared, so drafter-side and cross-step bugs (a re-seeded generator, a wrong q) are seen.

The checked code is run as it is written: its torch/numpy/`random` draws are routed to the
enumeration by `casspec_ref.proof.adapters`, its calling convention is one of
`casspec_ref.proof.signatures`, and TorchScript or torch.compile in its reach is found by
`casspec_ref.proof.reach`. The verdict is one of LOSSLESS, NOT LOSSLESS (the law differs by more
than the tolerance), REFUSED (``exact`` mode on code whose probabilities are floats, or no case
selected), and four that give no verdict on losslessness: CONTRACT ERROR (a signature or a
returned value outside the calling convention), NOT CHECKABLE (randomness the oracle does not
see, with its call site), CHECKED CODE FAILED (it raised, exited, or its first call timed out:
the case and the traceback are reported) and INCONCLUSIVE (the oracle's own budget ran out, or a
total variation lies within the pruning bound of the tolerance). The checked code cannot change
the verdict by exiting, by a KeyboardInterrupt or by printing: its stdout is captured. Each case
has a timeout.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import inspect
import io
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol, TextIO

import numpy as np
import torch

from casspec_ref.base.exact_attention import threads_at
from casspec_ref.proof import vllm_v1
from casspec_ref.proof.adapters import Draws, route_all
from casspec_ref.proof.cases import (
    CHAIN_FAMILIES,
    LOOP_FAMILIES,
    TREE_FAMILIES,
    CheckCase,
    LoopCase,
    TreeCase,
    default_cases,
    loop_cases,
    select_cases,
    tree_cases,
)
from casspec_ref.proof.enumerate import (
    EnumeratingSource,
    EnumerationBudgetError,
    EnumerationStats,
    HiddenRandomnessError,
    Law,
    NotCheckableError,
    exact_law,
    total_variation,
)
from casspec_ref.proof.harness import ToyLM, ar_law, draft_tree
from casspec_ref.proof.reach import (
    TORCHSCRIPT_SWITCH,
    eager_compiled,
    first_divergence,
    hidden_paths,
    import_without_torchscript,
)
from casspec_ref.proof.signatures import (
    SIGNATURES,
    ContractViolation,
    Signature,
    call_chain,
    get_signature,
    help_text,
    prepare,
    tokens_of,
)
from casspec_ref.sampling import RandomSource
from casspec_ref.tree import DraftTree

#: Named tolerances on the total variation. float32 code computes p/q and residuals with
#: relative errors near 6e-8 per operation, which shifts a law by far less than 1e-5, while
#: every algorithmic bug measured in the gallery moves it by more than 1e-4 (docs/oracle.md).
TOLERANCE_PRESETS = {"float64": 1e-9, "float32": 1e-5, "exact": 0.0}
DEFAULT_TIMEOUT = 60.0

VERDICTS = (
    "LOSSLESS",
    "NOT LOSSLESS",
    "REFUSED",
    "CONTRACT ERROR",
    "NOT CHECKABLE",
    "CHECKED CODE FAILED",
    "INCONCLUSIVE",
)
#: 0 lossless, 1 not lossless, 2 usage, 3 no verdict on losslessness (and why).
EXIT_CODES = {
    "LOSSLESS": 0,
    "NOT LOSSLESS": 1,
    "REFUSED": 2,
    "CONTRACT ERROR": 3,
    "NOT CHECKABLE": 3,
    "CHECKED CODE FAILED": 3,
    "INCONCLUSIVE": 3,
}

#: An enumeration branch whose probability is below tolerance * PRUNE_FACTOR is not run: the
#: total mass pruned in a case bounds the error of its total variation by half that mass, which
#: the report states and which the verdict takes into account.
PRUNE_FACTOR = 1e-6

#: A failing total variation below this, on code that computes in float32 or bfloat16, is
#: reported as probably rounding, with the float32 preset suggested.
ROUNDING_HINT_TV = 1e-6


# ---------------------------------------------------------------------------------------------
# What the checked code receives
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChainInputs:
    """What a third-party chain verifier receives (K drafted tokens, vocabulary V).

    Attributes:
        target_probs: (K+1, V) processed target law p after each drafted prefix (row i: the law
            of the token after i drafted tokens; row K gives the bonus token).
        draft_probs: (K, V) the processed law q each drafted token was drawn from.
        draft_tokens: the K drafted tokens.
        target_logits: (K+1, V) raw target logits such that
            ``target_law(target_logits, temperature, top_k, top_p) == target_probs``, for
            implementations that process logits themselves. In exact mode (Fractions),
            they are log of the raw law in float64.
        temperature, top_k, top_p: the sampling settings of the target.
    """

    target_probs: np.ndarray
    draft_probs: np.ndarray
    draft_tokens: tuple[int, ...]
    target_logits: np.ndarray
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0


class ChainVerifier(Protocol):
    """The signature `check_verifier` needs: ``fn(inputs, rng) -> emitted tokens`` (or
    ``fn(inputs)`` for code that draws with torch, numpy or `random`).

    Return the tokens the step commits: the accepted prefix of ``inputs.draft_tokens``, then the
    residual sample or bonus token (1 to K + 1 tokens).
    """

    def __call__(self, inputs: ChainInputs, rng: RandomSource) -> Sequence[int]: ...


@dataclass(frozen=True)
class TreeInputs:
    """What a third-party tree verifier receives: a drafted tree of N nodes, node 0 the root.

    Attributes:
        tokens: (N,) node tokens; ``tokens[0]`` is the last committed token (the root).
        parents: (N,) parent of each node, ``parents[0] == -1``; parents come before children.
        rules: (N,) how node i was proposed, one of "independent" (drawn from its own
            ``draft_probs[i]``, with replacement), "without_replacement" (drawn in order from
            ``draft_probs[i]``, the parent's shared q, earlier siblings removed), "deterministic"
            (chosen without randomness: top-k, prompt lookup); None for the root.
        draft_probs: (N,) the law node i was drawn from (None for deterministic nodes and root).
        target_probs: (N, V) the processed target law after the path to node i.
        candidates: (P, D) EAGLE/Medusa-style candidate paths, one per leaf: the tokens from the
            root's child down to the leaf, padded with -1 (D is the tree depth).
        retrieve_indices: (P, D + 1) the node index of each position of each candidate path,
            the root (0) first, padded with -1.
        tree: the same tree as a `casspec_ref.tree.DraftTree`.
    """

    tokens: tuple[int, ...]
    parents: tuple[int, ...]
    rules: tuple[str | None, ...]
    draft_probs: tuple[np.ndarray | None, ...]
    target_probs: np.ndarray
    candidates: np.ndarray
    retrieve_indices: np.ndarray
    tree: DraftTree

    def children(self, node: int) -> list[int]:
        """The children of ``node``, in the order they were drafted."""
        return [i for i, p in enumerate(self.parents) if p == node]

    @property
    def depth(self) -> int:
        return int(self.candidates.shape[1])

    @classmethod
    def from_tree(cls, tree: DraftTree, target_probs: Sequence[np.ndarray]) -> TreeInputs:
        n = len(tree)
        rules: list[str | None] = [None]
        for i in range(1, n):
            rule = tree.child_rule(tree.parent(i))
            rules.append(None if rule is None else rule.value)
        leaves = [i for i in range(n) if not tree.children(i)]
        depth = tree.max_depth
        paths = [[0, *tree.path_to(leaf)] if leaf else [0] for leaf in leaves]  # root first
        retrieve = np.full((len(paths), depth + 1), -1, dtype=np.int64)
        candidates = np.full((len(paths), depth), -1, dtype=np.int64)
        for row, path in enumerate(paths):
            retrieve[row, : len(path)] = path
            candidates[row, : len(path) - 1] = [tree.token(i) for i in path[1:]]
        dtype = object if isinstance(target_probs[0][0], Fraction) else np.float64
        return cls(
            tokens=tuple(tree.token(i) for i in range(n)),
            parents=tuple(tree.parent(i) for i in range(n)),
            rules=tuple(rules),
            draft_probs=tuple(tree.draft_probs(i) for i in range(n)),
            target_probs=np.stack([np.asarray(p, dtype=dtype) for p in target_probs]),
            candidates=candidates,
            retrieve_indices=retrieve,
            tree=tree,
        )


class ToyModel:
    """The oracle's toy language model as a Hugging Face-style causal LM, for `check_loop`.

    ``model(input_ids)`` takes a (batch, T) integer tensor and returns float64 logits of shape
    (batch, T, V): ``logits[b, t]`` are the raw logits of the token after ``input_ids[b, :t+1]``.
    The law plain sampling draws from is ``softmax(logits / temperature)``. ``vocab_size`` is V.
    """

    def __init__(self, lm: ToyLM) -> None:
        self.lm = lm
        self.vocab_size = lm.vocab_size

    def __call__(self, input_ids: Any) -> torch.Tensor:
        ids = torch.as_tensor(input_ids)
        if ids.ndim == 1:
            ids = ids[None]
        rows = []
        for row in ids.tolist():
            rows.append(
                [self.lm.raw_logits(tuple(int(t) for t in row[: t + 1])) for t in range(len(row))]
            )
        return torch.tensor(np.array(rows, dtype=np.float64))  # (B, T, V)


# ---------------------------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------------------------


@dataclass
class CheckReport:
    """The verdict of a check, with what it is based on.

    Attributes (JSON key in brackets where it differs, see `JSON_KEYS`):
        lossless: True only for the verdict LOSSLESS.
        worst_tv [worst_total_variation]: the largest total variation of a case's law from
            plain decoding, over the cases that ran.
        worst_case: the name of that case ("" when no case ran).
        n_cases [cases]: the number of cases selected.
        tolerance: the tolerance on the total variation (0 in exact mode).
        failing_cases: the cases whose law differs by more than the tolerance.
        counterexample [minimal_counterexample]: the first failing case (cases run smallest
            first) with its laws at the root, ``first_difference`` and ``worst_outcomes``; or,
            for a contract error, the case and ``contract_violation``; None otherwise.
        verdict: LOSSLESS, NOT LOSSLESS, REFUSED, CONTRACT ERROR, NOT CHECKABLE, CHECKED CODE
            FAILED or INCONCLUSIVE (`VERDICTS`).
        mode: chain, tree or loop.
        exact: whether the laws were rational (Fractions).
        families: the case families that ran.
        violations [contract_violations]: the contract errors, each with case, output, reason.
        error: why there is no verdict on losslessness (None with a verdict).
        error_case: the case the error happened in.
        traceback: the checked code's traceback when it raised.
        stdout_chars [checked_code_stdout_chars]: characters the checked code printed (captured).
        seconds: the wall time of the check.
        notes: remarks that do not change the verdict (rounding, routed TorchScript, pruning).
        signature: the calling convention the checked code was called with.
        pruned_mass: the largest probability mass, over the cases, of the enumeration branches
            not run because their probability was below ``prune_below``; each case's total
            variation is known to within half its pruned mass, and the verdict allows for it.
        prune_below: the branch probability below which a branch is not run (0: none pruned).
    """

    lossless: bool
    worst_tv: float
    worst_case: str
    n_cases: int
    tolerance: float
    failing_cases: list[str]
    counterexample: dict[str, Any] | None
    verdict: str = ""
    mode: str = "chain"
    exact: bool = False
    families: list[str] = field(default_factory=list)
    violations: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None
    error_case: str | None = None
    traceback: str | None = None
    stdout_chars: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    signature: str = "chain"
    pruned_mass: float = 0.0
    prune_below: float = 0.0

    def __post_init__(self) -> None:
        if not self.verdict:
            self.verdict = "LOSSLESS" if self.lossless else "NOT LOSSLESS"

    @property
    def exit_code(self) -> int:
        """0 lossless, 1 not lossless, 2 refused (usage), 3 no verdict: a contract error, not
        checkable, the checked code failed, or inconclusive (the oracle's budget ran out)."""
        return EXIT_CODES[self.verdict]

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-ready data, keyed by `JSON_KEYS` (plus ``exit_code``)."""
        out: dict[str, Any] = {key: getattr(self, attr) for attr, key in JSON_KEYS.items()}
        out["seconds"] = round(self.seconds, 3)
        out["exit_code"] = self.exit_code
        return out

    def format(self) -> str:
        exact = ", exact" if self.exact else ""
        if self.verdict in ("LOSSLESS", "NOT LOSSLESS"):
            head = (
                f"{self.verdict}: {self.n_cases} {self.mode} cases, worst total variation "
                f"{self.worst_tv:.3e} (case {self.worst_case or '-'}), tolerance "
                f"{self.tolerance:.1e}{exact}"
            )
        else:
            head = f"{self.verdict} (no verdict on losslessness; {self.mode} check{exact})"
        if self.signature != self.mode:
            head += f" [signature {self.signature}]"
        lines = [head, f"families: {', '.join(self.families)}"]
        if self.error:
            lines.append(f"{self.error_case}: {self.error}" if self.error_case else self.error)
        if self.traceback:
            lines.append(self.traceback.rstrip())
        if self.counterexample is not None:
            if self.failing_cases:
                lines.append(f"failing cases: {', '.join(self.failing_cases)}")
            label = "case" if self.verdict == "CONTRACT ERROR" else "minimal counterexample"
            lines.append(f"{label}:")
            lines.append(json.dumps(self.counterexample, indent=2, default=str))
        if self.pruned_mass:
            lines.append(
                f"pruned: branches of probability below {self.prune_below:.0e} were not run; "
                f"at most {self.pruned_mass:.1e} of a case's mass, so each total variation is "
                f"exact to within {self.pruned_mass / 2:.1e}"
            )
        lines += self.notes
        return "\n".join(lines)


#: Attribute of `CheckReport` -> its key in `CheckReport.to_json` (tests pin this mapping).
JSON_KEYS = {
    "verdict": "verdict",
    "lossless": "lossless",
    "mode": "mode",
    "signature": "signature",
    "exact": "exact",
    "worst_tv": "worst_total_variation",
    "worst_case": "worst_case",
    "n_cases": "cases",
    "families": "families",
    "tolerance": "tolerance",
    "failing_cases": "failing_cases",
    "violations": "contract_violations",
    "counterexample": "minimal_counterexample",
    "error": "error",
    "error_case": "error_case",
    "traceback": "traceback",
    "stdout_chars": "checked_code_stdout_chars",
    "seconds": "seconds",
    "notes": "notes",
    "pruned_mass": "pruned_mass",
    "prune_below": "prune_below",
}


# ---------------------------------------------------------------------------------------------
# Isolation
# ---------------------------------------------------------------------------------------------


class CheckedCodeFailed(Exception):
    """The checked code raised (SystemExit and KeyboardInterrupt included)."""

    def __init__(self, error: BaseException, trace: str) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.trace = trace


class CaseTimeout(BaseException):
    """A case ran past its timeout (a BaseException, so that ``except Exception`` in the checked
    code does not swallow it)."""


@contextlib.contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    """Raise `CaseTimeout` in the main thread after ``seconds`` (no limit elsewhere)."""
    if not seconds or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise CaseTimeout(f"timed out after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _Sandbox:
    """Calls the checked code with stdout captured and every failure turned into
    `CheckedCodeFailed` (our own errors pass through)."""

    def __init__(self) -> None:
        self.stdout_chars = 0

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        buffer = io.StringIO()
        try:
            with contextlib.redirect_stdout(buffer):
                return fn(*args, **kwargs)
        except (NotCheckableError, CaseTimeout, ContractViolation):
            raise
        except BaseException as err:  # SystemExit, KeyboardInterrupt: the code failed
            raise CheckedCodeFailed(err, traceback.format_exc()) from None
        finally:
            self.stdout_chars += len(buffer.getvalue())


# ---------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------

Case = CheckCase | TreeCase | LoopCase
Step = Callable[[RandomSource], tuple[int, ...]]


def _run_cases(
    mode: str,
    cases: Sequence[Case],
    build: Callable[[Case, _Sandbox], tuple[Step, Law]],
    *,
    exact: bool,
    tolerance: float | str | None,
    timeout: float | None,
    adapters: bool,
    max_paths: int,
    signature: Signature | None = None,
    start: Callable[[], None] | None = None,
    target: Any = None,
) -> CheckReport:
    tol = _tolerance(tolerance, exact)
    sandbox = _Sandbox()
    started = time.perf_counter()
    families = list(dict.fromkeys(c.family for c in cases))
    report = CheckReport(True, 0.0, "", len(cases), tol, [], None, mode=mode, exact=exact)
    report.families = families
    report.signature = signature.name if signature is not None else mode
    report.prune_below = 0.0 if exact else tol * PRUNE_FACTOR
    if not cases:
        return _finish(report, "REFUSED", "no case matches the filters", None, sandbox, started)
    if start is not None:
        try:
            start()
        except ContractViolation as violation:
            return _contract_error(report, None, violation, sandbox, started)
    hidden = hidden_paths(target) if target is not None and adapters else []
    scripted = [h for h in hidden if h.kind == "TorchScript"]
    if scripted:
        text = (
            "not checkable: randomness the oracle does not see: "
            + "; ".join(h.describe() for h in scripted)
            + " runs in TorchScript, whose draws bypass the adapters. Import the checked code "
            f"with TorchScript disabled: {TORCHSCRIPT_SWITCH} in the environment before torch is "
            "imported, or casspec_ref.proof.import_without_torchscript(MODULE); the command "
            "line (oracle check) does this itself"
        )
        return _finish(report, "NOT CHECKABLE", text, None, sandbox, started)
    compiled = [h for h in hidden if h.kind == "torch.compile"]
    if compiled:
        report.notes.append(
            "routed: " + "; ".join(h.describe() for h in compiled) + " ran eagerly "
            "(torch._dynamo.config.disable) so that its draws reach the oracle"
        )
    routes: contextlib.AbstractContextManager[Draws | None] = (
        route_all(None) if adapters else contextlib.nullcontext()  # type: ignore[arg-type]
    )
    eager = eager_compiled() if compiled else contextlib.nullcontext()
    low_precision: set[str] = set()
    # One intra-op thread: the cases' tensors hold a few numbers, so more threads only add
    # synchronisation, which on a busy machine costs more than the work.
    with routes as book, threads_at(1), eager:
        for case in cases:
            verdict = _run_case(case, build, report, sandbox, book, timeout, max_paths)
            if book is not None:
                low_precision |= book.low_precision
            if verdict is not None:
                name, error, case_name, trace = verdict
                return _finish(report, name, error, case_name, sandbox, started, trace)
    if report.failing_cases:
        _rounding_note(report, low_precision)
        return _finish(report, "NOT LOSSLESS", None, None, sandbox, started)
    if report.verdict == "INCONCLUSIVE":
        return _finish(report, "INCONCLUSIVE", report.error, report.error_case, sandbox, started)
    return _finish(report, "LOSSLESS", None, None, sandbox, started)


def _run_case(
    case: Case,
    build: Callable[[Case, _Sandbox], tuple[Step, Law]],
    report: CheckReport,
    sandbox: _Sandbox,
    book: Draws | None,
    timeout: float | None,
    max_paths: int,
) -> tuple[str, str, str, str | None] | None:
    """Run one case into ``report``; a (verdict, error, case, traceback) that ends the check."""
    step, want = build(case, sandbox)

    def run(source: RandomSource) -> tuple[int, ...]:
        if book is not None:
            book.reset(source)
        return step(source)

    floats: list[str] = []

    def on_run(source: EnumeratingSource) -> None:
        if source.float_inputs and not floats:
            floats.append(source.first_float_draw)

    stats = EnumerationStats()
    try:
        with _deadline(timeout):
            got = exact_law(
                run,
                exact=report.exact,
                recheck=8,
                on_run=on_run,
                max_paths=max_paths,
                prune_below=report.prune_below,
                stats=stats,
            )
    except ContractViolation as violation:
        _contract_error(report, case, violation, sandbox, None)
        return ("CONTRACT ERROR", report.error or "", case.name, None)
    except HiddenRandomnessError as err:
        return ("NOT CHECKABLE", _located(err, run, report.exact), case.name, None)
    except NotCheckableError as err:
        return ("NOT CHECKABLE", str(err), case.name, None)
    except CheckedCodeFailed as err:
        text = f"the checked code raised {err}"
        if report.exact:
            text += (
                " (exact mode hands it Fractions in object arrays; float code, torch code "
                "included, is checked without exact)"
            )
        return ("CHECKED CODE FAILED", text, case.name, err.trace)
    except CaseTimeout as err:
        if stats.runs == 0:  # one call of the checked code took the whole time
            text = f"the checked code {err} in its first call (timeout per case)"
            return ("CHECKED CODE FAILED", text, case.name, None)
        text = (
            f"INCONCLUSIVE: budget: the enumeration {err} after {stats.runs} complete runs of "
            "the checked code (the oracle's budget, not a fault of the code); raise --timeout "
            "or check fewer cases (--family, --vocab, --k)"
        )
        return ("INCONCLUSIVE", text, case.name, None)
    except EnumerationBudgetError as err:
        text = f"INCONCLUSIVE: budget: {err} (raise max_paths or check fewer cases)"
        return ("INCONCLUSIVE", text, case.name, None)
    if report.exact and floats:
        text = (
            f"exact mode: floats reached the random source (at draw {floats[0]}); exact "
            "arithmetic would judge their rounding, not the algorithm. Check float code "
            "without exact (float64), or with tolerance 'float32'"
        )
        return ("REFUSED", text, case.name, None)
    _judge(case, got, want, stats.pruned_mass, report)
    return None


def _located(err: HiddenRandomnessError, run: Callable[[RandomSource], Any], exact: bool) -> str:
    """The error's message with the call site of the hidden draw, found by replaying the path
    on which it showed twice and comparing the checked code's variables line by line."""

    def replay() -> None:
        run(EnumeratingSource(err.forced, exact))

    with _deadline(DEFAULT_TIMEOUT):
        try:
            site = first_divergence(replay)
        except CaseTimeout:
            site = None
    if site is None:
        return f"{err}; call site not found (the two replays did not differ)"
    return (
        f"{err}; call site: {site} (the variables of two runs with the same draws first differ "
        "after this line)"
    )


def _judge(case: Case, got: Law, want: Law, pruned: float, report: CheckReport) -> None:
    """Compare one case's law with plain decoding, allowing for the mass pruned."""
    tv = float(total_variation(got, want))
    report.pruned_mass = max(report.pruned_mass, pruned)
    if tv > report.worst_tv or not report.worst_case:
        report.worst_tv, report.worst_case = tv, case.name
    if tv - pruned / 2 > report.tolerance:
        report.failing_cases.append(case.name)
        if report.counterexample is None:
            report.counterexample = _describe(case, got, want, tv, report.tolerance)
    elif tv + pruned / 2 > report.tolerance and report.verdict != "INCONCLUSIVE":
        report.verdict = "INCONCLUSIVE"
        report.error_case = case.name
        report.error = (
            f"INCONCLUSIVE: pruning: total variation {tv:.3e} is within half the pruned mass "
            f"({pruned:.1e}) of the tolerance {report.tolerance:.1e}"
        )


def _contract_error(
    report: CheckReport,
    case: Case | None,
    violation: ContractViolation,
    sandbox: _Sandbox,
    started: float | None,
) -> CheckReport:
    name = case.name if case is not None else "-"
    item = {"case": name, "output": violation.output, "reason": violation.reason}
    report.violations.append(item)
    report.counterexample = {**(_case_json(case) if case else {}), "contract_violation": item}
    report.error = f"{violation.reason}; got {violation.output!r}"
    if started is None:
        return report
    return _finish(report, "CONTRACT ERROR", report.error, None, sandbox, started)


def _rounding_note(report: CheckReport, low_precision: set[str]) -> None:
    if report.worst_tv >= ROUNDING_HINT_TV or report.tolerance >= TOLERANCE_PRESETS["float32"]:
        return
    if low_precision:
        what = f"the checked code computes in {', '.join(sorted(low_precision))}"
    else:
        what = "if the checked code computes in float32 or bfloat16"
    report.notes.append(
        f"note: the worst total variation {report.worst_tv:.1e} is below {ROUNDING_HINT_TV:g} "
        f"and {what}: this is likely rounding, not the algorithm; rerun with --tolerance "
        "float32 (tolerance='float32')"
    )


def _finish(
    report: CheckReport,
    verdict: str,
    error: str | None,
    case: str | None,
    sandbox: _Sandbox,
    started: float,
    trace: str | None = None,
) -> CheckReport:
    report.verdict = verdict
    report.lossless = verdict == "LOSSLESS"
    report.error, report.error_case, report.traceback = error, case, trace
    report.stdout_chars = sandbox.stdout_chars
    report.seconds = time.perf_counter() - started
    if sandbox.stdout_chars:
        report.notes.append(
            f"note: the checked code printed {sandbox.stdout_chars} characters (captured)"
        )
    return report


def _tolerance(tolerance: float | str | None, exact: bool) -> float:
    if tolerance is None:
        return 0.0 if exact else TOLERANCE_PRESETS["float64"]
    if isinstance(tolerance, str):
        if tolerance in TOLERANCE_PRESETS:
            return TOLERANCE_PRESETS[tolerance]
        try:
            tolerance = float(tolerance)
        except ValueError:
            raise ValueError(
                f"tolerance must be a number >= 0 or one of {sorted(TOLERANCE_PRESETS)}, "
                f"got {tolerance!r}"
            ) from None
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be a number >= 0, got {tolerance!r}")
    return float(tolerance)


def _case_json(case: Case) -> dict[str, Any]:
    out: dict[str, Any] = {
        "case": case.name,
        "family": case.family,
        "vocab_size": case.vocab_size,
        "draft_length": case.draft_length,
    }
    if isinstance(case, CheckCase):
        out.update(temperature=case.temperature, top_k=case.top_k, top_p=case.top_p)
        out["target_law_at_root"] = [float(v) for v in case.target.law(case.context)]
        out["draft_law_at_root"] = [float(v) for v in case.draft.law(case.context)]
    if isinstance(case, LoopCase):
        out["tokens_compared"] = out.pop("draft_length")
        out.update(temperature=case.temperature, prompt=list(case.prompt))
    return out


def first_difference(got: Law, want: Law, tolerance: float) -> dict[str, Any] | None:
    """Where two laws of token sequences first differ: the shortest prefix after which the law
    of the next token differs by more than ``tolerance`` (in total variation of the joint
    masses), with the got/want probability of each next token."""
    length = max((len(k) for k in (*got, *want)), default=0)  # type: ignore[arg-type]
    for n in range(1, length + 1):
        marg_got: dict[tuple[int, ...], float] = {}
        marg_want: dict[tuple[int, ...], float] = {}
        for law, marg in ((got, marg_got), (want, marg_want)):
            for key, prob in law.items():
                prefix: tuple[int, ...] = tuple(key)[:n]  # type: ignore[arg-type]
                marg[prefix] = marg.get(prefix, 0.0) + float(prob)
        prefixes = {k[:-1] for k in (*marg_got, *marg_want) if len(k) == n}
        worst: tuple[float, tuple[int, ...], list[int]] | None = None
        for prefix in sorted(prefixes):
            nexts = {k[-1] for k in (*marg_got, *marg_want) if len(k) == n and k[:-1] == prefix}
            gap = sum(
                abs(marg_got.get((*prefix, t), 0.0) - marg_want.get((*prefix, t), 0.0))
                for t in nexts
            )
            if gap / 2 > tolerance and (worst is None or gap > worst[0]):
                worst = (gap, prefix, sorted(nexts))
        if worst is not None:
            _, where, tokens = worst
            return {
                "position": n,
                "after_tokens": list(where),
                "next_token": {
                    str(t): {
                        "got": marg_got.get((*where, t), 0.0),
                        "want": marg_want.get((*where, t), 0.0),
                    }
                    for t in tokens
                },
            }
    return None


def _describe(case: Case, got: Law, want: Law, tv: float, tol: float) -> dict[str, Any]:
    keys = sorted(set(got) | set(want), key=lambda k: -abs(float(got.get(k, 0) - want.get(k, 0))))
    return {
        **_case_json(case),
        "total_variation": tv,
        "first_difference": first_difference(got, want, tol),
        "worst_outcomes": [
            {
                "tokens": list(k),  # type: ignore[call-overload]
                "got": float(got.get(k, 0)),
                "want": float(want.get(k, 0)),
            }
            for k in keys[:3]
        ],
    }


def _finish_with_ar(
    out: list[int], target: ToyLM, context: tuple[int, ...], n: int, rng: RandomSource
) -> tuple[int, ...]:
    while len(out) < n:
        out.append(int(rng.categorical(target.law((*context, *out)))))
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# Chains
# ---------------------------------------------------------------------------------------------


def _chain_step(
    fn: Callable[..., Any],
    signature: Signature,
    with_rng: bool,
    sandbox: _Sandbox,
    case: CheckCase,
    rng: RandomSource,
) -> tuple[int, ...]:
    """Draft K tokens from the case's draft model, call ``fn``, finish with AR to K+1 tokens."""
    tokens: list[int] = []
    for _ in range(case.draft_length):
        tokens.append(int(rng.categorical(case.draft.law((*case.context, *tokens)))))
    prefixes = [(*case.context, *tokens[:i]) for i in range(case.draft_length + 1)]
    inputs = ChainInputs(
        target_probs=np.stack([case.target.law(c) for c in prefixes]),  # (K+1, V)
        draft_probs=np.stack([case.draft.law(c) for c in prefixes[:-1]]),  # (K, V)
        draft_tokens=tuple(tokens),
        target_logits=np.stack([case.target.raw_logits(c) for c in prefixes]),  # (K+1, V)
        temperature=case.temperature,
        top_k=case.top_k,
        top_p=case.top_p,
    )
    out = call_chain(fn, signature, inputs, rng, with_rng, sandbox.call)
    k = case.draft_length
    if not 1 <= len(out) <= k + 1:
        raise ContractViolation(
            out, f"returned {len(out)} tokens; a step emits 1 to {k + 1}: {signature.contract}"
        )
    if out[:-1] != list(tokens[: len(out) - 1]):
        raise ContractViolation(
            out,
            f"the tokens before the last are not a prefix of the drafts {list(tokens)}: "
            f"{signature.contract}",
        )
    return _finish_with_ar(out, case.target, case.context, k + 1, rng)


def check_verifier(
    fn: Callable[..., Any],
    *,
    cases: Sequence[CheckCase] | None = None,
    exact: bool = False,
    tolerance: float | str | None = None,
    families: Sequence[str] | None = None,
    vocab: Sequence[int] | None = None,
    k: Sequence[int] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    adapters: bool = True,
    max_paths: int = 1_000_000,
    signature: str = "chain",
) -> CheckReport:
    """Say whether the chain verifier ``fn`` is lossless, by exact laws over ``cases``.

    For every case, the exact law of "draft K tokens from q, call ``fn``, finish with plain AR up
    to K+1 tokens" is compared with the law of K+1 plain AR tokens. ``tolerance`` on the total
    variation is a number or a preset ("float64": 1e-9, the default; "float32": 1e-5); it is 0
    with ``exact=True`` (Fractions). ``families``/``vocab``/``k`` filter the catalogue.
    ``adapters`` routes torch/numpy/`random` draws to the enumeration (`route_all`).
    ``signature`` names the calling convention (`casspec_ref.proof.signatures`): "chain"
    (``fn(inputs[, rng])``), "plain", "hf", "vllm-v0" or "vllm-v1" (and its variants). vLLM v1
    code that takes logits is judged at the float32 tolerance unless ``tolerance`` is given.
    """
    sig = get_signature(signature)
    if sig.mode != "chain":
        raise ValueError(f"signature {signature!r} is for {sig.mode} verifiers")
    if cases is None:
        with threads_at(1):
            cases = default_cases(exact=exact)
    _check_families(families, CHAIN_FAMILIES, "chain")
    selected = select_cases(cases, families=families, vocab=vocab, k=k)
    prepared: list[Any] = []

    def start() -> None:
        prepared.extend(prepare(fn, sig))

    def build(case: Case, sandbox: _Sandbox) -> tuple[Step, Law]:
        assert isinstance(case, CheckCase)
        step = functools.partial(_chain_step, prepared[0], sig, prepared[1], sandbox, case)
        return step, ar_law(case.target, case.context, case.draft_length + 1, exact=exact)

    float32_by_convention = tolerance is None and not exact and vllm_v1.judged_in_float32(fn, sig)
    report = _run_cases(
        "chain",
        selected,
        build,
        exact=exact,
        tolerance="float32" if float32_by_convention else tolerance,
        timeout=timeout,
        adapters=adapters,
        max_paths=max_paths,
        signature=sig,
        start=start,
        target=fn,
    )
    if float32_by_convention:
        report.notes.append(vllm_v1.FLOAT32_NOTE)
    return report


def _check_families(families: Sequence[str] | None, known: Sequence[str], mode: str) -> None:
    if families is None:
        return
    unknown = [f for f in families if f not in known]
    if unknown:
        raise ValueError(f"unknown {mode} families {unknown}; allowed: {', '.join(known)}")


# ---------------------------------------------------------------------------------------------
# Trees
# ---------------------------------------------------------------------------------------------


class TreeVerifierFunction(Protocol):
    """The signature `check_tree_verifier` needs: ``fn(inputs, rng) -> emitted tokens`` (or
    ``fn(inputs)``): the tokens of an accepted root-down path, then one more token."""

    def __call__(self, inputs: TreeInputs, rng: RandomSource) -> Sequence[int]: ...


def _tree_step(
    fn: Callable[..., Any],
    with_rng: bool,
    sandbox: _Sandbox,
    case: TreeCase,
    rng: RandomSource,
) -> tuple[int, ...]:
    tree, contexts = draft_tree(case.spec, case.context, case.drafts, rng)
    inputs = TreeInputs.from_tree(tree, [case.target.law(c) for c in contexts])
    args = (inputs, rng) if with_rng else (inputs,)
    contract = SIGNATURES["tree"]
    out = tokens_of(sandbox.call(fn, *args), case.vocab_size, contract)
    depth = tree.max_depth
    if not 1 <= len(out) <= depth + 1:
        raise ContractViolation(
            out, f"returned {len(out)} tokens; a step emits 1 to {depth + 1}: {contract.contract}"
        )
    node = 0
    for token in out[:-1]:
        matches = [c for c in tree.children(node) if tree.token(c) == token]
        if not matches:
            raise ContractViolation(
                out, f"the tokens before the last are not a path of the tree: {contract.contract}"
            )
        node = matches[0]
    return _finish_with_ar(out, case.target, case.context, depth + 1, rng)


def check_tree_verifier(
    fn: TreeVerifierFunction,
    *,
    cases: Sequence[TreeCase] | None = None,
    exact: bool = False,
    tolerance: float | str | None = None,
    families: Sequence[str] | None = None,
    vocab: Sequence[int] | None = None,
    k: Sequence[int] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    adapters: bool = True,
    max_paths: int = 1_000_000,
) -> CheckReport:
    """Say whether the tree verifier ``fn`` (it receives `TreeInputs`) is lossless.

    For every tree case, the exact law of "draft the tree, call ``fn``, finish with plain AR up
    to depth + 1 tokens" is compared with depth + 1 plain AR tokens. Families: chain,
    independent (siblings with replacement), mixed_levels (siblings from two draft models),
    without_replacement, deterministic (top-k children); ``k`` filters on the tree depth.
    A verifier that supports only some child rules is checked on those families.
    """
    if cases is None:
        with threads_at(1):
            cases = tree_cases(exact=exact)
    _check_families(families, TREE_FAMILIES, "tree")
    selected = select_cases(cases, families=families, vocab=vocab, k=k)
    prepared: list[Any] = []

    def start() -> None:
        prepared.extend(prepare(fn, SIGNATURES["tree"]))

    def build(case: Case, sandbox: _Sandbox) -> tuple[Step, Law]:
        assert isinstance(case, TreeCase)
        step = functools.partial(_tree_step, prepared[0], prepared[1], sandbox, case)
        return step, ar_law(case.target, case.context, case.draft_length + 1, exact=exact)

    return _run_cases(
        "tree",
        selected,
        build,
        exact=exact,
        tolerance=tolerance,
        timeout=timeout,
        adapters=adapters,
        max_paths=max_paths,
        signature=SIGNATURES["tree"],
        start=start,
        target=fn,
    )


# ---------------------------------------------------------------------------------------------
# Whole loops
# ---------------------------------------------------------------------------------------------


class GenerateFunction(Protocol):
    """The signature `check_loop` needs::

        generate(target, draft, prompt, max_new_tokens, temperature) -> new tokens

    ``target`` and ``draft`` are `ToyModel`s (``model(input_ids) -> logits (B, T, V)``);
    ``prompt`` is a list of token ids; return at least ``max_new_tokens`` new tokens (the prompt
    excluded; extra tokens are ignored). A parameter named ``rng`` receives the oracle's
    `RandomSource`; other draws go through torch, numpy or `random` (routed by the adapters).
    """

    def __call__(
        self,
        target: ToyModel,
        draft: ToyModel,
        prompt: list[int],
        max_new_tokens: int,
        temperature: float,
    ) -> Sequence[int]: ...


LOOP_CONTRACT = Signature(
    "loop",
    "loop",
    "generate(target, draft, prompt, max_new_tokens, temperature[, rng]) returning at least "
    "max_new_tokens new token ids (the prompt excluded)",
    5,
)


def _loop_step(
    fn: GenerateFunction, with_rng: bool, sandbox: _Sandbox, case: LoopCase, rng: RandomSource
) -> tuple[int, ...]:
    kwargs = {"rng": rng} if with_rng else {}
    target, draft = ToyModel(case.target), ToyModel(case.draft)
    output = sandbox.call(
        fn, target, draft, list(case.prompt), case.n_tokens, case.temperature, **kwargs
    )
    out = tokens_of(output, case.vocab_size, LOOP_CONTRACT)
    if len(out) < case.n_tokens:
        raise ContractViolation(
            out,
            f"returned {len(out)} new tokens; max_new_tokens was {case.n_tokens}: "
            f"{LOOP_CONTRACT.contract}",
        )
    return tuple(out[: case.n_tokens])


def check_loop(
    fn: GenerateFunction,
    *,
    cases: Sequence[LoopCase] | None = None,
    tolerance: float | str | None = None,
    families: Sequence[str] | None = None,
    vocab: Sequence[int] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    max_paths: int = 1_000_000,
) -> CheckReport:
    """Say whether a whole speculative decoding loop is lossless: run ``generate`` (see
    `GenerateFunction`) on the toy models of each loop case and compare the exact law of its
    first ``n_tokens`` new tokens with plain decoding at the case's temperature. Drafter-side
    bugs (a q that is not the law the drafts were drawn from) and cross-step bugs (a generator
    re-seeded every step) change this law. Float64 only."""
    if cases is None:
        with threads_at(1):
            cases = loop_cases()
    _check_families(families, LOOP_FAMILIES, "loop")
    selected = select_cases(cases, families=families, vocab=vocab)
    try:
        with_rng = "rng" in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        with_rng = False

    def build(case: Case, sandbox: _Sandbox) -> tuple[Step, Law]:
        assert isinstance(case, LoopCase)
        step = functools.partial(_loop_step, fn, with_rng, sandbox, case)
        return step, ar_law(case.target, case.prompt, case.n_tokens)

    return _run_cases(
        "loop",
        selected,
        build,
        exact=False,
        tolerance=tolerance,
        timeout=timeout,
        adapters=True,
        max_paths=max_paths,
        signature=LOOP_CONTRACT,
        target=fn,
    )


# ---------------------------------------------------------------------------------------------
# The command line
# ---------------------------------------------------------------------------------------------


def add_oracle_arguments(check: Any) -> None:
    """The arguments of ``oracle check`` (an `argparse` parser)."""
    check.add_argument("target", help="MODULE:FUNCTION, importable from the current directory")
    kind = check.add_mutually_exclusive_group()
    kind.add_argument(
        "--tree", action="store_true", help="FUNCTION is a tree verifier taking TreeInputs"
    )
    kind.add_argument(
        "--loop",
        action="store_true",
        help="FUNCTION is a whole generate(target, draft, prompt, max_new_tokens, temperature)",
    )
    check.add_argument(
        "--signature",
        choices=list(SIGNATURES),
        default=None,
        help="the calling convention of FUNCTION (default chain; tree as --tree): "
        + "; ".join(f"{name}: {help_text(name)}" for name in SIGNATURES),
    )
    check.add_argument(
        "--option",
        action="append",
        metavar="NAME=VALUE",
        help="a keyword argument passed to FUNCTION on every call (VALUE a Python literal), "
        "e.g. assistant_ensemble_weight=0.5 (repeatable)",
    )
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.add_argument(
        "--exact", action="store_true", help="exact arithmetic with fractions (refused for floats)"
    )
    check.add_argument(
        "--tolerance",
        default=None,
        help="total-variation tolerance: a number, or float64 (1e-9, default) or float32 (1e-5)",
    )
    check.add_argument("--family", action="append", help="only this case family (repeatable)")
    check.add_argument("--vocab", action="append", type=int, help="only this vocabulary size")
    check.add_argument("--k", action="append", type=int, help="only this draft length / depth")
    check.add_argument(
        "--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds per case (default 60)"
    )


def run_oracle_args(args: Any, stream: TextIO | None = None) -> int:
    """Run ``oracle check`` from parsed arguments (see `add_oracle_arguments`)."""
    mode = (
        "tree"
        if getattr(args, "tree", False)
        else "loop"
        if getattr(args, "loop", False)
        else "chain"
    )
    return run_check_command(
        args.target,
        mode=mode,
        signature=getattr(args, "signature", None),
        options=getattr(args, "option", None),
        as_json=args.json,
        exact=args.exact,
        tolerance=getattr(args, "tolerance", None),
        families=getattr(args, "family", None),
        vocab=getattr(args, "vocab", None),
        k=getattr(args, "k", None),
        timeout=getattr(args, "timeout", DEFAULT_TIMEOUT),
        stream=stream,
    )


def _load(target: str, notes: list[str]) -> Callable[..., Any]:
    """Import MODULE:FUNCTION. When FUNCTION reaches TorchScript, import it again with
    TorchScript disabled (a note in ``notes`` says so)."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"target must be MODULE:FUNCTION, got {target!r}")
    if "" not in sys.path and "." not in sys.path:
        sys.path.insert(0, "")
    # Triton kernels the module defines run in Triton's interpreter, on a CPU, where the oracle
    # follows its draws (casspec_ref/proof/triton_draws.py); read when a kernel is defined.
    os.environ.setdefault("TRITON_INTERPRET", "1")

    def load() -> Any:
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # prints at import keep --json valid
                module = importlib.import_module(module_name)
        except ImportError as err:
            raise ValueError(f"cannot import module {module_name!r}: {err}") from None
        except BaseException as err:  # the module itself failed while importing
            raise ValueError(
                f"importing {module_name!r} raised {type(err).__name__}: {err}"
            ) from None
        fn: Any = module
        for part in attr.split("."):
            fn = getattr(fn, part, None)
            if fn is None:
                raise ValueError(f"{module_name!r} has no attribute {attr!r}")
        if not callable(fn):
            raise ValueError(f"{target!r} is not callable")
        return fn

    fn = load()
    scripted = [h for h in hidden_paths(fn) if h.kind == "TorchScript"]
    if scripted:
        with contextlib.redirect_stdout(io.StringIO()):
            import_without_torchscript(module_name, tuple(h.module for h in scripted))
        fn = load()
        notes.append(
            "routed: " + "; ".join(h.describe() for h in scripted) + " is TorchScript; the "
            f"code was imported again with TorchScript disabled (as {TORCHSCRIPT_SWITCH} does), "
            "so that its draws reach the oracle"
        )
    return fn  # type: ignore[no-any-return]


def _options(options: Sequence[str] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in options or ():
        name, sep, value = item.partition("=")
        if not sep or not name.isidentifier():
            raise ValueError(f"--option must be NAME=VALUE, got {item!r}")
        try:
            out[name] = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            raise ValueError(f"--option {name}: {value!r} is not a Python literal") from None
    return out


def run_check_command(
    target: str,
    *,
    mode: str = "chain",
    signature: str | None = None,
    options: Sequence[str] | None = None,
    as_json: bool = False,
    exact: bool = False,
    tolerance: float | str | None = None,
    families: Sequence[str] | None = None,
    vocab: Sequence[int] | None = None,
    k: Sequence[int] | None = None,
    timeout: float | None = DEFAULT_TIMEOUT,
    stream: TextIO | None = None,
) -> int:
    """The CLI ``oracle check MODULE:FUNCTION [--tree | --loop]``: print the report; exit code
    0 lossless, 1 not lossless, 2 usage or import error (or exact mode refused), 3 the checked
    code failed or is not checkable (the case and the traceback or draw are reported)."""
    out = stream if stream is not None else sys.stdout
    if mode not in ("chain", "tree", "loop"):
        print(f"error: mode must be chain, tree or loop, got {mode!r}", file=sys.stderr)
        return 2
    notes: list[str] = []
    try:
        if signature is not None:
            sig = get_signature(signature)
            if mode != "chain" and sig.mode != mode:
                raise ValueError(f"--signature {signature} checks {sig.mode} verifiers")
            mode = sig.mode
        keywords = _options(options)
        _tolerance(tolerance, exact)
        if mode == "loop" and exact:
            raise ValueError("--exact is not available with --loop (toy models are float64)")
        fn = _load(target, notes)
        if keywords:
            fn = functools.partial(fn, **keywords)
    except ValueError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    common: dict[str, Any] = dict(tolerance=tolerance, families=families, vocab=vocab)
    try:
        if mode == "chain":
            sig_name = signature or "chain"
            report = check_verifier(
                fn, exact=exact, k=k, timeout=timeout, signature=sig_name, **common
            )
        elif mode == "tree":
            report = check_tree_verifier(fn, exact=exact, k=k, timeout=timeout, **common)
        else:
            report = check_loop(fn, timeout=timeout, **common)
    except ValueError as err:  # bad filters
        print(f"error: {err}", file=sys.stderr)
        return 2
    report.notes[:0] = notes
    if as_json:
        print(json.dumps({"target": target, **report.to_json()}, indent=2, default=str), file=out)
    else:
        print(f"{target}: {report.format()}", file=out)
    return report.exit_code
