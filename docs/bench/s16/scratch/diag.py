"""Scratch: cas-spec vs hybrid:4 step anatomy on one prompt set (first turns)."""
import sys, time, collections
exec(open("/tmp/s16/hybrid.py").read().split("from casspec_ref.io.weights")[0])
from casspec_ref.io.weights import load_model
from casspec_ref.tools.bench import default_questions_path, load_questions
from casspec_ref.speculative import default_drafts
from casspec_ref.dytc import DyTCPolicy
which = sys.argv[1]; n = int(sys.argv[2]); lim = int(sys.argv[3]) if len(sys.argv) > 3 else 0
model, tok = load_model()
qs = load_questions(default_questions_path({"bundled": "prompts", "heldout": "prompts_heldout"}[which]))
if lim: qs = qs[:lim]
import os
from casspec_ref.dytc import FREE_DRAFTS
if os.environ.get("FIX") == "warm":
    def untimed(self, drafts):
        return [d for d in drafts if d not in FREE_DRAFTS and (self.draft_cost[d].stale(1) or self.alpha[d].count < self.config.warmup)]
    DyTCPolicy.untimed = untimed
policy = DyTCPolicy([p.name for p in default_drafts(model)])
agg = {m: collections.Counter() for m in ("cas-spec", "hybrid")}
kinds = {m: collections.Counter() for m in agg}
ktok = {m: collections.Counter() for m in agg}
def tracer(m):
    def on_step(tr):
        srcs = set(tr.sources[1:])
        kind = "+".join(sorted(srcs)) or "plain"
        kinds[m][kind] += 1; ktok[m][kind] += len(tr.result.accepted) + 1
    return on_step
for q in qs:
    prompt = tok.apply_chat_template([{"role": "user", "content": q.turns[0]}])
    for m in [x for x in agg if x != "hybrid" or not os.environ.get("NOHYB")]:
        opts = dict(policy=policy) if m == "cas-spec" else dict(schedule=ScheduleOptions(chain_k=4))
        t = time.perf_counter()
        r = sp.generate_speculative(model, prompt, n, method=m, on_step=tracer(m), **opts)
        agg[m]["wall"] += time.perf_counter() - t
        for k in ("steps", "time_draft_s", "time_plan_s", "time_verify_s", "draft_forwards"):
            agg[m][k] += r.stats.get(k, 0)
        agg[m]["tokens"] += len(r.tokens)
for m, a in agg.items():
    s = a["steps"]
    if not s: continue
    print(f"{m}: {a['tokens']/a['wall']:.1f} tok/s, {a['tokens']/s:.2f} tok/step, ms/step draft {1e3*a['time_draft_s']/s:.2f} (plan {1e3*a['time_plan_s']/s:.2f}) verify {1e3*a['time_verify_s']/s:.2f}, draft fwd/step {a['draft_forwards']/s:.2f}")
    for kind, c in kinds[m].most_common(12):
        print(f"    {kind:45s} {c:5d} steps  {ktok[m][kind]/c:.2f} tok/step")
print({k: (round(e.alpha, 2), e.count) for k, e in policy.alpha.items()})
print({k: round(1e3 * c.predict(1), 2) for k, c in policy.draft_cost.items() if len(c)})
print({k: round(1e3 * v, 1) for k, v in sorted(policy.verify_cost.seconds.items())})
