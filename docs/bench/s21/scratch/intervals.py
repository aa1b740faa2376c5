"""The harness's bootstrap intervals (`bench.bootstrap_interval`, `bench.paired_comparisons`)
recomputed from the answers a bench run recorded (results.jsonl), for runs made before the
harness reported them. Usage: intervals.py DIR/results.jsonl ..."""
import json, sys
from casspec_ref.tools import bench

for path in sys.argv[1:]:
    by_method: dict[str, dict] = {}
    for line in open(path):
        r = json.loads(line)
        if "method" not in r:
            continue
        q = bench.Question(r["question_id"], r["category"], ("",))
        turns = [bench.TurnRecord(t["tokens"], t["wall_s"], t["stats"]) for t in r["turns"]]
        by_method.setdefault(r["method"], {})[r["question_id"]] = bench.QuestionRecord(q, turns)
    ids = sorted(by_method["ar"], key=str)
    run = {m: [recs[i] for i in ids] for m, recs in by_method.items()}
    methods = list(run)
    print(path, f"({len(ids)} questions)")
    for m in methods:
        low, high = bench.bootstrap_interval(lambda idx, m=m: bench.speedup_over([run], m, "ar", idx), len(ids))
        print(f"  {m:<14} speedup {bench.speedup_over([run], m, 'ar', range(len(ids))):.3f} [{low:.3f}, {high:.3f}]")
    target = "cas-spec"
    print(bench.format_paired(target, bench.paired_comparisons([run], methods, target), len(ids)))
