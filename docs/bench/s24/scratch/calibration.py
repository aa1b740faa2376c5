"""Totals of a trace_sampling.py record: per draft, the accepted nodes DyTC predicted (the sum
of its reach probabilities over every tree) against those accepted; per estimate, the outcomes,
the rate accepted and the mean estimate at the time. Usage: python calibration.py TRACE.txt"""
import ast, re, sys
from collections import defaultdict

pred, got, prop = defaultdict(float), defaultdict(int), defaultdict(int)
est = defaultdict(lambda: [0, 0.0, 0.0])  # name: outcomes, accepted, sum of estimates
for line in open(sys.argv[1]):
    line = line.strip()
    if line.startswith("{'") and "pred" in line:
        for d, s in ast.literal_eval(line).items():
            p, g, n = re.match(r"pred ([\d.]+) got (\d+) of (\d+)", s).groups()
            pred[d] += float(p); got[d] += int(g); prop[d] += int(n)
    elif line.startswith("outcomes"):
        for name, (n, rate, mean) in ast.literal_eval(line.split(":", 1)[1].strip()).items():
            e = est[name]; e[0] += n; e[1] += n * rate; e[2] += n * mean
print("draft                      proposed  predicted accepted  accepted  pred/got")
for d in sorted(pred):
    print(f"{d:26s} {prop[d]:8d} {pred[d]:18.1f} {got[d]:9d} {pred[d] / max(got[d], 1):9.2f}")
print("\nestimate                   outcomes  accepted rate  mean estimate")
for name in sorted(est):
    n, acc, s = est[name]
    if n >= 10:
        print(f"{name:26s} {n:8d} {acc / n:14.2f} {s / n:14.2f}")
