"""Why a carried policy stops drafting with the int8 level: at each root decision of question
N (after questions 1..N-1), the int8 option's best predicted EWIF, the lookup's, and the costs."""
import os, sys
os.environ.setdefault("CASSPEC_KERNELS", "auto")
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import default_drafts, generate_speculative
import casspec_ref.dytc as D
from casspec_ref.tools.bench import load_questions, default_questions_path
model, tok = load_model()
n = int(sys.argv[1]) if len(sys.argv) > 1 else 7
qs = load_questions(default_questions_path("prompts_heldout"))[:n]
levels = [p.name for p in default_drafts(model)]
top = levels[-1]
policy = D.DyTCPolicy(levels)
LOG = [False]
orig_plan = D.DyTCPolicy.plan
def plan(self, drafter, tree, drafts):
    r = orig_plan(self, drafter, tree, drafts)
    if LOG[0] and drafter.size() == 1:
        room = min(self.config.max_k, drafter.room(0), self.config.max_tree_size - 1)
        base = (1.0, drafter.seconds(), 1, "root", drafter.match(0))
        e = self._score(0, 1.0, top, room, base)
        vs = {t: round(1000 * self.verify_seconds(t), 1) for t in (1, 2, 3, 4, 5)}
        print("choice", r and (r.draft, r.k, round(r.predicted_ewif, 3)), "| int8 best k", e.k, "ewif %.3f" % e.predicted_ewif,
              "a %.2f c %.2f" % (self.alpha[top].alpha, self.cost(top)), "draft ms %.1f" % (1000 * self.draft_seconds(top)), "verify", vs,
              "spent %.1f ms" % (1000 * drafter.seconds()), "budget %.4f" % self.explore_budget)
    return r
D.DyTCPolicy.plan = plan
for i, q in enumerate(qs):
    LOG[0] = i == n - 1
    ids = tok.apply_chat_template([{"role": "user", "content": q.turns[0]}])
    generate_speculative(model, ids, 128, method="cas-spec", policy=policy, stop_ids=tok.stop_ids)
