"""Is a lookup's first token likelier right when the recycled-token table agrees with it?
Teacher-forced along recorded greedy answers (stop 17's replay records): at each answer position
the lookup proposal over prompt + answer so far, and the recycled table's top successor of the
last token (the table written from the target's top-4 at every earlier answer position, as
verify forwards write it). Usage: python lookup_agreement.py RECORD..."""
import json, sys
from collections import Counter
from casspec_ref.dsia.prompt_lookup import PromptLookup
from casspec_ref.dsia.recycle import TokenRecycler

hits, seen = Counter(), Counter()
for path in sys.argv[1:]:
    for r in json.load(open(path))["records"]:
        prompt, answer, (tids, tps) = r["prompt"], r["answer"], r["target"]
        pld = PromptLookup([*prompt, answer[0]])
        table: dict[int, int] = {}
        for i in range(1, len(answer)):
            table[answer[i - 2] if i >= 2 else prompt[-1]] = tids[i - 1][0]  # written by the verify of i - 1
            m = pld.match(1)
            if m.tokens:
                rec = table.get(answer[i - 1])
                agree = "agree" if rec == m.tokens[0] else ("differs" if rec is not None else "no entry")
                key = (r_set := path.split("_")[-1].split(".")[0], min(m.ngram, 3), agree)
                seen[key] += 1
                hits[key] += m.tokens[0] == answer[i]
            pld.append(answer[i])
for key in sorted(seen):
    print(f"{key[0]:8s} match {key[1]} recycled {key[2]:9s}: {hits[key]:4d}/{seen[key]:4d} = {hits[key] / seen[key]:.2f}")
