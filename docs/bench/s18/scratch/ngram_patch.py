"""Stop 16's patch (one lookup estimate per match length: a lookup's first token is learned
under `pld#N`, N its match length), as stop 17's `ngram_replay.py` applies it; importing it
patches the replay and DyTC, `STATE["on"]` switches it on (scratch, stop 18)."""
import os

_SRC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "s17", "scratch",
                    "ngram_replay.py")
# Stop 17's harness up to its command-line loop; its `from common import load` finds this
# directory's common.py, which provides the same `load`.
exec(open(_SRC).read().split("\nfor path in sys.argv[1:-1]:")[0])
