"""Fixed rules replayed on the s16 records (scratch, stop 17): which cheap rule beats pld-or-chain?"""
from common import load
import sys
from casspec_ref.tools.replay import replay
from casspec_ref.dytc import PLD

recs, costs, _ = load(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
TOP = list(recs[0].drafts)[-1]

class Rule:
    def __init__(self, lookup_k=5, chain_k=5, min_ngram=1, tau=0.0, extend=0, both=False, conf_tau2=None):
        self.__dict__.update(locals()); del self.__dict__["self"]
    def chain(self, d, node, k):
        for i in range(k):
            if d.room(node) < 1:
                break
            ids, probs = d.predictions(TOP, node)
            if i > 0 and probs[0] < self.tau:
                break
            node = d.propose_children(TOP, node, 1)[0][0]
        return node
    def build(self, d):
        m = d.pld.match(self.lookup_k, d._path(0))
        use = m.tokens and m.ngram >= self.min_ngram
        if use:
            d.add_chain(0, list(m.tokens), PLD)
        if not use or self.both:
            node = self.chain(d, 0, self.chain_k)
            if self.extend:
                d.add_chain(node, d.lookup(node, self.extend), PLD)

def run(name, rule):
    r = replay(recs, costs, rule)
    ar = replay(recs, costs)
    print(f"{name:42s} {sum(ar.seconds.values()) / sum(r.seconds.values()):.3f}", flush=True)

run("rule (pld-or-chain:5)", Rule())
run("rule, chain 4", Rule(chain_k=4))
for k in (5, 8):
    for tau in (0.1, 0.3):
        run(f"chain_k={k}, stop below confidence {tau}", Rule(chain_k=k, tau=tau))
for mn in (2, 3):
    run(f"lookup only on a {mn}-token match or longer", Rule(min_ngram=mn))
run("lookup after the chain, up to 4", Rule(extend=4))
run("lookup 2+ match, lookup after chain", Rule(min_ngram=2, extend=4))
run("lookup and chain, both, every step", Rule(both=True))

class PldOracle(Rule):
    """Knows whether lookup's first token is right (hindsight); else as the rule."""
    def build(self, d):
        m = d.pld.match(self.lookup_k, d._path(0))
        i = d.index[0] + 1
        if m.tokens and i < len(d.rec.answer) and m.tokens[0] == d.rec.answer[i]:
            d.add_chain(0, list(m.tokens), PLD)
        else:
            node = self.chain(d, 0, self.chain_k)
            if self.extend:
                d.add_chain(node, d.lookup(node, self.extend), PLD)

class ChainOracle(Rule):
    """Rule, but the int8 chain stops exactly at its first wrong token (hindsight)."""
    def chain(self, d, node, k):
        for i in range(k):
            if d.room(node) < 1:
                break
            ids, _ = d.predictions(TOP, node)
            j = d.index[node] + 1
            node = d.propose_children(TOP, node, 1)[0][0]
            if j >= len(d.rec.answer) or ids[0] != d.rec.answer[j]:
                break
        return node

run("oracle: lookup's first token known", PldOracle())
for k in (5, 8, 12):
    run(f"oracle: chain stops at its error, k={k}", ChainOracle(chain_k=k))
