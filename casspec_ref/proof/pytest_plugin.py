"""The pytest fixture ``assert_lossless`` (`casspec_ref.proof.assertions.assert_lossless`).

Enable it in a ``conftest.py`` with ``pytest_plugins = ["casspec_ref.proof.pytest_plugin"]``,
then ``def test_mine(assert_lossless): assert_lossless(my_verify)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from casspec_ref.proof.assertions import assert_lossless as _assert_lossless


@pytest.fixture
def assert_lossless() -> Callable[..., Any]:
    """The `assert_lossless` function: check a verifier, fail with the counterexample."""
    return _assert_lossless
