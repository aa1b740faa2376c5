import sys, statistics
sys.path.insert(0, "/work/main/tests")
exec(open("/tmp/prof/sim_prior.py").read().split("priors = [float")[0])
w = worlds[sys.argv[1] if len(sys.argv) > 1 else "s15 bench curve"]
steps = 1000
f = best_fixed(w, 3000, 1, ["cheap", "good", PLD, RECYCLE]); b = max(f, key=f.get)
res = []
for seed in range(40):
    d, pol, _ = run_dytc(w, steps, seed)
    g = pol.alpha["good"]
    res.append((d / f[b], g.count, g.alpha))
r = [x[0] for x in res]
low = [x for x in res if x[1] < 50]
print(f"best {b} mean {statistics.mean(r):.3f} min {min(r):.3f} max {max(r):.3f}; good<50 obs: {len(low)}/40")
for x in sorted(res)[:8]: print("  %.3f count %d alpha %.2f" % x)
