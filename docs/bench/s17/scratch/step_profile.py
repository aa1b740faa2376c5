"""Where a speculative step's time goes besides the forwards (scratch, stop 17): cProfile of
pld-or-chain and cas-spec on three bundled first turns, 128 tokens, after a warm-up."""
import cProfile, pstats, sys, io
import torch
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import generate_speculative
from casspec_ref.tools.bench import default_questions_path, load_questions
model, tok = load_model()
qs = load_questions(default_questions_path("prompts"))[:3]
prompts = [tok.apply_chat_template([{"role": "user", "content": q.turns[0]}]) for q in qs]
method = sys.argv[1]
generate_speculative(model, prompts[0], 16, method=method)
prof = cProfile.Profile()
prof.enable()
for p in prompts:
    r = generate_speculative(model, p, 128, method=method)
prof.disable()
s = io.StringIO()
pstats.Stats(prof, stream=s).sort_stats("cumtime").print_stats(45)
print(s.getvalue()[:6000])
