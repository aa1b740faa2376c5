"""Scratch: DyTC variants vs hybrid:4 (lookup, else int8 chain of 4), first turns, interleaved.
argv: set, new tokens, variants 'name|fix|field=val,field=val' ..."""
import sys, time, collections, os
exec(open("/tmp/s16/hybrid.py").read().split("from casspec_ref.io.weights")[0])
from casspec_ref.io.weights import load_model
from casspec_ref.tools.bench import default_questions_path, load_questions
from casspec_ref.speculative import default_drafts
from casspec_ref.dytc import DyTCPolicy, DyTCConfig, FREE_DRAFTS
import casspec_ref.dytc as dy
which = sys.argv[1]; n = int(sys.argv[2]); specs = sys.argv[3:]
model, tok = load_model()
qs = load_questions(default_questions_path({"bundled": "prompts", "heldout": "prompts_heldout"}[which]))
levels = [p.name for p in default_drafts(model)]
orig_untimed = DyTCPolicy.untimed
def warm_untimed(self, drafts):
    return [d for d in drafts if d not in FREE_DRAFTS and (self.draft_cost[d].stale(1) or self.alpha[d].count < self.config.warmup)]
from casspec_ref.dytc import AcceptanceEstimator
new_opt = AcceptanceEstimator._optimistic
def old_opt(self):
    return (self.prior + self._sum) / (1.0 + self.count)
variants = {}
for spec in specs:
    name, fix, fields = (spec.split("|") + ["", ""])[:3]
    kw = {}
    for item in filter(None, fields.split(",")):
        k, v = item.split("="); kw[k] = float(v) if "." in v else int(v)
    AcceptanceEstimator._optimistic = old_opt if "old" in fix else new_opt
    variants[name] = (fix, DyTCPolicy(levels, DyTCConfig(**kw)))
names = ["ar", "hybrid", *variants]
agg = {m: collections.Counter() for m in names}
cat = collections.defaultdict(collections.Counter)
for q in qs:
    prompt = tok.apply_chat_template([{"role": "user", "content": q.turns[0]}])
    ref = None
    for m in names:
        t = time.perf_counter()
        if m == "ar":
            r = sp.generate_speculative(model, prompt, n, method="ar")
        elif m == "hybrid":
            r = sp.generate_speculative(model, prompt, n, method="hybrid", schedule=ScheduleOptions(chain_k=4))
        else:
            fix, pol = variants[m]
            from casspec_ref.dytc import AcceptanceEstimator
            AcceptanceEstimator._optimistic = old_opt if "old" in fix else new_opt
            r = sp.generate_speculative(model, prompt, n, method="cas-spec", policy=pol)
        dt = time.perf_counter() - t
        out = list(r.tokens); ref = out if ref is None else ref
        assert out == ref, m
        a = agg[m]; a["wall"] += dt; a["tokens"] += len(out); cat[q.category][m] += dt
        for k in ("steps", "time_draft_s", "time_plan_s", "time_verify_s", "draft_forwards"):
            a[k] += r.stats.get(k, 0)
base = agg["ar"]["tokens"] / agg["ar"]["wall"]
print(f"{which}, {len(qs)} first turns, {n} tokens; ar {base:.1f} tok/s")
for m in names:
    a = agg[m]; s = max(1, a["steps"]); rate = a["tokens"] / a["wall"]
    print(f"{m:14s} x{rate/base:.3f} {a['tokens']/s:5.2f} tok/step  ms/step draft {1e3*a['time_draft_s']/s:5.2f} (plan {1e3*a['time_plan_s']/s:4.2f}) verify {1e3*a['time_verify_s']/s:5.2f} fwd/step {a['draft_forwards']/s:.2f}  " + " ".join(f"{c[:5]}:{cat[c]['ar']/cat[c][m]:.2f}" for c in cat))
for m, (fix, pol) in variants.items():
    print(m, {k: (round(e.alpha, 2), e.count) for k, e in pol.alpha.items()})
