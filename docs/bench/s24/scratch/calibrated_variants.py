"""The self-calibrating DyTC (scratch/calibrated.py) on the real model: under greedy decoding (TEMP
0, the default here: 128 new tokens) or sampling (TEMP > 0: top-p 0.9, 96 tokens), the naive loop,
prompt lookup at k = 3, CAS-Spec and CAS-Spec with `CalibratedPolicy`, interleaved question by
question in one process over the first turns of QUESTIONS (env; default prompts_heldout, or
prompts: the bundled set), each policy carried across questions; one warm-up question per
method. Usage: [QUESTIONS=...] calibrated_variants.py [ROUNDS [TEMP]]."""
import os, sys, time
os.environ.setdefault("CASSPEC_KERNELS", "auto")
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import default_drafts, generate_speculative
from casspec_ref.dsia.prompt_lookup import PromptLookupConfig
from casspec_ref.dytc import DyTCPolicy
from casspec_ref.tools import bench
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from calibrated import CalibratedPolicy

model, tok = load_model()
qs = bench.load_questions(bench.default_questions_path(os.environ.get("QUESTIONS", "prompts_heldout")))
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
temp = float(sys.argv[2]) if len(sys.argv) > 2 else 0.0
levels = default_drafts(model)
methods = {
    "ar": dict(method="ar"),
    "pld:3": dict(method="pld", pld=PromptLookupConfig(max_proposal=3)),
    "cas-spec": dict(method="cas-spec", policy=DyTCPolicy([p.name for p in levels])),
    "cas-calib": dict(method="cas-spec", policy=CalibratedPolicy([p.name for p in levels])),
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
for target in ("cas-spec", "cas-calib"):
    print(bench.format_paired(target, bench.paired_comparisons(runs, list(methods), target), n))
p = methods["cas-calib"]["policy"]
print("calibration (predicted, accepted, f):", {d: (round(v[0], 1), round(v[1], 1), round(p.factor(d), 3)) for d, v in p.sums.items()})
