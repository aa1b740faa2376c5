"""One-row split shortcut, A/B in one process (scratch, stop 18): the forward over T = 1, 2, 4
new tokens after 256 cached and greedy `generate_ar` of 128 tokens on three held-out prompts,
with `exact_linear` as shipped ("new") and as before the shortcut ("old": every non-linear form
through `run_form`), interleaved; same logits and tokens asserted."""
import os, statistics, time
import torch
import torch.nn.functional as F
os.environ.setdefault("CASSPEC_KERNELS", "auto")
from common import target_after_context
from casspec_ref.base import kernels
from casspec_ref.generate import generate_ar
from casspec_ref.tools.bench import default_questions_path, load_questions
import casspec_ref.model as M

def old_exact_linear(x, weight, bias):
    rows = x.numel() // x.shape[-1]
    form = kernels._ACTIVE.forms.get((weight.shape[0], weight.shape[1], x.dtype, kernels.table_rows(rows)))
    if form is None:
        form = kernels.default_form(x.dtype, rows)
    if form.base == "linear" and not form.pad_to:
        return F.linear(x, weight, bias)
    return kernels.run_form(form, x, weight, bias)

variants = {"old": old_exact_linear, "new": kernels.exact_linear}
model, tok, cache, new = target_after_context(4)
def fw(t):
    out = model(new[:, :t], cache=cache); cache.truncate(256); return out
for t in (1, 2, 4):
    M.exact_linear = variants["old"]; ref = fw(t)
    M.exact_linear = variants["new"]; assert torch.equal(fw(t), ref), t
print("same logits at T = 1, 2, 4")
for t in (1, 2, 4):
    res = {k: [] for k in variants}
    for rep in range(40):
        for name in (list(variants) if rep % 2 else list(variants)[::-1]):
            M.exact_linear = variants[name]
            s = time.perf_counter(); fw(t); res[name].append(time.perf_counter() - s)
    o, n = (statistics.median(res[k]) * 1e3 for k in ("old", "new"))
    print(f"forward T={t}: old {o:.2f} ms, new {n:.2f} ms, old/new {o / n:.3f}")
qs = load_questions(default_questions_path("prompts_heldout"))[:3]
for q in qs:
    prompt = tok.apply_chat_template([{"role": "user", "content": q.turns[0]}])
    out = {}
    for name in ("old", "new", "new", "old"):
        M.exact_linear = variants[name]
        s = time.perf_counter(); r = generate_ar(model, prompt, 128); sec = time.perf_counter() - s
        out.setdefault(name, []).append((sec, list(r.tokens)))
    assert len({tuple(t) for v in out.values() for _, t in v}) == 1
    o, n = (min(s for s, _ in out[k]) for k in ("old", "new"))
    print(f"generate_ar 128, {len(prompt)}-token prompt: old {128 / o:.1f} tok/s, new {128 / n:.1f} tok/s, new/old {o / n:.3f} (same tokens)")
