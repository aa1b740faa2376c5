"""A/B on SmolLM2 (scratch, stop 19): the package's DyTC against a variant, each with its own
policy carried across the held-out first turns (as the bench carries it), interleaved per
question with the naive loop; greedy, 128 tokens. Prints per-question and total time ratios.
Usage: ab_real.py VARIANT [set]  (VARIANT: mixture)."""
import os, sys, time
os.environ.setdefault("CASSPEC_KERNELS", "auto")
import casspec_ref.dytc as D
from casspec_ref.io.weights import load_model
from casspec_ref.generate import generate_ar
from casspec_ref.speculative import default_drafts, generate_speculative
from casspec_ref.tools.bench import load_questions, default_questions_path

class Mixture(D.DyTCPolicy):
    """The next (undrafted) model-draft token valued by the margin bins' estimates, weighted by
    how often each bin was seen, once margins are known (not the pooled 20-outcome EMA)."""
    def chain_tokens(self, draft, k, below="", match=0):
        if draft in D.FREE_DRAFTS or not self.margins_known(draft):
            return super().chain_tokens(draft, k, below, match)
        bins = [self.alpha[f"{draft}@{b}"] for b in range(len(D.MARGINS) + 1)]
        a = sum(e.count * e.alpha for e in bins) / sum(e.count for e in bins)
        return a * (1.0 + D.geometric_tokens(a, k - 1))

VARIANTS = {"mixture": Mixture}
model, tok = load_model()
_w = tok.apply_chat_template([{"role": "user", "content": "Say hello."}])  # one-time setup paid here
generate_speculative(model, _w, 16, method="cas-spec", stop_ids=tok.stop_ids)
qs = load_questions(default_questions_path(sys.argv[2] if len(sys.argv) > 2 else "prompts_heldout"))
levels = [p.name for p in default_drafts(model)]
pa, pb = D.DyTCPolicy(levels), VARIANTS[sys.argv[1]](levels)
tot = {"ar": 0.0, "A": 0.0, "B": 0.0}
for q in qs:
    ids = tok.apply_chat_template([{"role": "user", "content": q.turns[0]}])
    t = {}
    runs = [("ar", lambda: generate_ar(model, ids, 128, stop_ids=tok.stop_ids)),
            ("A", lambda: generate_speculative(model, ids, 128, method="cas-spec", policy=pa, stop_ids=tok.stop_ids)),
            ("B", lambda: generate_speculative(model, ids, 128, method="cas-spec", policy=pb, stop_ids=tok.stop_ids))]
    if os.environ.get("B_FIRST"):
        runs = [runs[0], runs[2], runs[1]]
    for name, fn in runs:
        s = time.perf_counter(); out = fn(); t[name] = time.perf_counter() - s
        toks = out.tokens
        if name == "ar": ref = toks
        else: assert toks == ref
    for k in tot: tot[k] += t[k]
    print(f"{q.question_id} {q.category:14s} A x{t['ar']/t['A']:.2f}  B x{t['ar']/t['B']:.2f}", flush=True)
print(f"total: A x{tot['ar']/tot['A']:.3f}  B x{tot['ar']/tot['B']:.3f}  (B/A {tot['A']/tot['B']:.3f})")
print("A int8 a %.2f (%d)  B int8 a %.2f (%d)" % (pa.alpha[levels[-1]].alpha, pa.alpha[levels[-1]].count, pb.alpha[levels[-1]].alpha, pb.alpha[levels[-1]].count))
