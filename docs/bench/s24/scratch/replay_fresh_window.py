"""benchmarks/dytc_replay.py with the free drafts' acceptance windows restarted at each question:
the window then holds M (env, default 10) pseudo-outcomes at the carried estimate, so its mean,
which the next EMA updates move towards, is (M x carried + this question's outcomes) / (M + n):
does an estimate that knows the generation it is in predict lookups better?
Usage: [M=10] python replay_fresh_window.py ARGS... (the replay's own arguments)."""
import os, runpy, sys
from collections import deque
import casspec_ref.tools.replay as replay
from casspec_ref.dytc import FREE_DRAFTS, DyTCPolicy, pooled

policies = []
_post = DyTCPolicy.__post_init__


def post_init(self):
    _post(self)
    policies.append(self)


DyTCPolicy.__post_init__ = post_init


class FreshLookup(replay.PromptLookup):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        m = int(os.environ.get("M", "10"))
        for policy in policies:  # a new question: every policy's free-draft windows restart
            for name, e in policy.alpha.items():
                if pooled(name).rstrip("+") in FREE_DRAFTS and e.count > 0:
                    e._recent = deque([e.alpha] * m, maxlen=e._recent.maxlen)


replay.PromptLookup = FreshLookup
sys.argv = ["dytc_replay.py", *sys.argv[1:]]
runpy.run_path("benchmarks/dytc_replay.py", run_name="__main__")
