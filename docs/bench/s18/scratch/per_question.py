"""Per question of a bench run (scratch, stop 18): CAS-Spec's speed over the naive loop's and what
each draft proposed and had accepted (first turns and second turns summed)."""
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][1:]
wall = {}
for r in rows:
    wall[(r["method"], r["question_id"])] = sum(t["wall_s"] for t in r["turns"])
for r in rows:
    if r["method"] != sys.argv[2] if len(sys.argv) > 2 else r["method"] != "cas-spec":
        continue
    prop, acc = {}, {}
    for t in r["turns"]:
        for k, v in t["stats"]["proposed"].items():
            prop[k] = prop.get(k, 0) + v
        for k, v in t["stats"]["accepted"].items():
            acc[k] = acc.get(k, 0) + v
    q = r["question_id"]
    short = {k.replace("search-0.3+w8a8-fast", "skip").replace("w8a8-fast", "int8"): f"{acc.get(k, 0)}/{v}" for k, v in prop.items()}
    print(f"{q:4d} {r['category']:15s} x{wall[('ar', q)] / wall[('cas-spec', q)]:.2f} (rule x{wall[('ar', q)] / wall[('pld-or-chain', q)]:.2f})  {short}")
