"""The schedules CAS-Spec is compared with (layer 1: imports the core only). Importing this
package registers them in `casspec_ref.schedules.SCHEDULES`, so that `generate_speculative` and
the CLI know their method names; `casspec_ref/__init__.py` imports it."""

from casspec_ref.baselines.drafting import draft_chain, review
from casspec_ref.baselines.schedules import BASELINES, ScheduleOptions
from casspec_ref.schedules import SCHEDULES

SCHEDULES.update((baseline.name, baseline) for baseline in BASELINES)

__all__ = ["BASELINES", "ScheduleOptions", "draft_chain", "review"]
