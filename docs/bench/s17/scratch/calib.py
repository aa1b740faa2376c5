"""Is a draft's top-1 probability a usable acceptance predictor? Bins of each level's top-1
probability at every answer position (teacher-forced rows) against P(top-1 == answer)."""
import json, sys
data = json.load(open(sys.argv[1]))
for level in data["records"][0]["drafts"]:
    bins = [[0, 0] for _ in range(10)]
    for r in data["records"]:
        ids, probs = r["drafts"][level]
        for i in range(1, len(r["answer"])):
            b = min(int(probs[i][0] * 10), 9)
            bins[b][0] += 1
            bins[b][1] += ids[i][0] == r["answer"][i]
    tot = sum(b[0] for b in bins); acc = sum(b[1] for b in bins)
    print(f"{data['questions']} {level}: overall top-1 agreement {acc/tot:.3f} over {tot} positions")
    for j, (n, a) in enumerate(bins):
        if n:
            print(f"  conf {j/10:.1f}-{(j+1)/10:.1f}: {n:5d} positions ({n/tot:5.1%}), accepted {a/n:.3f}")
