"""Shared pytest configuration: Hypothesis profiles and markers.

Profiles (select with HYPOTHESIS_PROFILE=...):
- ``ci`` (default under CI=true): derandomized, so that a CI run is reproducible; the examples
  are still generated, only from a fixed seed.
- ``dev``: fewer examples, for a fast edit-test loop.
- ``thorough``: many examples, for hunting counterexamples before pinning them with @example.
- ``mutation``: derandomized with few examples, for `make mutation` (each surviving mutant runs
  every covering test, so the examples are few; the pinned @example's always run).
"""

import os

import pytest
from hypothesis import HealthCheck, Phase, settings

# Tests never time anything: the per-machine kernel table is not measured at model load, the
# default forms run (tests/test_kernels.py installs fixed tables explicitly).
os.environ["CASSPEC_KERNELS"] = "default"
# Triton kernels (the oracle's Triton tests) run in Triton's interpreter; the switch is read when
# a kernel is defined, triton's own library included, and transformers imports triton early.
os.environ.setdefault("TRITON_INTERPRET", "1")

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "dev", max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "mutation",
    derandomize=True,
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],  # no shrinking: a failure is enough
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--thorough", action="store_true", help="also run the tests marked thorough (long)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--thorough"):
        return
    skip = pytest.mark.skip(reason="long; runs with --thorough (make thorough)")
    for item in items:
        if "thorough" in item.keywords:
            item.add_marker(skip)
