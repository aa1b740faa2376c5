"""The greedy target law of a verify step (`target_law(logits, 0.0)` and its numpy copy, as
`speculative.verify_step` takes it) over N rows of SmolLM2's vocabulary, median of 30 (scratch,
stop 19). Run with PYTHONPATH at a worktree to time another commit's code."""
import statistics, time
import torch
import casspec_ref
from casspec_ref.sampling import target_law
V = 49152
print("package:", casspec_ref.__file__)
for n in (1, 2, 4, 8, 16, 32):
    logits = torch.randn(n, V)
    ts = []
    for _ in range(30):
        t = time.perf_counter()
        target_law(logits, 0.0, 0, 1.0).cpu().numpy()
        ts.append(time.perf_counter() - t)
    print(f"N {n:2d}: {1e3 * statistics.median(ts):.2f} ms")
