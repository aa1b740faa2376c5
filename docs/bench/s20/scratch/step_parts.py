"""Where a speculative step's time goes outside the target forward, on SmolLM2: the verify step
split into its parts (inputs and mask, forward, law, numpy copy, verifier, commit, recycler) and
the drafting split into forwards and planning, per tree size, for one method over N held-out
questions (greedy, or sampling at temperature TEMP with top-p 0.9; 128 new tokens, or 96 when
sampling). Run against a package with the reverted lazy laws (`sampling.NodeLaws`,
lazy_laws.txt) it times those, unless EAGER_LAWS=1.
Usage: step_parts.py METHOD [N [TEMP]]. Patches the loop's pieces in its own
process."""
import os, sys, time, collections
os.environ.setdefault("CASSPEC_KERNELS", "auto")
import torch, numpy as np
import casspec_ref.speculative as S
from casspec_ref.io.weights import load_model
from casspec_ref.tools.bench import load_questions, default_questions_path
from casspec_ref.dytc import DyTCPolicy

model, tok = load_model()
method = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 6
temp = float(sys.argv[3]) if len(sys.argv) > 3 else 0.0
sampling = dict(temperature=temp, top_p=0.9, seed=1) if temp else {}
qs = load_questions(default_questions_path("prompts_heldout"))[:n]
parts = collections.defaultdict(lambda: collections.defaultdict(float))
counts = collections.Counter()
clock = time.perf_counter

def timed(name, size, fn, *a, **k):
    t = clock(); r = fn(*a, **k); parts[size][name] += clock() - t; return r

orig_forward = model.forward
orig_law = S.target_law
orig_verify = S.verify_tree
CUR = [0]
LAZY = hasattr(S, "NodeLaws") and os.environ.get("EAGER_LAWS") != "1"
def verify_step(state, drafter):
    t0 = clock()
    tree, cache, base = drafter.tree, state.cache, state.cache.length
    N = len(tree); CUR[0] = N; counts[N] += 1
    P = parts[N]
    t = clock()
    node_tokens = torch.tensor([tree.tokens], dtype=torch.long)
    positions = tree.positions(base)[None]
    is_chain = all(tree.parent(i) == i - 1 for i in range(1, len(tree)))
    mask = None if is_chain else tree.attention_mask(base)
    P["inputs+mask"] += clock() - t
    t = clock(); logits = orig_forward(node_tokens, positions, cache=cache, attn_mask=mask); P["forward"] += clock() - t
    s = state.sampling
    if LAZY:  # the reverted variant: laws made as the verifier reads them (timed in verify_tree)
        tp = S.NodeLaws(logits[0], s.temperature, s.top_k, s.top_p)
    else:  # every node's law first, as the loop does
        t = clock(); law = orig_law(logits[0], s.temperature, s.top_k, s.top_p); P["law"] += clock() - t
        t = clock(); tp = law.cpu().numpy(); P["numpy"] += clock() - t
    remaining = state.max_new_tokens - len(state.tokens)
    t = clock(); result = orig_verify(tree, tp, state.rng, stop_ids=state.stops, max_accept=remaining - 1); P["verify_tree"] += clock() - t
    t = clock(); cache.commit(base, [0, *result.accepted]); P["commit"] += clock() - t
    if state.recycler is not None:
        t = clock(); state.recycler.update(tree.tokens, logits[0]); P["recycler"] += clock() - t
    seconds = clock() - t0
    P["verify total"] += seconds
    state.stats["time_verify_s"] += seconds
    state.stats["target_forwards"] += 1
    return result, seconds
S.verify_step = verify_step
orig_draft = S.draft_tree
def draft_tree(state):
    t = clock(); d = orig_draft(state); el = clock() - t
    N = len(d.tree)
    parts[N]["draft total"] += el; parts[N]["draft fwd+lookup"] += d.seconds()
    return d
S.draft_tree = draft_tree
OBS = [0.0, 0]
orig_step = S.speculative_step
def speculative_step(state):
    if not OBS[1]:
        orig_obs = state.schedule.observe
        def observe(*a, **k):
            t = clock(); r = orig_obs(*a, **k); OBS[0] += clock() - t; return r
        state.schedule.observe = observe
    OBS[1] += 1
    r = orig_step(state)
    return r
S.speculative_step = speculative_step
policy = DyTCPolicy([p.name for p in S.default_drafts(model)]) if method == "cas-spec" else None
tot = collections.Counter()
for q in qs:
    ids = tok.apply_chat_template([{"role": "user", "content": q.turns[0]}])
    kw = {"policy": policy} if policy else {}
    t = clock()
    # observe is timed from the outside: step total minus draft and verify
    OBS[1] = 0
    r = S.generate_speculative(model, ids, 96 if temp else 128, method=method, stop_ids=tok.stop_ids, **kw, **sampling)
    tot["wall"] += clock() - t; tot["tokens"] += len(r.tokens); tot["steps"] += r.stats["steps"]
print(f"{method}: {tot['tokens']} tokens, {tot['steps']} steps, {tot['wall']:.2f} s, {tot['tokens']/tot['wall']:.1f} tok/s")
names = ["inputs+mask", "forward", "law", "numpy", "verify_tree", "commit", "recycler", "verify total", "draft fwd+lookup", "draft total"]
print("size  steps " + " ".join(f"{k:>12}" for k in names) + "   (ms per step)")
agg = collections.defaultdict(float)
for N in sorted(counts):
    c = counts[N]
    for k in names: agg[k] += parts[N][k]
    print(f"{N:4d} {c:6d} " + " ".join(f"{1000*parts[N][k]/c:12.2f}" for k in names))
c = sum(counts.values())
print(" all", f"{c:6d}", " ".join(f"{1000*agg[k]/c:12.2f}" for k in names))
print(f"observe: {OBS[0]:.2f} s in all, {1000 * OBS[0] / max(1, tot['steps']):.2f} ms a step")
print("seconds:", {k: round(v, 2) for k, v in agg.items()}, "other (observe, emit, loop):", round(tot["wall"] - agg["verify total"] - agg["draft total"], 2))
