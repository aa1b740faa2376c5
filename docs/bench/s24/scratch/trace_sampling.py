"""DyTC under sampling on SmolLM2, step by step: the held-out first turns in the bench's order and
seeds (one policy carried across them, as the bench carries it), temperature 0.7, top-p 0.9, 96
new tokens. Per question: wall time of the naive loop and CAS-Spec; per step of the questions
named on the command line: the tree's drafts, what was accepted, the verify and draft seconds,
and what DyTC predicted (its plain step, the verify cost at that size, the int8 draft's c and the
lookup estimates). Usage: OMP_NUM_THREADS=2 python trace_sampling.py QID [QID ...]"""
import json, os, sys, time
os.environ.setdefault("CASSPEC_KERNELS", "auto")
from collections import Counter
from casspec_ref.dytc import DyTCPolicy
from casspec_ref.generate import generate_ar
from casspec_ref.io.weights import load_model
from casspec_ref.speculative import default_drafts, generate_speculative
from casspec_ref.tools.bench import default_questions_path

SHOW = {int(a) for a in sys.argv[1:]}
model, tok = load_model()
qs = [json.loads(l) for l in open(default_questions_path("prompts_heldout"))]
policy = DyTCPolicy([p.name for p in default_drafts(model)])
_grow = policy.grow
predicted = []  # per step: {draft: expected accepted nodes of that draft}


def grow(drafter, drafts):
    reach = _grow(drafter, drafts)
    by = Counter()
    for node, r in reach.items():
        if node > 0:
            by[drafter.info[node].source] += r
    predicted.append(by)
    return reach


policy.grow = grow
_observe = policy.observe_step
calib_names = {}  # name: [outcomes, accepted, sum of the estimate before the outcome]


def observe_step(tested, *args):
    for name, ok in tested:
        if name in policy.alpha:
            c = calib_names.setdefault(name, [0, 0, 0.0])
            c[0] += 1; c[1] += int(ok); c[2] += policy.alpha[name].alpha
    return _observe(tested, *args)


policy.observe_step = observe_step
TEMP = float(os.environ.get("TEMP", "0.7"))
kw = dict(temperature=TEMP, top_p=0.9 if TEMP > 0 else 1.0, stop_ids=tok.stop_ids)
for i, q in enumerate(qs):
    p = tok.apply_chat_template([{"role": "user", "content": q["turns"][0]}])
    t = time.perf_counter(); ar = generate_ar(model, p, 96, seed=i, **kw); t_ar = time.perf_counter() - t
    steps = []
    predicted.clear()
    calib_names.clear()
    last = [time.perf_counter()]

    def on_step(tr):
        now = time.perf_counter()
        n = len(tr.tree)
        srcs = Counter(tr.sources[1:])
        acc = Counter(tr.sources[j] for j in tr.result.accepted)
        steps.append(dict(n=n, srcs=dict(srcs), acc=dict(acc), ms=round(1e3 * (now - last[0]), 1),
                          pred_v=round(1e3 * policy.verify_seconds(n), 1),
                          plain=round(1e3 * policy.step_seconds(), 1),
                          c=round(policy.cost(policy.drafts[0]), 2) if policy.drafts else None,
                          a_int8=round(policy.alpha[policy.drafts[0]].alpha, 2),
                          pld=[round(policy.alpha[k].alpha, 2) for k in ("pld#1", "pld#2", "pld#3", "pld+")]))
        last[0] = now

    r = generate_speculative(model, p, 96, method="cas-spec", seed=i, policy=policy, on_step=on_step, **kw)
    st = r.stats
    pred = Counter()
    for by in predicted:
        pred.update(by)
    calib = {d: f"pred {pred[d]:.1f} got {st['accepted'].get(d, 0)} of {st['proposed'].get(d, 0)}" for d in sorted(pred)}
    print(f"q{q['question_id']} {q['category']:14s} ar {len(ar.tokens)}tok {1e3*t_ar/len(ar.tokens):.1f}ms/tok | cas {len(r.tokens)}tok "
          f"{1e3*r.timing['total_s']/len(r.tokens):.1f}ms/tok steps {st['steps']} MAT {st['mat']:.2f} "
          f"verify {st['time_verify_s']:.2f}s draft {st['time_draft_s']:.2f}s prop {dict(st['proposed'])} acc {dict(st['accepted'])}\n      {calib}", flush=True)
    print("      outcomes (n, accepted rate, mean estimate):", {k: (v[0], round(v[1] / v[0], 2), round(v[2] / v[0], 2)) for k, v in sorted(calib_names.items())}, flush=True)
    if q["question_id"] in SHOW:
        for j, s in enumerate(steps):
            print("   ", j, json.dumps(s), flush=True)
