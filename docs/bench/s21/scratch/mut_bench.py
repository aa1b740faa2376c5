import subprocess, shutil, sys
from pathlib import Path
P = Path("casspec_ref/tools/bench.py"); orig = P.read_text()
muts = {
 "M1 extremes": ("    return values[tail], values[resamples - 1 - tail]", "    return values[0], values[-1]"),
 "M2 unseeded": ("    rng = random.Random(seed)\n    values", "    rng = random.Random()\n    values"),
 "M3 swapped ratio": ("        mean_tokens_per_s([run[method][i] for i in idx])\n        / mean_tokens_per_s([run[base][i] for i in idx])",
                      "        mean_tokens_per_s([run[base][i] for i in idx])\n        / mean_tokens_per_s([run[method][i] for i in idx])"),
 "M4 target kept": ("        if other not in (\"ar\", target)", "        if other not in (\"ar\",)"),
 "M5 group intervals": ("                        if group == \"overall\"\n", "                        if True\n"),
 "M6 one run only": ("        / mean_tokens_per_s([run[base][i] for i in idx])\n        for run in runs\n", "        / mean_tokens_per_s([run[base][i] for i in idx])\n        for run in runs[:1]\n"),
}
for name, (a, b) in muts.items():
    assert orig.count(a) == 1, name
    P.write_text(orig.replace(a, b))
    r = subprocess.run([".venv/bin/python", "-m", "pytest", "-q", "-x", "tests/test_bench.py"], capture_output=True, text=True)
    print(name, "KILLED" if r.returncode else "SURVIVED", r.stdout.strip().splitlines()[-1])
P.write_text(orig)
