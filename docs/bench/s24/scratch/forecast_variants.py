"""DyTC's forecast correction as shipped on branch calibrated-forecast (`DyTCPolicy.correction`),
on the real model: the naive loop, prompt lookup at k = 3, CAS-Spec (the correction on, the
default there) and CAS-Spec with it off (`DyTCConfig(forecast_bounds=(1.0, 1.0))`), interleaved
question by question in one process over the first turns of QUESTIONS (env; default
prompts_heldout, or prompts: the bundled set), each policy carried across questions; one warm-up
question per method. Greedy (TEMP 0, the default: 128 new tokens) or sampling (TEMP > 0: top-p
0.9, 96 tokens). Run in a checkout of that branch. Usage: [QUESTIONS=...] forecast_variants.py
[ROUNDS [TEMP]]."""
import os, sys, time
os.environ.setdefault("CASSPEC_KERNELS", "auto")
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import default_drafts, generate_speculative
from casspec_ref.dsia.prompt_lookup import PromptLookupConfig
from casspec_ref.dytc import DyTCConfig, DyTCPolicy
from casspec_ref.tools import bench

model, tok = load_model()
qs = bench.load_questions(bench.default_questions_path(os.environ.get("QUESTIONS", "prompts_heldout")))
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
temp = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
levels = default_drafts(model)
methods = {
    "ar": dict(method="ar"),
    "pld:3": dict(method="pld", pld=PromptLookupConfig(max_proposal=3)),
    "cas-spec": dict(method="cas-spec", policy=DyTCPolicy([p.name for p in levels])),
    "cas-off": dict(method="cas-spec", policy=DyTCPolicy([p.name for p in levels], DyTCConfig(forecast_bounds=(1.0, 1.0)))),
}
sample = dict(temperature=temp, top_p=0.9) if temp else {}
new_tokens = 96 if temp else 128
runs = []
def run(name, q, seed):
    ids = tok.apply_chat_template([{"role": "user", "content": q.turns[0]}])
    t = time.perf_counter()
    r = generate_speculative(model, ids, new_tokens, stop_ids=tok.stop_ids, seed=seed, **sample, **methods[name])
    return bench.QuestionRecord(q, [bench.TurnRecord(r.tokens, time.perf_counter() - t, r.stats)])
for name in methods:
    run(name, qs[0], 0)
for rnd in range(rounds):
    records = {m: [] for m in methods}
    for i, q in enumerate(qs):
        for name in (list(methods) if i % 2 == 0 else list(reversed(methods))):
            records[name].append(run(name, q, 1000 * rnd + i))
    runs.append(records)
n = len(qs)
for m in methods:
    low, high = bench.bootstrap_interval(lambda idx, m=m: bench.speedup_over(runs, m, "ar", idx), n)
    mat = sum(r.new_tokens for run in runs for r in run[m]) / max(1, sum(r.turns[0].stats.get("steps", r.new_tokens) for run in runs for r in run[m]))
    print(f"{m:10} speedup {bench.speedup_over(runs, m, 'ar', range(n)):.3f} [{low:.3f}, {high:.3f}]  MAT~{mat:.2f}")
for target in ("cas-spec", "cas-off"):
    print(bench.format_paired(target, bench.paired_comparisons(runs, list(methods), target), n))
p = methods["cas-spec"]["policy"]
print("forecast (predicted, accepted, f):", {d: (round(v[0], 1), round(v[1], 1), round(p.correction(d), 3)) for d, v in p.forecast.items()})
