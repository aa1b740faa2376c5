"""The DyTC simulator the tests import as ``dytc_simulator``: `casspec_ref.tools.dytc_simulator`.

This module makes that name the package's module itself (not a copy of its names), so that a
test which replaces ``dytc_simulator.SimDrafter`` (tests/test_dytc_presets.py) changes the class
`run_dytc` builds.
"""

from __future__ import annotations

import sys

from casspec_ref.tools import dytc_simulator

sys.modules[__name__] = dytc_simulator
