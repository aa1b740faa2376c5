"""DyTC's decisions timed on the seeded simulator (tests/dytc_simulator.py): the same worlds and
seeds give the same decisions, so a change that keeps them must keep every figure printed here
but the seconds. Usage: python plan_time.py [MODULE_FILE]  (default: the package's dytc.py)."""
import importlib.util, sys, time, hashlib
sys.path.insert(0, "tests")
import casspec_ref.dytc as shipped
if len(sys.argv) > 1:  # swap in another dytc.py (e.g. the previous commit's) before the simulator imports it
    spec = importlib.util.spec_from_file_location("casspec_ref.dytc", sys.argv[1])
    mod = importlib.util.module_from_spec(spec); sys.modules["casspec_ref.dytc"] = mod; spec.loader.exec_module(mod)
import dytc_simulator as sim

grow_seconds, grows = 0.0, 0
orig_grow = sim.DyTCPolicy.grow
def timed_grow(self, drafter, drafts):
    global grow_seconds, grows
    t = time.perf_counter(); out = orig_grow(self, drafter, drafts); grow_seconds += time.perf_counter() - t
    grows += 1
    return out
sim.DyTCPolicy.grow = timed_grow
digest = hashlib.sha256()
for name, curve in sim.CURVES.items():
    for seed in range(3):
        rate, policy, sizes = sim.run_dytc(sim.default_world(curve), 2000, seed)
        digest.update(repr((name, seed, rate, sizes)).encode())
        print(f"{name:18s} seed {seed}: {rate:9.4f} tok/s, mean tree {sum(sizes)/len(sizes):.3f}")
print(f"decisions digest {digest.hexdigest()[:16]}")
print(f"grow: {grows} calls, {1e3 * grow_seconds / grows:.3f} ms a call (Python, this machine)")
