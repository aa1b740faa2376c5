"""torch.compile of one small function (the core's rms_norm, dynamic shapes) against eager: compile
time, us per call on one token row, bits. Usage: compile_one.py."""
import torch, time, statistics
torch.set_num_threads(2)
from casspec_ref.model import rms_norm, rope
def bench(f, n=5000):
    for _ in range(50): f()
    t = time.perf_counter()
    for _ in range(n): f()
    return 1e6 * (time.perf_counter() - t) / n
x = torch.randn(1, 1, 576); w = torch.randn(576)
t0 = time.perf_counter()
crms = torch.compile(rms_norm, dynamic=True)
crms(x, w, 1e-5)
print("compile s", round(time.perf_counter() - t0, 1))
print("eager rms us", round(bench(lambda: rms_norm(x, w, 1e-5)), 1), "compiled", round(bench(lambda: crms(x, w, 1e-5)), 1))
print("bits equal", torch.equal(rms_norm(x, w, 1e-5), crms(x, w, 1e-5)))
