"""DyTC's planning time a step on SmolLM2 (`time_plan_s` / steps: drafting time not spent in draft
forwards or lookups), CAS-Spec over the held-out first turns, greedy, 64 new tokens, one policy
carried as the bench does. Usage: OMP_NUM_THREADS=2 [PYTHONPATH=OLD_WORKTREE] python plan_real.py
(an old commit's code: a git worktree of it on PYTHONPATH)."""
import json, os
os.environ.setdefault("CASSPEC_KERNELS", "auto")
import casspec_ref
from casspec_ref.dytc import DyTCPolicy
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import default_drafts, generate_speculative
from casspec_ref.tools.bench import default_questions_path
model, tok = load_model()
qs = [json.loads(l) for l in open(default_questions_path("prompts_heldout"))]
policy = DyTCPolicy([p.name for p in default_drafts(model)])
plan = steps = tokens = 0; total = 0.0
for q in qs:
    p = tok.apply_chat_template([{"role": "user", "content": q["turns"][0]}])
    r = generate_speculative(model, p, 64, method="cas-spec", stop_ids=tok.stop_ids, policy=policy)
    plan += r.stats["time_plan_s"]; steps += r.stats["steps"]; tokens += len(r.tokens); total += r.timing["total_s"]
where = os.path.dirname(os.path.dirname(casspec_ref.__file__))
print(f"{where}: {steps} steps, planning {1e3 * plan / steps:.3f} ms a step, "
      f"{tokens / total:.1f} tok/s, {1e3 * total / steps:.1f} ms a step")
