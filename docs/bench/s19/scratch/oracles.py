"""Partial oracles on a replay record: how much of hindsight's lead over the rule
pld-or-chain:3 comes from knowing (a) whether lookup's first token is right, (b) where the
model chain will fail, (c) both. Each is a fixed schedule that reads the recorded answer."""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "s18", "scratch"))
from common import load
from casspec_ref.tools import replay as R
from casspec_ref.dytc import PLD

def ok_len(d, node, tokens):
    n = 0
    for j, t in enumerate(tokens):
        i = d.index[node] + 1 + j
        if i >= len(d.rec.answer) or d.rec.answer[i] != t:
            break
        n += 1
    return n

def top_chain_len(d, level, node, k):
    """How many of the level's next greedy tokens (teacher forced) are right, up to k."""
    ids = d.rec.drafts[level][0]; n = 0
    for j in range(k):
        i = d.index[node] + 1 + j
        if i >= len(d.rec.answer) or ids[i][0] != d.rec.answer[i]:
            break
        n += 1
    return n

class Oracle:
    def __init__(self, know_pld, know_chain, k=3, lookup_k=5, level=None):
        self.know_pld, self.know_chain, self.k, self.lookup_k, self.level = know_pld, know_chain, k, lookup_k, level
    def build(self, d):
        level = self.level or d.levels[-1]
        toks = d.lookup(0, self.lookup_k)
        use_pld = bool(toks) and (not self.know_pld or ok_len(d, 0, toks) > 0)
        if use_pld:
            d.add_chain(0, toks, PLD); return
        k = self.k
        if self.know_chain:
            k = min(top_chain_len(d, level, 0, 8) + 1, 8)  # draft through the first wrong one
            if k == 1 and top_chain_len(d, level, 0, 1) == 0:
                return  # a plain step beats a wasted draft
        node = 0
        for _ in range(min(k, d.room(0))):
            kids = d.propose_children(level, node, 1)
            if not kids: break
            node = kids[0][0]


class ConfStop:
    """Not an oracle: pld-or-chain whose chain stops after a token the draft is unsure of
    (confidence below theta, or top-1 minus top-2 below `margin`), up to kmax."""
    def __init__(self, theta, kmax, margin=0.0, lookup_k=5):
        self.theta, self.kmax, self.margin, self.lookup_k = theta, kmax, margin, lookup_k
    def build(self, d):
        level = d.levels[-1]
        toks = d.lookup(0, self.lookup_k)
        if toks:
            d.add_chain(0, toks, PLD); return
        node = 0
        for _ in range(min(self.kmax, d.room(0))):
            ids, probs = d.predictions(level, node)
            kids = d.propose_children(level, node, 1)
            if not kids: break
            node = kids[0][0]
            if probs[0] < self.theta or probs[0] - probs[1] < self.margin:
                break
if __name__ == "__main__":
    recs, costs, levels = load(sys.argv[1], sys.argv[2])
    ar = sum(R.replay(recs, costs).seconds.values())
    for name, s in [("rule k3", Oracle(False, False)), ("know pld", Oracle(True, False)),
                    ("know chain", Oracle(False, True)), ("know both", Oracle(True, True))]:
        print(f"{name:12s} {ar / sum(R.replay(recs, costs, schedule=s).seconds.values()):.3f}")

    if len(sys.argv) > 3:
        for th in ():
            for km in ():
                s = ConfStop(th, km)
                print(f"conf<{th} kmax {km}: {ar / sum(R.replay(recs, costs, schedule=s).seconds.values()):.3f}")
        for mg in (0.03, 0.05, 0.1):
            for km in (6, 8, 12):
                s = ConfStop(0, km, mg)
                print(f"margin<{mg} kmax {km}: {ar / sum(R.replay(recs, costs, schedule=s).seconds.values()):.3f}")
