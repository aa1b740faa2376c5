"""Is a lookup's first token likelier right when it copies from the prompt than from the answer
generated so far? Teacher-forced along recorded greedy answers (stop 17's replay records): at each
answer position, prompt lookup over prompt + answer so far, by match length and by where the copied
continuation starts. Usage: python lookup_source.py RECORD..."""
import json, sys
from collections import Counter
from casspec_ref.dsia.prompt_lookup import PromptLookup

hits, seen = Counter(), Counter()
for path in sys.argv[1:]:
    name = path.rsplit("_", 1)[-1].split(".")[0]
    for r in json.load(open(path))["records"]:
        prompt, answer = r["prompt"], r["answer"]
        pld = PromptLookup([*prompt, answer[0]])
        for i in range(1, len(answer)):
            m = pld.match(1)
            if m.tokens:
                key = (name, min(m.ngram, 3), "prompt" if m.source_start < len(prompt) else "answer")
                seen[key] += 1
                hits[key] += m.tokens[0] == answer[i]
            pld.append(answer[i])
for key in sorted(seen):
    print(f"{key[0]:8s} match {key[1]} copied from the {key[2]:6s}: {hits[key]:4d}/{seen[key]:4d} = {hits[key] / seen[key]:.2f}")
