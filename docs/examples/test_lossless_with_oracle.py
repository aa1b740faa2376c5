"""An example test file for another project's suite: one line per verifier.

Run it with ``pytest docs/examples/test_lossless_with_oracle.py`` (tests/test_oracle_signatures.py
runs it in CI from a directory outside the package). The fixture form needs
``pytest_plugins = ["casspec_ref.proof.pytest_plugin"]`` in the suite's root conftest.py.
"""

from __future__ import annotations

import functools

import pytest
from transformers.generation.utils import _speculative_sampling

from casspec_ref.proof import assert_lossless

SMALL = {"families": ["random", "top_k"], "vocab": [2, 3], "k": [1, 2]}


def test_transformers_speculative_sampling_is_lossless() -> None:
    assert_lossless(_speculative_sampling, signature="hf", **SMALL)


def test_the_ensemble_weight_is_caught_with_a_counterexample() -> None:
    lossy = functools.partial(_speculative_sampling, assistant_ensemble_weight=0.5)
    with pytest.raises(AssertionError, match="first_difference"):
        assert_lossless(lossy, signature="hf", families=["random"], vocab=[2])
