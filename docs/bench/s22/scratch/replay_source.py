"""Replay (stop 17's records, a costs snapshot) of DyTC with lookup's first-token estimate split
also by where the copied continuation starts (the prompt or the answer so far), against the
shipped DyTC and the best fixed schedule. A patch of the replay's drafter and of `outcome_name`,
not of the package. Usage: python replay_source.py RECORD COSTS"""
import json, sys
import casspec_ref.dytc as dytc
import casspec_ref.tools.replay as rp
from casspec_ref.baselines import ScheduleOptions
from casspec_ref.dytc import PLD, AcceptanceEstimator, DyTCPolicy
from casspec_ref.schedules import SCHEDULES, ScheduleSpec

data = json.load(open(sys.argv[1]))
records = [rp.Recorded(**r) for r in data["records"]]
costs = rp.Costs.from_json(json.load(open(sys.argv[2]))["costs"])
levels = list(records[0].drafts)
shipped_name, shipped_lookup = dytc.outcome_name, rp.ReplayDrafter.lookup
PROMPT = 10  # match + PROMPT: the lookup copied from the prompt

def name_by_source(draft, parent_draft, match=0, margin=None):
    if draft == PLD and parent_draft != PLD and match > 0:
        return f"{PLD}#{min(match % PROMPT, 3)}" + ("p" if match >= PROMPT else "")
    return shipped_name(draft, parent_draft, match, margin)

def lookup_by_source(self, node, k):
    self._charge(PLD, rp.LOOKUP_SECONDS)
    found = self.pld.match(k, self._path(node))
    self._matched[node] = found.ngram + (PROMPT if 0 <= found.source_start < len(self.rec.prompt) else 0)
    return list(found.tokens)

def run(split: bool):
    dytc.outcome_name = rp.outcome_name = name_by_source if split else shipped_name
    rp.ReplayDrafter.lookup = lookup_by_source if split else shipped_lookup
    policy = DyTCPolicy(levels)
    if split:
        cfg = policy.config
        for m in (1, 2, 3):
            policy.alpha[f"{PLD}#{m}p"] = AcceptanceEstimator(cfg.prior_pld_alpha, weight=cfg.ema_weight, window=cfg.window, warmup=0)
    out = rp.replay(records, costs, policy=policy)
    names = [n for n in policy.alpha if n.startswith(PLD + "#")]
    print("  ", ", ".join(f"{n} {policy.alpha[n].alpha:.2f} ({policy.alpha[n].count})" for n in names))
    return out

ar = rp.replay(records, costs)
total = lambda r: sum(r.seconds.values())
fixed = {}
for k in (3, 4, 5):
    fixed[f"pld-or-chain:{k}"] = rp.replay(records, costs, SCHEDULES["pld-or-chain"](ScheduleSpec(levels, 0, options=ScheduleOptions(chain_k=k))))
best = min(fixed, key=lambda n: total(fixed[n]))
print(f"{sys.argv[1]} with the costs of {sys.argv[2]}: best fixed {best} {total(ar) / total(fixed[best]):.3f}")
for split in (False, True, False, True):
    r = run(split)
    print(f"DyTC {'by match and source' if split else 'by match (shipped)':22s} {total(ar) / total(r):.3f}  over best fixed {total(fixed[best]) / total(r):.3f}")
