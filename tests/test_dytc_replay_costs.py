"""The replay's cost measurement (benchmarks/dytc_replay.py): the forms it measures in are the
ones it names, the model's own setting is left as it was, and what decoding adds to the forwards
(a step, a draft call, a prompt lookup, a recycled-token walk) is timed each apart."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from script_support import load_script

import casspec_ref
from casspec_ref.base.random_weights import random_init_
from casspec_ref.config import tiny_llama
from casspec_ref.model import Transformer

SCRIPT = Path(casspec_ref.__file__).parent.parent / "benchmarks" / "dytc_replay.py"


@pytest.fixture(scope="module")
def replay_script() -> ModuleType:
    return load_script(SCRIPT)


@pytest.mark.parametrize("plain", [False, True])
def test_costs_are_measured_in_the_forms_they_name_and_the_model_is_restored(
    replay_script: ModuleType, plain: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = random_init_(Transformer(tiny_llama(max_seq_len=128)), seed=0).eval()
    model.shape_invariant = plain  # the opposite of what is measured: it must come back
    seen: list[bool] = []
    forward = model.forward

    def spying_forward(*args: Any, **kwargs: Any) -> Any:
        seen.append(model.shape_invariant)
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", spying_forward)
    costs = replay_script.measure_costs(
        model, [], [[1, 2, 3, 1, 2]], cached=8, repeats=1, plain=plain
    )
    assert costs["forms"] == ("plain" if plain else "exact")
    assert set(costs["overheads"]) == {"step", "draft", "lookup", "recycle"}
    assert all(seconds >= 0 for seconds in costs["overheads"].values())
    assert model.forward == spying_forward, "the overheads' timer was left on the model"
    assert seen and set(seen) == {not plain}, "a forward ran in the other forms"
    assert model.shape_invariant is plain, "the model's setting was not restored"
    assert sorted(costs["verify"]) == list(range(1, 33)) and costs["draft"] == {}


def test_the_overheads_timer_leaves_the_class_forward_in_place(replay_script: ModuleType) -> None:
    """Forwards are timed apart from the steps' other work; afterwards the instance has no
    forward of its own again, and a step's and a draft call's overheads are positive seconds."""
    model = random_init_(Transformer(tiny_llama()), seed=0).eval()
    overheads = replay_script.measure_overheads(model, [[1, 2, 3, 1, 2]], max_new_tokens=8)
    assert "forward" not in model.__dict__
    assert 0 < overheads["step"] < 1 and 0 <= overheads["draft"] < 1
    assert 0 < overheads["lookup"] < 1 and 0 < overheads["recycle"] < 1


def test_a_lookup_is_timed_apart_from_the_step(
    replay_script: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lookup made slow by 50 ms shows in the lookup's seconds, not in the step's (the replay
    charges each lookup apart: counted in both, it would be paid twice), and the drafter's own
    lookup is back in place afterwards."""
    import time

    from casspec_ref.draft import StepDrafter

    model = random_init_(Transformer(tiny_llama()), seed=0).eval()
    real = StepDrafter.lookup

    def slow(drafter: StepDrafter, node: int, k: int) -> list[int]:
        time.sleep(0.05)
        return real(drafter, node, k)

    monkeypatch.setattr(StepDrafter, "lookup", slow)
    overheads = replay_script.measure_overheads(model, [[1, 2, 3, 1, 2]], max_new_tokens=8)
    assert StepDrafter.lookup is slow
    assert overheads["lookup"] >= 0.05
    assert overheads["step"] < 0.05, "the lookup's time was counted in the step's overhead"


def test_the_draft_overhead_is_timed_on_one_token_chains_per_call(
    replay_script: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timed decodes are a lookup's and a one-token chain's (each step one draft call), and
    a step's draft calls divide what it adds beyond a lookup step."""
    import casspec_ref.speculative as speculative

    timed: list[tuple[str, int | None, int]] = []
    real = speculative.generate_speculative

    def spy(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        if kwargs.get("on_step") is not None:
            schedule = kwargs.get("schedule")
            k = None if schedule is None else schedule.chain_k
            timed.append((kwargs["method"], k, result.stats["draft_forwards"]))
        return result

    monkeypatch.setattr(speculative, "generate_speculative", spy)
    model = random_init_(Transformer(tiny_llama()), seed=0).eval()
    replay_script.measure_overheads(model, [[1, 2, 3, 1, 2]], max_new_tokens=8)
    assert [(m, k) for m, k, _ in timed] == [("pld", None), ("chain", 1)]
    assert timed[0][2] == 0 and timed[1][2] > 0  # the chain drafted, the lookup did not


def test_a_replay_adds_the_measured_overheads_unless_told_otherwise(
    replay_script: ModuleType,
) -> None:
    from argparse import Namespace

    free = {"lookup": 2e-5, "recycle": 3e-6}  # measured only
    raw = {"overheads": {"step": 0.002, "draft": 0.004, **free}}
    chosen = replay_script.replay_overheads(Namespace(draft_overhead=None, step_overhead=None), raw)
    assert chosen == {
        "draft_overhead": 0.004,
        "step_overhead": 0.002,
        "lookup_overhead": 2e-5,
        "recycle_overhead": 3e-6,
    }
    given = Namespace(draft_overhead=0.5, step_overhead=None)
    assert replay_script.replay_overheads(given, raw) == {**chosen, "draft_overhead": 0.5}
    nothing = Namespace(draft_overhead=None, step_overhead=None)
    with pytest.raises(SystemExit, match="no measured draft, step, lookup, recycle overhead: re"):
        replay_script.replay_overheads(nothing, {})
    both = Namespace(draft_overhead=0.001, step_overhead=0.003)
    with pytest.raises(SystemExit, match="no measured lookup, recycle overhead: recost"):
        replay_script.replay_overheads(both, {})
    assert replay_script.replay_overheads(both, {"overheads": free}) == {
        **chosen,
        "draft_overhead": 0.001,
        "step_overhead": 0.003,
    }
