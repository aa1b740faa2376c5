"""Nucleus sizes (temperature 0.7, top-p 0.9) over sampled answers to the 12 held-out questions
(96 tokens, the target's laws teacher-forced along them), and `top_p_keep` over 16 rows for
first heads of 16-256: the share of rows past the head, ms. Chose to keep FIRST_HEAD = 256."""
import os, torch, time, statistics
os.environ.setdefault("CASSPEC_KERNELS", "auto")
from casspec_ref.io.weights import load_model
from casspec_ref.generate import generate_ar
from casspec_ref.sampling import target_law
from casspec_ref.base import nucleus
from casspec_ref.tools.bench import load_questions, default_questions_path
torch.set_num_threads(2)
model, tok = load_model()
qs = load_questions(default_questions_path("prompts_heldout"))
allp = []
with torch.no_grad():
    for q in qs:
        ids = tok.apply_chat_template([{"role": "user", "content": q.turns[0]}])
        r = generate_ar(model, ids, 96, temperature=0.7, top_p=0.9, seed=3, stop_ids=tok.stop_ids)
        full = torch.tensor([ids + r.tokens])
        logits = model.forward(full)[0, len(ids) - 1 : -1]  # the answer's positions
        x = logits.double() / 0.7
        allp.append(torch.softmax(x, -1))
probs = torch.cat(allp)
keep = nucleus.keep_by_full_sort(probs, 0.9)
sizes = keep.sum(-1).double()
print("rows", probs.shape[0], "nucleus size quantiles 50/90/95/99/max", torch.quantile(sizes, torch.tensor([0.5, 0.9, 0.95, 0.99], dtype=torch.float64)).tolist(), sizes.max().item())
for k in (16, 32, 64, 128, 256):
    frac = (sizes > k).double().mean().item()
    block = probs[:16]
    ts = []
    for _ in range(50):
        t = time.perf_counter(); torch.topk(block, k, dim=-1, sorted=False); ts.append(time.perf_counter() - t)
    ts2 = []
    for _ in range(30):
        t = time.perf_counter(); nucleus.top_p_keep(block, 0.9, first_head=k); ts2.append(time.perf_counter() - t)
    print(f"head {k}: rows past it {frac:.3f}; topk over 16 rows {1000*statistics.median(ts):.2f} ms; top_p_keep 16 rows {1000*statistics.median(ts2):.2f} ms")
