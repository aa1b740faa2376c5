"""Scratch: a model draft's chain valued with two rates (first token, continuation), as prompt
lookup's is, in the replay."""
import json, sys
import casspec_ref.dytc as dy
import casspec_ref.tools.replay as rp
from casspec_ref.dytc import DyTCPolicy, AcceptanceEstimator
from casspec_ref.tools.replay import Costs, Recorded, replay, lookup_or_chain_schedule

orig_name = dy.outcome_name
def split_name(draft, parent_draft):
    if draft not in dy.FREE_DRAFTS and draft == parent_draft:
        return draft + "+"
    return orig_name(draft, parent_draft)
orig_post = DyTCPolicy.__post_init__
def post(self):
    orig_post(self)
    c = self.config
    for d in self.drafts:
        self.alpha[d + "+"] = AcceptanceEstimator(c.prior_alpha, weight=c.ema_weight, window=c.window, warmup=c.warmup)
for path in sys.argv[1:]:
    data = json.load(open(path)); recs = [Recorded(**r) for r in data["records"]]; raw = data["costs"]
    costs = Costs({int(t): s for t, s in raw["verify"].items()}, raw["draft"])
    levels = list(recs[0].drafts)
    ar = sum(replay(recs, costs).seconds.values())
    rule = sum(replay(recs, costs, lookup_or_chain_schedule(levels[-1], 5)).seconds.values())
    base = sum(replay(recs, costs, policy=DyTCPolicy(levels)).seconds.values())
    dy.outcome_name = rp.outcome_name = split_name; DyTCPolicy.__post_init__ = post
    pol = DyTCPolicy(levels)
    split = sum(replay(recs, costs, policy=pol).seconds.values())
    dy.outcome_name = rp.outcome_name = orig_name; DyTCPolicy.__post_init__ = orig_post
    print({k: (round(e.alpha, 2), e.count) for k, e in pol.alpha.items()})
    print(path, f"rule {ar/rule:.3f}  dytc {ar/base:.3f}  dytc, model drafts with two rates {ar/split:.3f}")
