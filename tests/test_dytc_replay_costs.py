"""The replay's cost measurement (benchmarks/dytc_replay.py): the forms it measures in are the
ones it names, and the model's own setting is left as it was."""

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
    model = random_init_(Transformer(tiny_llama()), seed=0).eval()
    model.shape_invariant = plain  # the opposite of what is measured: it must come back
    seen: list[bool] = []
    forward = model.forward

    def spying_forward(*args: Any, **kwargs: Any) -> Any:
        seen.append(model.shape_invariant)
        return forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", spying_forward)
    costs = replay_script.measure_costs(model, [], cached=8, repeats=1, plain=plain)
    assert costs["forms"] == ("plain" if plain else "exact")
    assert seen and set(seen) == {not plain}, "a forward ran in the other forms"
    assert model.shape_invariant is plain, "the model's setting was not restored"
    assert sorted(costs["verify"]) == list(range(1, 33)) and costs["draft"] == {}
