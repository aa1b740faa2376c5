import json, collections, sys
from casspec_ref.dsia.prompt_lookup import PromptLookup
for name in ("bundled", "heldout"):
    d = json.load(open(f"docs/bench/s16/replay_{name}.json"))
    tally = collections.defaultdict(lambda: [0, 0]); steps = 0
    for r in d["records"]:
        ans = r["answer"]; pld = PromptLookup(r["prompt"] + ans[:1])
        for c in range(1, len(ans)):
            m = pld.match(5)
            steps += 1
            if m.tokens:
                t = tally[m.ngram]; t[0] += 1; t[1] += m.tokens[0] == ans[c]
            pld.append(ans[c])
    print(name, steps, "positions;", {n: (c, round(a / c, 2)) for n, (c, a) in sorted(tally.items())})
