"""A policy carried across the first N held-out questions (first turns, greedy, 128 tokens), as
the bench carries it; per question: steps, the int8 level's proposals and outcomes, its pooled
estimate and cost, and how often the plan at the root considered it (scratch, stop 19)."""
import os, sys, collections
os.environ.setdefault("CASSPEC_KERNELS", "auto")
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import default_drafts, generate_speculative
import casspec_ref.dytc as D
from casspec_ref.tools.bench import load_questions, default_questions_path
model, tok = load_model()
qs = load_questions(default_questions_path("prompts_heldout"))[: int(sys.argv[1]) if len(sys.argv) > 1 else 6]
levels = [p.name for p in default_drafts(model)]
top = levels[-1]
policy = D.DyTCPolicy(levels)
roots = collections.Counter()
orig_plan = D.DyTCPolicy.plan
def plan(self, drafter, tree, drafts):
    r = orig_plan(self, drafter, tree, drafts)
    if drafter.size() == 1:
        roots[(r.draft, r.k) if r else None] += 1
    return r
D.DyTCPolicy.plan = plan
for q in qs:
    roots.clear()
    ids = tok.apply_chat_template([{"role": "user", "content": q.turns[0]}])
    r = generate_speculative(model, ids, 128, method="cas-spec", policy=policy, stop_ids=tok.stop_ids)
    s = r.stats
    print(q.question_id, q.category, "steps", s["steps"], "mat %.2f" % s["mat"], "proposed", s["proposed"].get(top, 0), "accepted", s["accepted"].get(top, 0),
          "| int8 a %.2f (%d) c %.2f" % (policy.alpha[top].alpha, policy.alpha[top].count, policy.cost(top)),
          "| root choices", dict(roots.most_common(5)), flush=True)
