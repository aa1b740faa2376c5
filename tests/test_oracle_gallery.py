"""The gallery: outside-style implementations (tests/oracle_gallery/), each labelled with its
truth, checked as they are written (their own torch/numpy/`random` draws). Every verdict is
asserted: no false positive (a correct implementation called NOT LOSSLESS, float32 included
under its tolerance) and no false negative.

Run ``cd tests && python test_oracle_gallery.py`` for the table (implementation, truth, verdict,
worst total variation, time)."""

from __future__ import annotations

import functools
import io
import json
import time
from dataclasses import dataclass
from typing import Any

import pytest
from oracle_gallery import (
    eagle_tree,
    float32_chain,
    hf_style,
    loops,
    medusa_typical,
    sglang_tree,
    specinfer_tree,
    textbook_chain,
    vllm_style,
)
from transformers.generation.utils import _speculative_sampling

from casspec_ref.proof import (
    JSON_KEYS,
    CheckReport,
    check_loop,
    check_tree_verifier,
    check_verifier,
    run_check_command,
)


@dataclass(frozen=True)
class Entry:
    """One implementation; ``fn`` a callable, or "MODULE:FUNCTION" checked through the command
    (which routes TorchScript itself)."""

    name: str
    fn: Any
    mode: str  # chain, tree or loop
    truth: str
    options: tuple[tuple[str, Any], ...] = ()

    def check(self) -> CheckReport:
        if isinstance(self.fn, str):
            out = io.StringIO()
            options = {**dict(self.options), "as_json": True, "stream": out}
            run_check_command(self.fn, **options)
            data = json.loads(out.getvalue())
            return CheckReport(**{attr: data[key] for attr, key in JSON_KEYS.items()})
        run = {"chain": check_verifier, "tree": check_tree_verifier, "loop": check_loop}
        return run[self.mode](self.fn, **dict(self.options))


VLLM_V0 = "oracle_gallery.vllm_v0_port:RejectionSampler"


GALLERY = [
    Entry("textbook chain", textbook_chain.verify, "chain", textbook_chain.TRUTH),
    Entry(
        "float32 chain",
        float32_chain.verify,
        "chain",
        float32_chain.TRUTH,
        (("tolerance", float32_chain.TOLERANCE),),
    ),
    Entry("HF-style _speculative_sampling", hf_style.verify, "chain", hf_style.TRUTH),
    Entry("vLLM-style rejection sampler", vllm_style.verify, "chain", vllm_style.TRUTH),
    Entry("Medusa typical acceptance", medusa_typical.verify, "chain", medusa_typical.TRUTH),
    Entry(
        "SpecInfer tree (recursive)",
        specinfer_tree.verify,
        "tree",
        specinfer_tree.TRUTH,
        (("families", specinfer_tree.FAMILIES),),
    ),
    Entry(
        "EAGLE-1 tree (candidate paths)",
        eagle_tree.verify,
        "tree",
        eagle_tree.TRUTH,
        (("families", eagle_tree.FAMILIES),),
    ),
    Entry(
        "SGLang tree (target only)",
        sglang_tree.verify,
        "tree",
        sglang_tree.TRUTH,
        (("families", sglang_tree.FAMILIES), ("vocab", (2, 3))),
    ),
    Entry(
        "transformers _speculative_sampling (installed)",
        _speculative_sampling,
        "chain",
        "LOSSLESS",
        (("signature", "hf"),),
    ),
    Entry(
        "transformers, assistant_ensemble_weight=0.5",
        functools.partial(_speculative_sampling, assistant_ensemble_weight=0.5),
        "chain",
        "NOT LOSSLESS",
        (("signature", "hf"), ("families", ("random",)), ("vocab", (2, 3))),
    ),
    Entry(
        "vLLM v0 RejectionSampler port (TorchScript kept)",
        VLLM_V0,
        "chain",
        "LOSSLESS",
        (("signature", "vllm-v0"), ("families", ("random",))),
    ),
    Entry(
        "vLLM v0 port, recovered token from p",
        "oracle_gallery.vllm_v0_port:BrokenRejectionSampler",
        "chain",
        "NOT LOSSLESS",
        (("signature", "vllm-v0"), ("families", ("random",)), ("vocab", (2, 3))),
    ),
    Entry("correct loop", loops.correct_loop, "loop", "LOSSLESS"),
    Entry("loop that re-seeds", loops.reseeding_loop, "loop", "NOT LOSSLESS"),
    Entry("drafter reporting q at T=1", loops.wrong_temperature_drafter, "loop", "NOT LOSSLESS"),
]


@pytest.mark.parametrize("entry", GALLERY, ids=[e.name for e in GALLERY])
def test_gallery_verdict(entry: Entry) -> None:
    report = entry.check()
    assert report.verdict == entry.truth, report.format()
    if entry.truth == "LOSSLESS":
        assert report.worst_tv <= report.tolerance
    else:
        assert report.counterexample is not None
        assert report.counterexample["first_difference"] is not None


@pytest.mark.thorough
def test_vllm_v0_port_on_the_whole_catalogue() -> None:
    """The default catalogue (45 cases) on the vectorized sampler with its TorchScript kept:
    the command routes TorchScript and prunes branches below tolerance * 1e-6."""
    entry = Entry("vLLM v0 (all cases)", VLLM_V0, "chain", "LOSSLESS", (("signature", "vllm-v0"),))
    report = entry.check()
    assert report.verdict == "LOSSLESS" and report.n_cases == 45, report.format()


def test_float32_chain_is_flagged_without_its_tolerance() -> None:
    """The float64 default tolerance sees float32 rounding: the preset is what makes it pass."""
    report = check_verifier(float32_chain.verify, families=["random"], vocab=[3])
    assert report.worst_tv > 0


def test_wrong_temperature_drafter_is_right_at_temperature_one() -> None:
    """Its bug only exists when the temperature is not 1: the plain family passes."""
    report = check_loop(loops.wrong_temperature_drafter, families=["plain"])
    assert report.verdict == "LOSSLESS", report.format()


if __name__ == "__main__":
    print("| implementation | truth | verdict | worst TV | time (s) |")
    print("|---|---|---|---|---|")
    for entry in GALLERY:
        start = time.perf_counter()
        rep = entry.check()
        took = time.perf_counter() - start
        print(f"| {entry.name} | {entry.truth} | {rep.verdict} | {rep.worst_tv:.2e} | {took:.1f} |")
        if rep.error:
            print("   ", rep.error_case, rep.error)
