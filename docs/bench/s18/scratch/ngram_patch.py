"""Stop 16's patch (one lookup estimate per match length: a lookup's first token is learned
under `pld#N`, N its match length), as stop 17's `ngram_replay.py` applies it; importing it
patches the replay and DyTC, `STATE["on"]` switches it on (scratch, stop 18)."""

import sys
from casspec_ref.dytc import PLD, DyTCPolicy, AcceptanceEstimator
import casspec_ref.tools.replay as rp
from casspec_ref.tools.replay import replay

STATE = {"on": False, "drafter": None}

orig_lookup = rp.ReplayDrafter.lookup
def lookup(self, node, k):
    m = self.pld.match(k, self._path(node))
    self._charge(PLD, rp.LOOKUP_SECONDS)
    if not hasattr(self, "ngram"): self.ngram = {}
    self.ngram[node] = m.ngram
    return list(m.tokens)
rp.ReplayDrafter.lookup = lookup

def name_for(drafter, node_parent):
    n = getattr(drafter, "ngram", {}).get(node_parent, 0)
    return f"pld#{n}"

orig_verify = rp.ReplayDrafter.verify
def verify(self):
    acc, tested = orig_verify(self)
    if not STATE["on"]: return acc, tested
    # rename PLD first-token outcomes by the match length at their parent
    out, answer, node = [], self.rec.answer, 0
    # recompute in the same order as orig_verify
    i = 0
    node = 0
    while True:
        nxt = None
        for child in self.children[node]:
            ok = self.index[child] < len(answer) and self.tokens[child] == answer[self.index[child]]
            if self.primary[child]:
                name = tested[i][0]; i += 1
                if name == PLD: name = name_for(self, node)
                out.append((name, ok))
            nxt = child if ok and nxt is None else nxt
        if nxt is None: return acc, out
        node = nxt
rp.ReplayDrafter.verify = verify

orig_grow = DyTCPolicy.grow
def grow(self, drafter, drafts):
    STATE["drafter"] = drafter
    return orig_grow(self, drafter, drafts)
DyTCPolicy.grow = grow

def swap(self, node):
    d = STATE["drafter"]
    key = name_for(d, node)
    if key not in self.alpha:
        c = self.config
        self.alpha[key] = AcceptanceEstimator(c.prior_pld_alpha, weight=c.ema_weight, window=c.window, warmup=c.warmup)
    return key

orig_score = DyTCPolicy._score
def _score(self, leaf, cum, draft, room, base):
    if STATE["on"] and draft == PLD and base[3] != PLD:
        saved = self.alpha[PLD]; self.alpha[PLD] = self.alpha[swap(self, leaf)]
        try: return orig_score(self, leaf, cum, draft, room, base)
        finally: self.alpha[PLD] = saved
    return orig_score(self, leaf, cum, draft, room, base)
DyTCPolicy._score = _score

orig_record = DyTCPolicy._record
def _record(self, tree, draft, added):
    if STATE["on"] and draft == PLD and added:
        parent = added[0][1]
        if tree.drafts[parent] != PLD:
            saved = self.alpha[PLD]; self.alpha[PLD] = self.alpha[swap(self, parent)]
            try: return orig_record(self, tree, draft, added)
            finally: self.alpha[PLD] = saved
    return orig_record(self, tree, draft, added)
DyTCPolicy._record = _record

