"""Decoding speed beside other work: quiet, beside a CPU-bound process, beside a second decoder.

Each measurement is one fresh process (the thread policy is chosen when a process starts), which
loads SmolLM2-135M-Instruct, decodes ``--tokens`` new tokens once to warm up and then once timed
(greedy, one chat prompt), and prints tokens per second. It runs under two thread settings:

- ``policy``: the library's (`casspec_ref.accel.threads`, ``CASSPEC_THREADS=auto``);
- ``inherited``: torch's defaults (``CASSPEC_THREADS=inherit``);

(``OMP_NUM_THREADS`` is removed from the children's environment: it would override both), for
the naive loop (``ar``), CAS-Spec (``cas-spec``) and, when transformers is installed,
transformers' ``generate`` on the same weights (``hf``), in three conditions:

- ``quiet``: nothing else started;
- ``python``: beside one pure-Python busy loop (one CPU-bound process);
- ``torch``: beside a second process decoding with the naive loop under the same setting.

Competitors run in their own process group, stop by themselves after ``--competitor-s`` seconds, and
are killed when their measurement ends (or the script exits), whatever happens. Each child has a
timeout (``--child-timeout``). With the defaults the script runs for a few minutes.

Output: one JSON record, printed and written to ``<out>/busy_machine.json`` with ``--out``:

    {
      "settings": {"tokens": int, "prompt": str, "competitor_s": float, "methods": [str],
                   "thread_settings": [str], "conditions": [str]},
      "environment": {"command": str, "machine": str, "cpus": int, "torch": str, "python": str,
                      "platform": str, "git_commit": str, "time": str,
                      "load": {"start": {...} | null, "end": {...} | null, "changed": bool | null}},
      "runs": [  # one per (setting, method, condition)
        {"setting": "policy" | "inherited", "method": "ar" | "cas-spec" | "hf",
         "condition": "quiet" | "python" | "torch",
         "tokens_per_s": float | null,  # null: the child failed or timed out ("error" says why)
         "threads": {...} | null,       # the child's thread policy record (`Policy.as_dict`)
         "error": str | null}
      ],
      "ratios": [  # busy over quiet tokens per second, per setting, method and busy condition
        {"setting": str, "method": str, "condition": "python" | "torch", "ratio": float | null}
      ],
      "speedups": [  # cas-spec over ar tokens per second, per setting and condition
        {"setting": str, "condition": str, "speedup": float | null}
      ]
    }

``environment.load`` is the other processes' load before and after the whole script
(`casspec_ref.accel.threads.load_record`); ``changed`` true means the quiet figures may not be.

    python benchmarks/busy_machine.py --out docs/bench
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

PROMPT = "Explain in two sentences why the sky is blue."
SETTINGS = {"policy": "auto", "inherited": "inherit"}
CONDITIONS = ("quiet", "python", "torch")
_LIVE: list[subprocess.Popen] = []


def _stop(proc: subprocess.Popen) -> None:
    """End a competitor and everything it started (its process group), then reap it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def _stop_all() -> None:
    while _LIVE:
        _stop(_LIVE.pop())


def child_env(setting: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["CASSPEC_THREADS"] = SETTINGS[setting]
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    return env


def start_competitor(condition: str, setting: str, seconds: float) -> subprocess.Popen | None:
    """The competing process of ``condition`` (None for quiet); it exits after ``seconds``."""
    if condition == "quiet":
        return None
    if condition == "python":
        code = (
            f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
        )
        cmd = [sys.executable, "-c", code]
    else:
        cmd = [sys.executable, __file__, "--compete", str(seconds)]
    quiet = subprocess.DEVNULL
    proc = subprocess.Popen(
        cmd, env=child_env(setting), start_new_session=True, stdout=quiet, stderr=quiet
    )
    _LIVE.append(proc)
    return proc


def measure(method: str, setting: str, tokens: int, timeout: float) -> dict[str, Any]:
    """One child process: its tokens per second and thread record, or the error."""
    cmd = [sys.executable, __file__, "--child", method, "--tokens", str(tokens)]
    try:
        done = subprocess.run(
            cmd, env=child_env(setting), capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"tokens_per_s": None, "threads": None, "error": f"timed out after {timeout} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return {"tokens_per_s": None, "threads": None, "error": tail[0][:300]}
    return {**json.loads(lines[-1]), "error": None}


def _load() -> tuple[Any, list[int]]:
    from casspec_ref.io.weights import load_model

    model, tokenizer = load_model()
    assert tokenizer is not None
    return model, tokenizer.apply_chat_template([{"role": "user", "content": PROMPT}])


def run_child(method: str, tokens: int) -> int:
    """Decode once to warm up, once timed; print ``{"tokens_per_s", "threads"}``."""
    from casspec_ref.accel import threads
    from casspec_ref.generate import generate_ar
    from casspec_ref.speculative import generate_speculative

    model, prompt = _load()
    if method == "ar":
        run = lambda: generate_ar(model, prompt, tokens).tokens  # noqa: E731
    elif method == "cas-spec":
        run = lambda: generate_speculative(model, prompt, tokens, method="cas-spec").tokens  # noqa: E731
    else:
        from casspec_ref.tools.bench import _make_hf_runner

        hf = _make_hf_runner("hf", model, ())
        run = lambda: hf(prompt, tokens)[0]  # noqa: E731
    run()
    start = time.perf_counter()
    out = run()
    seconds = time.perf_counter() - start
    print(json.dumps({"tokens_per_s": len(out) / seconds, "threads": threads.apply().as_dict()}))
    return 0


def run_competitor(seconds: float) -> int:
    """A second decoder: the naive loop, over and over, until ``seconds`` have passed."""
    from casspec_ref.generate import generate_ar

    end = time.monotonic() + seconds
    model, prompt = _load()
    while time.monotonic() < end:
        generate_ar(model, prompt, 16)
    return 0


def ratios(runs: list[dict[str, Any]]) -> tuple[list[dict], list[dict]]:
    """Busy over quiet tokens per second; CAS-Spec over the naive loop, per condition."""
    rate = {(r["setting"], r["method"], r["condition"]): r["tokens_per_s"] for r in runs}

    def over(a: float | None, b: float | None) -> float | None:
        return None if a is None or not b else round(a / b, 3)

    busy = [
        {
            "setting": s,
            "method": m,
            "condition": c,
            "ratio": over(rate[s, m, c], rate[s, m, "quiet"]),
        }
        for s, m, c in rate
        if c != "quiet"
    ]
    speedups = [
        {"setting": s, "condition": c, "speedup": over(rate[s, m, c], rate.get((s, "ar", c)))}
        for s, m, c in rate
        if m == "cas-spec"
    ]
    return busy, speedups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=32, help="new tokens per timed decode")
    parser.add_argument("--competitor-s", type=float, default=60.0, help="a competitor's life")
    parser.add_argument("--child-timeout", type=float, default=120.0)
    parser.add_argument("--methods", default="ar,cas-spec,hf")
    parser.add_argument("--settings", default=",".join(SETTINGS), help="policy,inherited")
    parser.add_argument("--conditions", default=",".join(CONDITIONS), help="quiet,python,torch")
    parser.add_argument("--out", type=Path, help="write busy_machine.json into this folder")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--compete", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        return run_child(args.child, args.tokens)
    if args.compete is not None:
        return run_competitor(args.compete)
    if args.tokens < 1:
        parser.error(f"--tokens={args.tokens} must be >= 1")
    methods = [m for m in args.methods.split(",") if m]
    if unknown := set(methods) - {"ar", "cas-spec", "hf"}:
        parser.error(f"unknown --methods {sorted(unknown)}: allowed are ar, cas-spec, hf")
    settings = [x for x in args.settings.split(",") if x]
    conditions = [x for x in args.conditions.split(",") if x]
    if set(settings) - set(SETTINGS) or set(conditions) - set(CONDITIONS) or not settings:
        parser.error(f"--settings among {list(SETTINGS)}, --conditions among {list(CONDITIONS)}")
    if "quiet" not in conditions:
        parser.error("--conditions must include quiet: the ratios are taken against it")
    try:
        import transformers  # noqa: F401
    except ImportError:
        methods = [m for m in methods if m != "hf"]
    atexit.register(_stop_all)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # atexit then stops the competitors
    from casspec_ref.accel import threads

    load_start = threads.machine_load()
    runs = []
    for setting in settings:
        for condition in conditions:
            for method in methods:
                competitor = start_competitor(condition, setting, args.competitor_s)
                try:
                    if competitor is not None:
                        time.sleep(1.0 if condition == "python" else 5.0)  # let it get going
                    result = measure(method, setting, args.tokens, args.child_timeout)
                finally:
                    if competitor is not None:
                        _stop(competitor)
                        _LIVE.remove(competitor)
                runs.append(
                    {"setting": setting, "method": method, "condition": condition, **result}
                )
                shown = result["tokens_per_s"]
                print(
                    f"{setting:9s} {condition:6s} {method:8s} "
                    + (f"{shown:6.1f} tok/s" if shown else f"failed: {result['error']}"),
                    file=sys.stderr,
                )
    busy, speedups = ratios(runs)
    record = {
        "settings": {
            "tokens": args.tokens,
            "prompt": PROMPT,
            "competitor_s": args.competitor_s,
            "methods": methods,
            "thread_settings": settings,
            "conditions": conditions,
        },
        "environment": _environment(
            threads.load_record(load_start, threads.machine_load()),
            shlex.join(["python", "benchmarks/busy_machine.py", *sys.argv[1:]]),
        ),
        "runs": runs,
        "ratios": busy,
        "speedups": speedups,
    }
    text = json.dumps(record, indent=1)
    print(text)
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "busy_machine.json").write_text(text + "\n")
    return 0


def _environment(load: dict[str, Any], command: str) -> dict[str, Any]:
    import torch

    from casspec_ref.tools.bench import git_commit, machine_name

    return {
        "command": command,
        "machine": machine_name("cpu"),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": git_commit(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load": load,
    }


if __name__ == "__main__":
    raise SystemExit(main())
