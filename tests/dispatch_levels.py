"""The exactness tests under every dispatch level this CPU has (`make dispatch-levels`, part of
`make test`).

torch picks its vector kernels at start-up from the CPU (``ATEN_CPU_CAPABILITY`` forces a lower
level), and oneDNN and MKL pick theirs on their own (``ONEDNN_MAX_CPU_ISA``,
``MKL_ENABLE_INSTRUCTIONS`` cap them). A row's rounding changes with each, so a suite that is
green at one level proves nothing about another CPU. For each level this CPU can run, the
shape-invariance and elementwise tests run in a process of their own with all three set to that
level: the tiny models' row checks and every method's greedy equality, SmolLM2-135M's rows in
float32 and bfloat16, and prompt lookup, chain and CAS-Spec against the naive loop on it. The
level a process actually ran is read back from torch; a level the CPU lacks is named and not
run. Prints one line per level and fails if any level that ran failed, or ran at another level
than asked.

    python tests/dispatch_levels.py [LEVEL ...]     # default, avx2, avx512 (all by default)
    python tests/dispatch_levels.py --skip-native   # all but the level this process runs at

`make test` runs every level, the CPU's own included: its main pytest run uses one-thread
workers, so these runs, on the Makefile's two threads, are where the exactness tests meet a team
of threads. ``--skip-native`` leaves the CPU's own level to a suite run just made on it.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ("tests/test_shape_invariance.py", "tests/test_elementwise.py", "tests/test_invariance.py")
#: Per level: torch's capability name as torch reports it, the CPU flag it needs, and the caps
#: for oneDNN and MKL that match it (None: uncapped, the libraries' own choice on this CPU).
LEVELS = {
    "default": ("DEFAULT", None, "SSE41", "SSE4_2"),
    "avx2": ("AVX2", "avx2", "AVX2", "AVX2"),
    "avx512": ("AVX512", "avx512f", None, None),
}


def cpu_flags() -> set[str]:
    """The CPU's feature flags (x86 Linux); empty where /proc/cpuinfo does not list them."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def environment(level: str) -> dict[str, str]:
    """The environment of a process pinned to ``level``, every library capped to match."""
    _, _, onednn, mkl = LEVELS[level]
    env = {**os.environ, "ATEN_CPU_CAPABILITY": level}
    for name, value in (("ONEDNN_MAX_CPU_ISA", onednn), ("MKL_ENABLE_INSTRUCTIONS", mkl)):
        env.pop(name, None)
        if value is not None:
            env[name] = value
    # The kernel table is not timed at every level (its forms serve speed, not exactness);
    # the tiles and the attention are still checked at this level, as a user's load checks them.
    env.setdefault("CASSPEC_KERNELS", "default")
    return env


def capability_in(env: dict[str, str]) -> str:
    """The capability torch reports in a fresh process with ``env``."""
    probe = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def run_level(level: str) -> tuple[bool, str]:
    """Run the tests at ``level``: (passed, one line saying what ran)."""
    want = LEVELS[level][0]
    env = environment(level)
    got = capability_in(env)
    if got != want:
        return False, f"{level}: asked for {want}, torch ran {got}: not checked"
    caps = f"oneDNN {env.get('ONEDNN_MAX_CPU_ISA', 'uncapped')}, MKL "
    caps += env.get("MKL_ENABLE_INSTRUCTIONS", "uncapped")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *TESTS]
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    tail = (done.stdout.strip().splitlines() or ["(no output)"])[-1]
    if done.returncode != 0:
        print(done.stdout[-6000:], done.stderr[-2000:], sep="\n")
    return done.returncode == 0, f"{level}: ran ({got}; {caps}): {tail}"


def native_level() -> str | None:
    """The level this process's torch runs at, by `LEVELS` name (None if not one of them)."""
    import torch

    got = torch.backends.cpu.get_cpu_capability()
    return next((name for name, (want, *_) in LEVELS.items() if want == got), None)


def main(argv: list[str]) -> int:
    skip_native = "--skip-native" in argv
    argv = [a for a in argv if a != "--skip-native"]
    asked = argv or list(LEVELS)
    unknown = [a for a in asked if a not in LEVELS]
    if unknown:
        print(f"unknown level(s) {unknown}: choose from {list(LEVELS)}", file=sys.stderr)
        return 2
    flags = cpu_flags()
    x86 = platform.machine() in ("x86_64", "AMD64")
    lines, ok = [], True
    native = native_level() if skip_native else None
    for level in asked:
        needs = LEVELS[level][1]
        if level == native:
            lines.append(f"{level}: this CPU's own level, run by the main test suite")
            continue
        if needs is not None and (not x86 or needs not in flags):
            lines.append(f"{level}: NOT RUN: this CPU lacks {needs}; another machine must run it")
            continue
        passed, line = run_level(level)
        ok = ok and passed
        lines.append(line)
        print(line, flush=True)
    print("dispatch levels:")
    print("\n".join(f"  {line}" for line in lines))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
