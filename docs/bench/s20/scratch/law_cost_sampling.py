"""The sampling law (`target_law` at temperature 0.7, top-p 0.9, and without top-p) over the
last 1/4/8/16 rows of SmolLM2's logits on the first held-out prompt, medians of 20 calls, ms;
and the nucleus sizes over all its rows. Run before and after the batched first head."""
import os, torch, time, statistics
os.environ.setdefault("CASSPEC_KERNELS", "auto")
from casspec_ref.io.weights import load_model
from casspec_ref.sampling import target_law
from casspec_ref.tools.bench import load_questions, default_questions_path
model, tok = load_model()
qs = load_questions(default_questions_path("prompts_heldout"))
ids = tok.apply_chat_template([{"role": "user", "content": qs[0].turns[0]}])
with torch.no_grad():
    logits = model.forward(torch.tensor([ids]))[0]  # (P, V)
print("prompt len", logits.shape[0])
for n in (1, 4, 8, 16):
    rows = logits[-n:]
    ts = []; parts = []
    for _ in range(20):
        t = time.perf_counter(); target_law(rows, 0.7, 0, 0.9).cpu().numpy(); ts.append(time.perf_counter() - t)
    ts2 = []
    for _ in range(20):
        t = time.perf_counter(); target_law(rows, 0.7, 0, 1.0).cpu().numpy(); ts2.append(time.perf_counter() - t)
    print(n, "rows: T0.7 top-p 0.9 ms", round(1000 * statistics.median(ts), 2), "| T0.7 no top-p", round(1000 * statistics.median(ts2), 2))
# nucleus sizes over all prompt rows
p = target_law(logits, 0.7, 0, 0.9)
sizes = (p > 0).sum(-1)
print("nucleus sizes: median", sizes.median().item(), "max", sizes.max().item(), "quantiles", torch.quantile(sizes.double(), torch.tensor([0.5, 0.9, 0.99]).double()).tolist())
