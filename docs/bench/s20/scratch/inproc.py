"""The naive loop, prompt lookup (k = 3), the rule pld-or-chain and CAS-Spec on the 12 held-out
questions, interleaved question by question in one process (so that the host's state hits all
four alike), greedy, 128 new tokens; CAS-Spec's policy carried across questions as the bench
carries it, after one warm-up question per method. Prints tok/s and each method over the naive
loop, and CAS-Spec's tree sizes. Usage: inproc.py [ROUNDS]."""
import os, sys, time, collections
os.environ.setdefault("CASSPEC_KERNELS", "auto")
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import default_drafts, generate_speculative
from casspec_ref.dsia.prompt_lookup import PromptLookupConfig
from casspec_ref.dytc import DyTCPolicy
from casspec_ref.tools.bench import load_questions, default_questions_path

model, tok = load_model()
qs = load_questions(default_questions_path("prompts_heldout"))
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 1
policy = DyTCPolicy([p.name for p in default_drafts(model)])
methods = {"ar": dict(method="ar"), "pld:3": dict(method="pld", pld=PromptLookupConfig(max_proposal=3)),
           "pld-or-chain": dict(method="pld-or-chain"), "cas-spec": dict(method="cas-spec", policy=policy)}
secs, toks = collections.Counter(), collections.Counter()
sizes = collections.Counter()
def run(name, q, count=True):
    ids = tok.apply_chat_template([{"role": "user", "content": q.turns[0]}])
    t = time.perf_counter()
    r = generate_speculative(model, ids, 128, stop_ids=tok.stop_ids, **methods[name])
    if count:
        secs[name] += time.perf_counter() - t; toks[name] += len(r.tokens)
        if name == "cas-spec":
            sizes.update(r.stats["tree_sizes"])
    return r
for name in methods:
    run(name, qs[0], count=False)
for _ in range(rounds):
    for i, q in enumerate(qs):
        for name in (list(methods) if i % 2 == 0 else list(reversed(methods))):
            run(name, q)
ar = toks["ar"] / secs["ar"]
for name in methods:
    rate = toks[name] / secs[name]
    print(f"{name:13} {rate:5.1f} tok/s  {rate / ar:.3f}x")
print("cas-spec tree sizes:", dict(sorted(sizes.items())))
