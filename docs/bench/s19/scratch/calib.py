"""How well a draft's confidence in its top token predicts the target's greedy token, per
level, over a replay record (teacher-forced rows): acceptance by confidence bin."""
import os, sys
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "s18", "scratch"))
from common import load
recs, costs, levels = load(sys.argv[1], sys.argv[2])
bins = [0, .3, .5, .7, .8, .9, .95, .99, 1.01]
for lv in levels:
    cnt = [[0, 0] for _ in bins[:-1]]
    for r in recs:
        ids, probs = r.drafts[lv]
        for i in range(1, len(r.answer)):
            p = probs[i][0]; ok = ids[i][0] == r.answer[i]
            b = max(j for j in range(len(bins) - 1) if bins[j] <= p)
            cnt[b][0] += 1; cnt[b][1] += ok
    tot = sum(c[0] for c in cnt)
    print(lv, "overall", round(sum(c[1] for c in cnt) / tot, 3))
    for j, (n, a) in enumerate(cnt):
        if n: print(f"  conf [{bins[j]:.2f},{bins[j+1]:.2f}) share {n/tot:.3f} accept {a/n:.3f}")
