"""Shared pytest configuration: Hypothesis profiles and markers.

Profiles (select with HYPOTHESIS_PROFILE=...):
- ``ci`` (default under CI=true): derandomized, so that a CI run is reproducible; the examples
  are still generated, only from a fixed seed.
- ``dev``: fewer examples, for a fast edit-test loop.
- ``thorough``: many examples, for hunting counterexamples before pinning them with @example.
"""

import os

from hypothesis import HealthCheck, settings

# Tests never time anything: the per-machine kernel table is not measured at model load, the
# default forms run (tests/test_kernels.py installs fixed tables explicitly).
os.environ["CASSPEC_KERNELS"] = "default"

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
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
