"""Hindsight optimum on a replay record: shortest total time to decode each answer when every
step may pick any chain (prompt lookup, a draft level, lookup then a level; optionally top-w
siblings per depth) truncated at its accepted length. Scratch harness (stop 17)."""
import sys
from common import load
from casspec_ref.dsia.prompt_lookup import PromptLookup, PromptLookupConfig
from casspec_ref.tools.replay import LOOKUP_SECONDS

widths = [int(w) for w in (sys.argv[2].split(",") if len(sys.argv) > 2 else ["1"])]
recs, costs, _ = load(sys.argv[1])
V = costs.verify_seconds
total_ar = total_or = 0.0
usage = {}
for rec in recs:
    n = len(rec.answer)
    pld = PromptLookup([*rec.prompt, rec.answer[0]], PromptLookupConfig(max_proposal=16))
    prop = {}
    for p in range(1, n):  # answer[:p] committed
        prop[p] = pld.propose(16)
        pld.append(rec.answer[p])
    def acc_pld(p):
        a = 0
        for t in prop[p]:
            if p + a < n and t == rec.answer[p + a]:
                a += 1
            else:
                break
        return a
    def acc_level(L, p, w):
        ids = rec.drafts[L][0]
        a = 0
        while p + a < n - 0 and p + a < len(ids) and rec.answer[p + a] in ids[p + a][:w]:
            a += 1
        return a
    best = [0.0] * (n + 1)
    choice = [None] * (n + 1)
    for p in range(n - 1, 0, -1):
        cap = n - p - 1
        opts = [(V(1) + best[p + 1], ("plain", 0))]
        ap = min(acc_pld(p), cap)
        for k in range(1, ap + 1):
            opts.append((LOOKUP_SECONDS + V(k + 1) + costs.step_overhead + best[p + k + 1], ("pld", k)))
        for L, dl in costs.draft.items():
            for w in widths:
                for j in range(0, ap + 1):  # j lookup tokens first
                    q = p + j
                    al = min(acc_level(L, q, w), cap - j)
                    for k in range(1, al + 1):
                        c = (LOOKUP_SECONDS if j else 0) + k * (dl + costs.draft_overhead) + V(j + w * k + 1) + costs.step_overhead
                        opts.append((c + best[p + j + k + 1], (f"{'pld+' if j else ''}{L}/w{w}", j + k)))
        best[p], choice[p] = min(opts, key=lambda o: o[0])
    p = 1
    while p < n:
        name, k = choice[p]
        usage[name] = usage.get(name, 0) + 1
        p += k + 1
    total_ar += (n - 1) * V(1)
    total_or += best[1]
print(f"{sys.argv[1]} widths {widths}: hindsight optimum speedup {total_ar / total_or:.3f}")
print("steps by choice:", dict(sorted(usage.items(), key=lambda kv: -kv[1])))
