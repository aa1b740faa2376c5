import sys; sys.argv=[sys.argv[0]]+sys.argv[1:]
from noisy_replay import *
recs, costs, levels = load(sys.argv[1], sys.argv[2])
import noisy_replay as N
N.SIGMA, N.SPIKE = float(sys.argv[3]), float(sys.argv[4])
ar = sum(R.replay(recs, costs).seconds.values())
for seed in [-1, *range(8)]:
    r, pol = run(recs, costs, levels, seed, "shipped")
    print(seed, f"{ar/sum(r.seconds.values()):.3f}", {k: (round(v.alpha,2), v.count) for k, v in pol.alpha.items() if k in levels})
