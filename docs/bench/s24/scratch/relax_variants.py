"""The relax rule on the real model (from s21/scratch/sampling_variants.py): under sampling
(temperature TEMP, default 0.7, top-p 0.9, 96 new tokens) or greedy (TEMP 0: 128 new tokens), the
naive loop, prompt lookup at k = 3, CAS-Spec (an estimate relaxes only on steps its draft was not
used) and CAS-Spec with the old rule (it relaxes on every step it is not tested), interleaved
question by question in one process over the held-out first turns, each policy carried across
questions; one warm-up question per method. Run in a checkout with relax_unused.diff applied. Usage: relax_variants.py [ROUNDS [TEMP]]."""
import os, sys, time
os.environ.setdefault("CASSPEC_KERNELS", "auto")
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import default_drafts, generate_speculative
from casspec_ref.dsia.prompt_lookup import PromptLookupConfig
from casspec_ref.dytc import DyTCPolicy
from casspec_ref.tools import bench

model, tok = load_model()
qs = bench.load_questions(bench.default_questions_path("prompts_heldout"))
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
temp = float(sys.argv[2]) if len(sys.argv) > 2 else 0.7
levels = default_drafts(model)
methods = {
    "ar": dict(method="ar"),
    "pld:3": dict(method="pld", pld=PromptLookupConfig(max_proposal=3)),
    **({} if temp else {"pld:5": dict(method="pld", pld=PromptLookupConfig(max_proposal=5)),
                        "pld-or-chain": dict(method="pld-or-chain")}),
    "cas-spec": dict(method="cas-spec", policy=DyTCPolicy([p.name for p in levels])),
    "cas-old": dict(method="cas-spec", policy=DyTCPolicy([p.name for p in levels])),
}
old = methods["cas-old"]["policy"]
old.observe_step = lambda tested, n, s, charged, drafted=(): DyTCPolicy.observe_step(old, tested, n, s, charged)
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
for target in ("cas-spec", "cas-old"):
    print(bench.format_paired(target, bench.paired_comparisons(runs, list(methods), target), n))
