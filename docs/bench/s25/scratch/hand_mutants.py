"""Hand mutants of stop 25's change (the decode-only figure and the timing split), each run against the tests that cover it; the source is restored after each. Usage: python hand_mutants.py (from the repository root)."""
import subprocess, sys, pathlib
muts = [
 ("casspec_ref/tools/bench.py", "tokens = sum(max(0, len(t.tokens) - 1) for t in self.turns)", "tokens = sum(len(t.tokens) for t in self.turns)"),
 ("casspec_ref/tools/bench.py", "if not a or not b or None in a or None in b:", "if not a or not b:"),
 ("casspec_ref/tools/bench.py", "return statistics.fmean(x for x in a if x is not None) / base_mean if base_mean else None", "return base_mean / statistics.fmean(x for x in a if x is not None) if base_mean else None"),
 ("casspec_ref/tools/bench.py", 'return {**result.stats, "decode_s": result.timing["decode_s"]}', 'return {**result.stats, "decode_s": result.timing["total_s"]}'),
 ("casspec_ref/tools/bench.py", 'return list(result.tokens), turn_stats(result)\n\n        return run_ar', 'return list(result.tokens), dict(result.stats)\n\n        return run_ar'),
 ("casspec_ref/speculative.py", "            t_decode = state.clock()  # the prompt's forward and the first token are behind\n", ""),
 ("casspec_ref/speculative.py", 'timing = {"prefill_s": t_decode - t_start, "decode_s": t_start + elapsed - t_decode}', 'timing = {"decode_s": t_decode - t_start, "prefill_s": t_start + elapsed - t_decode}'),
]
tests = ["tests/test_bench.py", "tests/test_speculative.py::test_timing_splits_the_prompt_from_the_decoding"]
for path, old, new in muts:
    p = pathlib.Path(path); src = p.read_text()
    assert src.count(old) == 1, old
    p.write_text(src.replace(old, new))
    try:
        r = subprocess.run([".venv/bin/python", "-m", "pytest", "-q", "-x", *tests], capture_output=True, text=True)
        print("KILLED " if r.returncode else "SURVIVED", path, old[:70].strip())
    finally:
        p.write_text(src)
