import sys, time, collections
exec(open("/tmp/s16/hybrid.py").read().split("from casspec_ref.io.weights")[0])
from casspec_ref.io.weights import load_model
from casspec_ref.tools.bench import default_questions_path, load_questions
from casspec_ref.speculative import default_drafts
from casspec_ref.dytc import DyTCPolicy
from casspec_ref.schedules import DyTC
which = sys.argv[1]; n = int(sys.argv[2]); lim = int(sys.argv[3]) if len(sys.argv) > 3 else 0
model, tok = load_model()
qs = load_questions(default_questions_path({"bundled": "prompts", "heldout": "prompts_heldout"}[which]))
if lim: qs = qs[:lim]
policy = DyTCPolicy([p.name for p in default_drafts(model)])
tally = collections.defaultdict(lambda: [0, 0])
orig_obs = DyTC.observe
def observe(self, drafter, accepted, vs):
    info, parent = drafter.info, drafter.tree.parent
    on_path = {0, *accepted}
    kind = "+".join(sorted({i.source for i in info[1:]}))
    for nd, i in enumerate(info):
        if nd > 0 and i.primary and parent(nd) in on_path:
            psrc = info[parent(nd)].source
            key = (i.source, "root" if parent(nd) == 0 else psrc, kind, drafter.tree.depth(nd))
            t = tally[key]; t[0] += 1; t[1] += nd in on_path
    return orig_obs(self, drafter, accepted, vs)
DyTC.observe = observe
est = []
for q in qs:
    prompt = tok.apply_chat_template([{"role": "user", "content": q.turns[0]}])
    r = sp.generate_speculative(model, prompt, n, method="cas-spec", policy=policy)
    est.append(round(policy.alpha["w8a8-fast"].alpha, 2))
print("int8 estimate after each question", est)
agg = collections.defaultdict(lambda: [0, 0])
for (src, par, kind, d), (c, a) in sorted(tally.items()):
    if src == "w8a8-fast":
        print(f"{par:22s} {kind:40s} depth {d}: {a}/{c} = {a/c:.2f}")
        agg[par][0] += c; agg[par][1] += a
print({k: (v[1], v[0], round(v[1]/v[0], 2)) for k, v in agg.items()})
