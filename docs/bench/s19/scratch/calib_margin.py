"""Acceptance (teacher forced) by the draft's margin, top-1 minus top-2 probability."""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "s18", "scratch"))
from common import load
recs, costs, levels = load(sys.argv[1], sys.argv[2])
bins = [0, .02, .05, .1, .2, .4, 1.01]
for lv in levels:
    cnt = [[0, 0] for _ in bins[:-1]]
    for r in recs:
        ids, probs = r.drafts[lv]
        for i in range(1, len(r.answer)):
            m = probs[i][0] - probs[i][1]; ok = ids[i][0] == r.answer[i]
            b = max(j for j in range(len(bins) - 1) if bins[j] <= m)
            cnt[b][0] += 1; cnt[b][1] += ok
    tot = sum(c[0] for c in cnt)
    print(lv)
    for j, (n, a) in enumerate(cnt):
        if n: print(f"  margin [{bins[j]:.2f},{bins[j+1]:.2f}) share {n/tot:.3f} accept {a/n:.3f}")
