"""DyTC's two presets: `DyTCConfig()` (this reference's best) and `DyTCConfig.paper()` (the paper's
policy alone, method ``cas-spec:paper``).

- The paper preset's decisions on hand-worked cases: the warm-up mean and the EMA, the linear
  latency model, T(S, k), the EWIF of the grown tree, the chosen expansion, and the fall-back to
  plain decoding, each computed here with exact fractions.
- Both presets are lossless: the exact law of the loop equals plain sampling's on the tiny
  models (the loop-law machinery of tests/test_loop_laws.py, run with the paper's config), and
  greedy decoding equals `generate_ar` token for token.
- The default's decisions are pinned: a digest of seeded simulator runs, so that a change to the
  paper's core or to a refinement that moves any decision of the default shows.
"""

from __future__ import annotations

import dataclasses
import hashlib
import random
from fractions import Fraction

import dytc_simulator
import pytest
import test_loop_laws
from dytc_simulator import CURVES, SimDrafter, World, default_world, run_dytc
from test_speculative import PROMPTS, _drafts
from test_speculative import _model as _greedy_model

from casspec_ref.dytc import DyTC
from casspec_ref.dytc_config import PLD, RECYCLE, REFINEMENTS, DyTCConfig
from casspec_ref.dytc_estimates import CostCurve, Outcome
from casspec_ref.dytc_refinements import RefinedCostCurve, RefinedDyTC
from casspec_ref.dytc_tree import TreeEstimate
from casspec_ref.generate import generate_ar
from casspec_ref.schedules import SCHEDULES, ScheduleSpec
from casspec_ref.speculative import METHODS, generate_speculative


# ------------------------------------------------------------------ the presets
def test_the_paper_preset_switches_every_refinement_off_and_the_default_all_on() -> None:
    paper, best = DyTCConfig.paper(), DyTCConfig()
    assert paper.refinements() == [] and best.refinements() == list(REFINEMENTS)
    assert (paper.window, best.window) == (20, 40)
    assert DyTCConfig.paper(max_k=4).max_k == 4
    assert DyTCConfig.paper(margin_bins=True).refinements() == ["margin_bins"]
    assert "cas-spec:paper" in METHODS


def test_the_paper_method_refuses_a_config_with_a_refinement_on() -> None:
    paper = SCHEDULES["cas-spec:paper"]
    assert paper(ScheduleSpec(["l1"], 2)).config == DyTCConfig.paper()  # no config given
    assert paper(ScheduleSpec(["l1"], 2, DyTCConfig.paper(max_k=3))).config.max_k == 3
    with pytest.raises(ValueError, match=r"'cas-spec:paper' runs the paper's policy alone.*"):
        paper(ScheduleSpec(["l1"], 2, DyTCConfig(max_k=3)))
    with pytest.raises(ValueError, match="exploration"):
        paper(
            ScheduleSpec(["l1"], 2, policy=RefinedDyTC(["l1"], DyTCConfig.paper(exploration=True)))
        )
    with pytest.raises(ValueError, match=r"runs the paper's DyTC.*RefinedDyTC"):
        paper(ScheduleSpec(["l1"], 2, policy=RefinedDyTC(["l1"], DyTCConfig.paper())))
    assert type(paper(ScheduleSpec(["l1"], 2)).policy) is DyTC


def test_the_paper_preset_learns_one_estimate_per_draft() -> None:
    """No refined estimates: a node's outcome teaches its draft's one alpha, whatever its match
    or margin; the default learns the refined ones too."""
    paper = DyTC(["l1"])
    assert paper.config == DyTCConfig.paper()
    assert set(paper.estimates()) == {Outcome("l1"), Outcome(PLD), Outcome(RECYCLE)}
    assert paper.outcome(PLD, PLD, 3, None) == Outcome(PLD)
    assert paper.outcome("l1", "root", 0, 0.5) == Outcome("l1")
    best = RefinedDyTC(["l1"])
    assert best.outcome(PLD, PLD, 3, None) == Outcome(PLD, "next")
    assert best.outcome("l1", "root", 0, 0.5) == Outcome("l1", "margin", 4)
    assert len(best.estimates()) > len(paper.estimates())


def test_the_paper_preset_drafts_no_recycled_token() -> None:
    """`cas-spec:paper` drafts with the DSIA levels and prompt lookup only: with recycled tokens
    believed always right (prior 1), `cas-spec` drafts them on the greedy tiny models; no node
    of the paper preset's trees is one."""
    configs = {
        "cas-spec": DyTCConfig(prior_recycle_alpha=1.0),
        "cas-spec:paper": DyTCConfig.paper(prior_recycle_alpha=1.0),
    }
    sources: dict[str, set[str]] = {method: set() for method in configs}
    for method, seen in sources.items():
        for seed in range(2):
            model = _greedy_model("llama", seed)
            for prompt in PROMPTS:
                generate_speculative(
                    model,
                    prompt,
                    30,
                    method=method,
                    drafts=_drafts(model),
                    dytc=configs[method],
                    clock=model.clock,
                    on_step=lambda t, seen=seen: seen.update(t.sources),
                )
    assert RECYCLE in sources["cas-spec"], "the control never drafted a recycled token"
    assert RECYCLE not in sources["cas-spec:paper"]
    assert PLD in sources["cas-spec:paper"] and len(sources["cas-spec:paper"]) > 2


def test_the_papers_policy_never_drafts_a_recycled_token_offered_to_it() -> None:
    """Offered every draft, the paper's DyTC expands none but the model drafts and lookup."""
    expanded: set[str] = set()

    class Recording(SimDrafter):
        def expand(self, node: int, draft: str, k: int, width: int):  # type: ignore[no-untyped-def]
            expanded.add(draft)
            return super().expand(node, draft, k, width)

    world = default_world(CURVES["linear"])
    policy = DyTC(["cheap", "good"])
    rng = random.Random(0)
    for _ in range(200):
        drafter = Recording(world, rng, 32, 32)
        policy.grow(drafter, ["cheap", "good", PLD, RECYCLE])
        tested, _ = drafter.verify(policy)
        timings = {d: (drafter.calls[d], drafter.draft_time[d]) for d in drafter.calls}
        policy.observe_step(tested, drafter.size(), world.verify(drafter.size()), timings)
    assert RECYCLE not in expanded and PLD in expanded, expanded


# ------------------------------------------------------------------ hand-worked decisions
def test_paper_estimate_is_the_running_mean_in_warm_up_then_the_ema() -> None:
    """Prior 0.6 as one pseudo-outcome: after 1, 0, 1 the mean is (0.6 + 2) / 4 = 0.65; after
    the 20 warm-up outcomes (1, 0, 1, then 17 accepted) it is (0.6 + 19) / 21, and the 21st (a
    rejection) moves it by the EMA: 0.7 a + 0.3 (mean of the last 20 = 18 / 20)."""
    policy = DyTC(["l1"], DyTCConfig.paper(prior_alpha=0.6))
    for accepted in (True, False, True):
        policy.observe_step([(Outcome("l1"), accepted)], 1, 1.0, {})
    assert policy.alpha["l1"].alpha == pytest.approx(float((Fraction(6, 10) + 2) / 4), rel=1e-15)
    for _ in range(17):
        policy.observe_step([(Outcome("l1"), True)], 1, 1.0, {})
    a20 = (Fraction(6, 10) + 19) / 21
    assert policy.alpha["l1"].alpha == pytest.approx(float(a20), rel=1e-15)
    policy.observe_step([(Outcome("l1"), False)], 1, 1.0, {})
    want = Fraction(7, 10) * a20 + Fraction(3, 10) * Fraction(18, 20)
    assert policy.alpha["l1"].alpha == pytest.approx(float(want), rel=1e-15)


def test_paper_cost_model_is_a_least_squares_line() -> None:
    """Timings 1.0, 1.5, 1.5 s at 1, 2, 3 tokens: the line through their means (2, 4/3) with
    slope 0.25; the table would read 1.5 at 3 tokens, the line says 4/3 + 0.25 = 19/12."""
    line, table = CostCurve(), RefinedCostCurve(table=True)
    for tokens, seconds in ((1, 1.0), (2, 1.5), (3, 1.5)):
        line.observe(tokens, seconds)
        table.observe(tokens, seconds)
    for tokens in (1, 3, 4, 8):
        want = Fraction(4, 3) + Fraction(1, 4) * (tokens - 2)
        assert line.predict(tokens) == pytest.approx(float(want), rel=1e-15), tokens
    assert table.predict(3) == 1.5 and table.predict(8) == 1.5  # flat past the last slope


STEP = 1.0  # seconds of a plain step in the hand-worked policies: costs read as multiples of it


def _paper_policy(alpha: float, draft_seconds: float) -> DyTC:
    """The paper's policy with model draft "l1" at estimate `alpha` (its prior, no outcome yet)
    and `draft_seconds` a call, a lookup never right, and verify costs 1 + 0.25 (n - 1) seconds
    for n nodes (timed at n = 1..5, on the line, so the fitted line is exact)."""
    policy = DyTC(["l1"], DyTCConfig.paper(prior_alpha=alpha, prior_pld_alpha=0.0))
    for _ in range(2):  # the first timing of a model draft is discarded (one-time setup)
        policy.observe_step([], 1, STEP, {"l1": (1, draft_seconds)})
    for n in range(1, 6):
        policy.observe_step([], n, STEP + 0.25 * (n - 1), {})
    return policy


def _drafter(alpha: float, draft_seconds: float) -> SimDrafter:
    world = World(lambda n: STEP + 0.25 * (n - 1), {"l1": alpha}, {"l1": draft_seconds}, noise=0.0)
    return SimDrafter(world, random.Random(0), 32, 16)


def _t(alpha: Fraction, k: int, c: Fraction, verify: Fraction) -> Fraction:
    """T(S, k) by hand, a lookup after it never right: sum alpha^i / (c k + 0 + c_verify)."""
    return sum(alpha**i for i in range(1, k + 1)) / (c * k + verify)


def test_paper_policy_chooses_the_expansion_worked_by_hand() -> None:
    """alpha 0.8, c 0.25, verifying n nodes costs 1 + 0.25 (n - 1) plain steps. At the root,
    T(k) = G(k) / (0.25 k + 1 + 0.25 k) with G(k) = 0.8 + ... + 0.8^k peaks at k = 4 (0.7872):
    the cap. Within it, the tree's EWIF (1 + G(k)) / (1 + 0.5 k) is 1.2, 1.22, 1.1808, 1.1205:
    k = 2 is drafted. Below it (reach 0.64, 3 nodes, 0.5 s drafted) no chain raises the EWIF
    above 2.44 / 2 = 1.22 (k = 1: 2.952 / 2.5): growth stops, the tree is a chain of 2."""
    a, c = Fraction(4, 5), Fraction(1, 4)
    policy, drafter = _paper_policy(0.8, 0.25), _drafter(0.8, 0.25)
    assert policy.cost("l1") == pytest.approx(0.25) and policy.verify_seconds(5) == 2.0
    t = {k: _t(a, k, c, 1 + c * k) for k in range(1, 9)}
    assert max(t, key=lambda k: t[k]) == 4
    g = {k: sum(a**i for i in range(1, k + 1)) for k in range(1, 5)}
    ewif = {k: (1 + g[k]) / (1 + Fraction(1, 2) * k) for k in range(1, 5)}
    assert [float(e) for e in ewif.values()] == pytest.approx([1.2, 1.22, 1.1808, 1.1205], 1e-4)
    choice = policy.plan(drafter, TreeEstimate(), ["l1"])
    assert choice is not None and (choice.leaf, choice.draft, choice.k, choice.width) == (
        0,
        "l1",
        2,
        1,
    )
    assert choice.predicted_ewif == pytest.approx(float(ewif[2]), rel=1e-12)
    reach = policy.grow(_drafter(0.8, 0.25), ["l1"])
    assert reach == pytest.approx({0: 1.0, 1: 0.8, 2: 0.64}, rel=1e-12)
    below = {k: (1 + g[2] + a**2 * g[k]) / (2 + Fraction(1, 2) * k) for k in range(1, 5)}
    assert max(below.values()) < (1 + g[2]) / 2  # why the growth stopped there


def test_paper_policy_falls_back_to_plain_decoding_when_no_draft_pays() -> None:
    """alpha 0.5 and c 1 (a call costs a plain step): one token gives EWIF 1.5 / (1 + 1.25) =
    2/3, two give 1.75 / (2 + 1.5) = 1/2, below a plain step's 1: the tree is the root alone."""
    policy = _paper_policy(0.5, 1.0)
    assert policy.plan(_drafter(0.5, 1.0), TreeEstimate(), ["l1"]) is None
    drafter = _drafter(0.5, 1.0)
    assert policy.grow(drafter, ["l1"]) == {0: 1.0} and drafter.size() == 1


# ------------------------------------------------------------------ both presets are lossless
@pytest.mark.parametrize("case", test_loop_laws.CASES, ids=lambda case: case.name)
def test_paper_preset_loop_law_equals_ar(case, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """The loop-law matrix's cases (tests/test_loop_laws.py, which runs the default) with DyTC
    on the paper's policy: its warmed policy drafts trees, and the exact law of the tokens is
    plain sampling's within 1e-12 in total variation."""
    knobs = {name: getattr(case.dytc, name) for name in ("warmup", "max_tree_size", "max_k")}
    paper = DyTCConfig.paper(**knobs, siblings=case.dytc.siblings)
    case = dataclasses.replace(case, dytc=paper)
    tv, coverage = test_loop_laws.measure(case, "cas-spec:paper", monkeypatch)
    assert tv < test_loop_laws.TOLERANCE, tv
    assert coverage.max_tree >= 2, "the paper's policy drafted no tree"


@pytest.mark.parametrize("method", ["cas-spec", "cas-spec:paper"])
def test_both_presets_greedy_equal_generate_ar(method: str) -> None:
    drafted = 0
    for seed in range(2):
        model = _greedy_model("llama", seed)
        for prompt in PROMPTS:
            want = generate_ar(model, prompt, 30).tokens
            got = generate_speculative(
                model, prompt, 30, method=method, drafts=_drafts(model), clock=model.clock
            )
            assert got.tokens == want, (method, seed, prompt)
            drafted += sum(got.stats["accepted_lengths"]) > 0
    assert drafted > 0, f"{method} never accepted a drafted token"


# ------------------------------------------------------------------ the default's decisions
class _Reporting(SimDrafter):
    """A `SimDrafter` whose lookups report match lengths and model tokens margins, so that the
    digest covers the refinements that read them."""

    def match(self, node: int) -> int:
        return (node * 7 + len(self.parent)) % 5

    def margin(self, node: int) -> float | None:
        if self.draft[node] in ("pld", "recycle", "root"):
            return None
        return ((node * 13) % 11) / 20 - 0.05


def _decisions_digest(drafter: type[SimDrafter], monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(dytc_simulator, "SimDrafter", drafter)
    digest = hashlib.sha256()
    for curve in CURVES:
        for seed in (1, 2):
            rate, _, sizes = run_dytc(default_world(CURVES[curve]), 300, seed)
            digest.update(repr((curve, seed, rate, sizes)).encode())
    return digest.hexdigest()


@pytest.mark.parametrize(
    ("drafter", "pinned"),
    [
        (SimDrafter, "173dc937f782b8f5c75a4e20d1865ec68dedd2410dd79db5b7ecf10e3e07db6b"),
        (_Reporting, "f1bc6d7444f1e9dc022cf9ff8430f2db642d1ad1521bad8a396e7f126eb0aa6c"),
    ],
    ids=["plain drafter", "matches and margins"],
)
def test_the_default_makes_the_pinned_decisions(
    drafter: type[SimDrafter], pinned: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tokens per second and every tree size of 8 seeded simulator runs (four cost curves, two
    seeds, 300 steps): any change to a decision or an estimate of the default moves the digest,
    which is then re-pinned only on purpose."""
    assert _decisions_digest(drafter, monkeypatch) == pinned


# ------------------------------------------------------------------ the method name in the tools
def test_the_bench_and_the_cli_know_the_paper_method(capsys: pytest.CaptureFixture[str]) -> None:
    from casspec_ref.tools import bench
    from casspec_ref.tools.cli import main

    assert bench.parse_method("cas-spec:paper", METHODS) == ("cas-spec:paper", None)
    with pytest.raises(ValueError, match="unknown method 'cas-spec:best'"):
        bench.parse_method("cas-spec:best", METHODS)
    assert main(["generate", "hi", "--method", "pld", "--dytc", "paper"]) == 2
    assert "--dytc paper applies to --method cas-spec, not 'pld'" in capsys.readouterr().err


@pytest.mark.parametrize("drafter", [SimDrafter, _Reporting], ids=["plain drafter", "reporting"])
def test_the_refined_policy_with_every_switch_off_decides_as_the_papers(
    drafter: type[SimDrafter], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`RefinedDyTC(drafts, DyTCConfig.paper())` is the paper's `DyTC`: the same tokens per
    second and tree sizes on every cost curve (so the replay's ``cas-spec:paper@SWITCH=1``
    measures one refinement against the paper), while the default decides otherwise."""
    monkeypatch.setattr(dytc_simulator, "SimDrafter", drafter)
    differs = 0
    for curve in CURVES:
        world = default_world(CURVES[curve])
        paper = run_dytc(world, 300, 1, policy=DyTC(["cheap", "good"]))
        off = run_dytc(world, 300, 1, policy=RefinedDyTC(["cheap", "good"], DyTCConfig.paper()))
        assert (paper[0], paper[2]) == (off[0], off[2]), curve
        default = run_dytc(world, 300, 1)
        differs += default[2] != paper[2]
    assert differs > 0
