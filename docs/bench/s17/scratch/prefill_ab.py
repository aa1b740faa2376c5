"""A/B of the row classes (scratch, stop 17): generate_ar (greedy, 128 tokens) on held-out
prompts of several lengths, with this machine's table as calibrated (classes) and the same table
without its entries above 16 rows (what stop 16 ran), interleaved, 3 repeats each."""
import statistics, time, torch
from casspec_ref.base import kernels
from casspec_ref.generate import generate_ar
from casspec_ref.io.weights import load_model
from casspec_ref.tools.bench import default_questions_path, load_questions
model, tok = load_model()
full = kernels.KernelTable(dict(kernels.active_table().forms))
old = kernels.KernelTable({k: f for k, f in full.forms.items() if k[3] <= kernels.MAX_ROWS})
qs = load_questions(default_questions_path("prompts_heldout"))
prompts = sorted((tok.apply_chat_template([{"role": "user", "content": q.turns[0]}]) for q in qs), key=len)
picks = [prompts[0], prompts[len(prompts) // 2], prompts[-1]]
generate_ar(model, picks[0], 8)
for p in picks:
    t = {"old": [], "classes": []}
    toks = {}
    for rep in range(3):
        for name, table in (("old", old), ("classes", full))[:: 1 if rep % 2 == 0 else -1]:
            kernels.use_table(table)
            s = time.perf_counter(); r = generate_ar(model, p, 128); t[name].append(time.perf_counter() - s)
            toks[name] = list(r.tokens)
    m = {k: statistics.median(v) for k, v in t.items()}
    print(f"prompt {len(p):4d} tokens: 128 new tokens in {m['old']:.2f} s (rows > 16 in F.linear) vs {m['classes']:.2f} s (row classes): {m['old'] / m['classes']:.3f}x, same tokens: {toks['old'] == toks['classes']}", flush=True)
