"""``python -m casspec_ref``: see `casspec_ref.tools.cli`."""

import sys

from casspec_ref.tools.cli import main

sys.exit(main())
