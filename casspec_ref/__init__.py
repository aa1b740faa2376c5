"""casspec_ref: a pedagogical pure-PyTorch reference implementation of CAS-Spec."""

import casspec_ref.baselines  # noqa: F401  (registers the baseline schedules' method names)

__version__ = "0.1.0"
