"""Scratch: a fixed 'lookup, else int8 chain' schedule beside pld:5, chain and cas-spec."""
import sys, time, collections
sys.argv += [] 
import casspec_ref
import casspec_ref.speculative as sp
from casspec_ref.baselines.schedules import Baseline, _top
from casspec_ref.baselines.drafting import draft_chain
from casspec_ref.schedules import SCHEDULES
from casspec_ref.dytc import PLD
from casspec_ref.dsia.prompt_lookup import PromptLookupConfig
from casspec_ref.baselines import ScheduleOptions

class Hybrid(Baseline):
    name = "hybrid"
    def build(self, drafter):
        tokens = drafter.lookup(0, 5)
        if tokens:
            drafter.add_chain(0, tokens, PLD)
        else:
            draft_chain(drafter, _top(list(drafter.levels)), 0, self.options.chain_k)
SCHEDULES["hybrid"] = Hybrid
sp.METHODS = (*sp.METHODS, "hybrid")

from casspec_ref.io.weights import load_model
from casspec_ref.tools.bench import _make_runner, default_questions_path, load_questions
from casspec_ref.dytc import DyTCPolicy
which = sys.argv[1]; n = int(sys.argv[2])
model, tok = load_model()
qs = load_questions(default_questions_path({"bundled": "prompts", "heldout": "prompts_heldout"}[which]))
runners = {m: _make_runner(m, model, stop_ids=()) for m in ("ar", "pld:5", "chain:3", "cas-spec")}
def mk(k):
    def run(p, n):
        r = sp.generate_speculative(model, p, n, method="hybrid", schedule=ScheduleOptions(chain_k=k))
        return list(r.tokens), dict(r.stats)
    return run
runners["hybrid:3"] = mk(3); runners["hybrid:4"] = mk(4)
sec = collections.Counter(); toks = collections.Counter()
cat = collections.defaultdict(collections.Counter)
for q in qs:
    prompt = tok.apply_chat_template([{"role": "user", "content": q.turns[0]}])
    ref = None
    for name, run in runners.items():
        t = time.perf_counter(); out, st = run(prompt, n); dt = time.perf_counter() - t
        ref = out if ref is None else ref
        assert out == ref, name
        sec[name] += dt; toks[name] += len(out); cat[q.category][name] += dt
base = toks["ar"] / sec["ar"]
for name in runners:
    print(f"{name:10s} {toks[name]/sec[name]:6.1f} tok/s x{toks[name]/sec[name]/base:.3f}  " +
          " ".join(f"{c[:6]}:{cat[c]['ar']/cat[c][name]:.2f}" for c in cat))
