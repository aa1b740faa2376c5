"""What DyTC learns on SmolLM2 over the held-out set (first turns, greedy, 128 new tokens, one
policy carried across questions as the bench carries it): per question, the policy's cost curve
(ms by tree size), each model draft's learned seconds a call and c, the main alphas, the tree
sizes it verified, and the wall time of CAS-Spec against prompt lookup (k=5) and the naive loop
on the same question. Usage: OMP_NUM_THREADS=2 python trace_policy.py [OUT.json]"""
import json, os, sys, time
os.environ.setdefault("CASSPEC_KERNELS", "auto")
from collections import Counter
from casspec_ref.dytc import DyTCPolicy
from casspec_ref.generate import generate_ar
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import default_drafts, generate_speculative
from casspec_ref.tools.bench import default_questions_path
from casspec_ref.dsia.prompt_lookup import PromptLookupConfig

model, tok = load_model()
qs = [json.loads(l) for l in open(default_questions_path("prompts_heldout"))]
policy = DyTCPolicy([p.name for p in default_drafts(model)])
rows = []
for q in qs:
    p = tok.apply_chat_template([{"role": "user", "content": q["turns"][0]}])
    t = time.perf_counter(); ar = generate_ar(model, p, 128, stop_ids=tok.stop_ids); t_ar = time.perf_counter() - t
    t = time.perf_counter()
    pl = generate_speculative(model, p, 128, method="pld", stop_ids=tok.stop_ids, pld=PromptLookupConfig(max_proposal=5))
    t_pld = time.perf_counter() - t
    sizes = []
    r = generate_speculative(model, p, 128, method="cas-spec", stop_ids=tok.stop_ids, policy=policy)
    t_cas = r.timing["total_s"]
    assert r.tokens == ar.tokens == pl.tokens
    curve = {k: round(1e3 * v, 1) for k, v in sorted(policy.verify_cost.seconds.items())}
    drafts = {d: (round(1e3 * policy.draft_seconds(d), 1), round(policy.cost(d), 2)) for d in policy.drafts}
    alphas = {n: round(e.alpha, 2) for n, e in policy.alpha.items() if e.count > 0 and "@" not in n}
    row = dict(q=q["question_id"], cat=q["category"], n=len(ar.tokens), ar=round(t_ar, 2), pld5=round(t_pld, 2),
               cas=round(t_cas, 2), cas_vs_pld=round(t_pld / t_cas, 3), cas_vs_ar=round(t_ar / t_cas, 3),
               mat=round(r.stats["mat"], 2), sizes=dict(sorted(Counter(r.stats["tree_sizes"]).items())),
               verify_ms_per_step=round(1e3 * r.stats["time_verify_s"] / max(1, r.stats["target_forwards"]), 1),
               draft_s=round(r.stats["time_draft_s"], 2), proposed=r.stats["proposed"], accepted=r.stats["accepted"],
               curve=curve, drafts=drafts, alphas=alphas)
    rows.append(row)
    print(json.dumps(row), flush=True)
if len(sys.argv) > 1:
    json.dump(rows, open(sys.argv[1], "w"), indent=1)
