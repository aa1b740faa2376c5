"""CAS-Spec under sampling on the held-out first turns with one policy carried across questions
(as the bench does): per question, what the policy believes of the int8 draft and what it drafted."""
import json, os, sys, time
os.environ.setdefault("CASSPEC_KERNELS", "auto")
import torch
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import generate_speculative, default_drafts
from casspec_ref.dytc import DyTCPolicy
from casspec_ref.tools.bench import default_questions_path
model, tok = load_model()
temp = float(sys.argv[1]) if len(sys.argv) > 1 else 0.7
qs = [json.loads(l) for l in open(default_questions_path("prompts_heldout"))]
levels = [p.name for p in default_drafts(model)]
policy = DyTCPolicy(levels)
kw = dict(temperature=temp, top_p=0.9 if temp > 0 else 1.0)
for i, q in enumerate(qs):
    prompt = tok.apply_chat_template([{"role": "user", "content": q["turns"][0]}])
    t = time.perf_counter()
    r = generate_speculative(model, prompt, 96, method="cas-spec", seed=i, stop_ids=tok.stop_ids, policy=policy, **kw)
    wall = time.perf_counter() - t
    s = r.stats
    top = "w8a8-fast"
    sizes = s["tree_sizes"]
    print(f"q{q['question_id']} {len(r.tokens)}tok {1000*wall/len(r.tokens):.1f}ms/tok steps {s['steps']} plain {sum(x==1 for x in sizes)} "
          f"int8 proposed {s['proposed'].get(top,0)} acc {s['accepted'].get(top,0)} | pld {s['proposed'].get('pld',0)}/{s['accepted'].get('pld',0)} | "
          f"alpha {policy.alpha[top].alpha:.2f} c {policy.cost(top) if len(policy.draft_cost[top]) else float('nan'):.2f} "
          f"draft_ms {1000*policy.draft_seconds(top):.1f} step_ms {1000*policy.step_seconds():.1f} v4/v1 {policy.verify_seconds(4)/policy.step_seconds():.2f} "
          f"pld#1 {policy.alpha['pld#1'].alpha:.2f} pld+ {policy.alpha['pld+'].alpha:.2f} margins {[round(policy.alpha[f'{top}@{b}'].alpha,2) for b in range(5)]}", flush=True)
