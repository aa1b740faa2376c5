"""benchmarks/dytc_replay.py with the old relax rule (an estimate relaxes on every step it is not
tested: the replay's drafter reports no drafted names). Run in a checkout with
relax_unused.diff applied. Usage: python replay_relax.py ARGS...
(the replay's own arguments)."""
import runpy, sys
from casspec_ref.tools.replay import ReplayDrafter
ReplayDrafter.drafted = lambda self: []
sys.argv = ["dytc_replay.py", *sys.argv[1:]]
runpy.run_path("benchmarks/dytc_replay.py", run_name="__main__")
