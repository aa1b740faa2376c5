"""What a fresh DyTC policy does on the first question (scratch, stop 19): per step, the tree's
size and drafts, and the int8 level's cost estimate c as DyTC sees it."""
import os, sys
os.environ.setdefault("CASSPEC_KERNELS", "auto")
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import default_drafts, generate_speculative
from casspec_ref.dytc import DyTCPolicy
from casspec_ref.tools.bench import load_questions, default_questions_path
model, tok = load_model()
qs = load_questions(default_questions_path(sys.argv[1] if len(sys.argv) > 1 else "prompts_heldout"))
q = qs[0]
ids = tok.apply_chat_template([{"role": "user", "content": q.turns[0]}])
levels = [p.name for p in default_drafts(model)]
policy = DyTCPolicy(levels)
steps = []
def on_step(t):
    c = {n: (round(policy.cost(n), 2) if len(policy.draft_cost[n]) else None) for n in levels}
    steps.append((len(t.tree), sorted(set(t.sources[1:])), c, round(policy.alpha[levels[-1]].alpha, 2)))
r = generate_speculative(model, ids, 128, method="cas-spec", policy=policy, stop_ids=tok.stop_ids, on_step=on_step)
for i, s in enumerate(steps[:40]):
    print(i, s)
print("forwards", r.stats["target_forwards"], {k: round(v, 3) for k, v in r.stats.items() if k.startswith("time_")})
