"""Summary of the interleaved bench A/B (`../ab/{old,new}_N/results.json`): per run, the naive
loop's tok/s, the rule's and CAS-Spec's overall speedups and CAS-Spec over the rule."""
import glob, json, os, statistics
here = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ab")
ratios = {"old": [], "new": []}
for path in sorted(glob.glob(os.path.join(here, "*_*", "results.json")), key=lambda p: int(p.split("_")[-1].split("/")[0])):
    name = os.path.basename(os.path.dirname(path))
    recs = json.load(open(path))["records"]
    over = {r["method"]: r for r in recs if r["group"] == "overall"}
    rule, cas = over["pld-or-chain"]["speedup"], over["cas-spec"]["speedup"]
    ratios[name.split("_")[0]].append(cas / rule)
    print(f"{name:6s} ar {over['ar']['tokens_per_s']:5.1f} tok/s  rule {rule:.3f}  cas-spec {cas:.3f}  cas/rule {cas / rule:.3f}")
for k, v in ratios.items():
    print(f"{k}: cas/rule mean {statistics.mean(v):.3f} (n {len(v)}, range {min(v):.3f}-{max(v):.3f})")
