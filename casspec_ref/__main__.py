"""``python -m casspec_ref``: see `casspec_ref.cli`."""

import sys

from casspec_ref.cli import main

sys.exit(main())
