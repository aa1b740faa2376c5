import cProfile, pstats, os, json, io
os.environ.setdefault("CASSPEC_KERNELS", "auto")
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import generate_speculative
from casspec_ref.tools.bench import default_questions_path
from casspec_ref.dytc import DyTCPolicy
from casspec_ref.speculative import default_drafts
model, tok = load_model()
qs = [json.loads(l) for l in open(default_questions_path("prompts_heldout"))]
policy = DyTCPolicy([p.name for p in default_drafts(model)])
def run(qq):
    for q in qq:
        p = tok.apply_chat_template([{"role": "user", "content": q["turns"][0]}])
        generate_speculative(model, p, 128, method="cas-spec", stop_ids=tok.stop_ids, policy=policy)
run(qs[:2])  # warm
pr = cProfile.Profile(); pr.enable(); run(qs[2:8]); pr.disable()
s = io.StringIO(); st = pstats.Stats(pr, stream=s); st.sort_stats("tottime").print_stats(30); print(s.getvalue()[:6000])
s = io.StringIO(); st = pstats.Stats(pr, stream=s); st.sort_stats("cumulative").print_stats("casspec_ref", 40); print(s.getvalue()[:8000])
