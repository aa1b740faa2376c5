"""Hostile and broken command lines, prompts, API arguments and question files.

Findings 4-7 and 10 of the hostile-input probe, each a test: untokenizable text exits 2 with a
message; ``--json --show-tree`` keeps stdout one JSON object; a closed or broken stdout and
Ctrl-C end quietly with the conventional statuses; ``generate_ar`` and ``generate_speculative``
share one boundary check; bench creates its output first, appends answer by answer, and resumes.
The subprocess tests run the real ``python -m casspec_ref`` on a tiny GGUF (about 2 s each).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from hostile_support import tiny_model, write_tiny_gguf

from casspec_ref.config import tiny_llama
from casspec_ref.generate import generate_ar
from casspec_ref.speculative import generate_speculative
from casspec_ref.tools import bench, cli

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gguf_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_gguf(tmp_path_factory.mktemp("model") / "tiny.gguf")


def _generate(gguf_path: Path, *args: str) -> list[str]:
    return ["generate", "--model", str(gguf_path), "--max-new-tokens", "8", *args]


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}


# ----------------------------------------------------------------------- finding 4: untokenizable


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["a\x04b"], "character '\\\\x04'.*byte 0x04"),
        (["--raw", "a\x13b"], "character '\\\\x13'.*byte 0x13"),
        (["abc\udcff"], "byte 0xFF.*not valid UTF-8"),  # how Python passes a raw 0xFF argv byte
    ],
)
def test_f4_untokenizable_prompt_exits_2(gguf_path: Path, capsys, args, message) -> None:
    assert cli.main(_generate(gguf_path, *args)) == 2
    err = capsys.readouterr().err
    # The model's load may say first what the machine's check found ("casspec_ref: ..." lines).
    said = [line for line in err.splitlines() if not line.startswith("casspec_ref: ")]
    assert said[0].startswith("error: the prompt cannot be tokenized"), err
    assert "Traceback" not in err
    assert re.search(message, err), err


def test_f4_untokenizable_bench_question_exits_2(gguf_path: Path, tmp_path: Path, capsys) -> None:
    questions = tmp_path / "q.jsonl"
    questions.write_text(json.dumps({"question_id": 7, "category": "qa", "turns": ["x\x04"]}))
    status = bench.main(
        ["--questions", str(questions), "--model", str(gguf_path), "--methods", "ar"]
        + ["--out", str(tmp_path / "out"), "--no-progress"]
    )
    assert status == 2
    assert "question 7: cannot be tokenized" in capsys.readouterr().err


def test_f4_subprocess_raw_bytes_exit_2(gguf_path: Path) -> None:
    for prompt in (b"a\x04b", b"abc\xff"):
        proc = subprocess.run(
            [sys.executable, "-m", "casspec_ref", *_generate(gguf_path, "x")[:-1]]
            + [os.fsdecode(prompt)],
            capture_output=True,
            env=_env(),
            timeout=120,
        )
        assert proc.returncode == 2, proc.stderr
        assert b"Traceback" not in proc.stderr and b"cannot be tokenized" in proc.stderr


# ----------------------------------------------------------------------- finding 5: the tree


def test_f5_json_with_show_tree_keeps_stdout_json(gguf_path: Path, capsys) -> None:
    args = _generate(gguf_path, "--raw", "--json", "--show-tree", "hello hello hello")
    assert cli.main(args) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)  # the whole of stdout is one JSON object
    assert len(out["generated_ids"]) == 8
    assert "step 1:" in captured.err  # the tree went to stderr
    # Without --json the tree still goes to stdout, as before.
    assert cli.main(_generate(gguf_path, "--raw", "--show-tree", "hello hello hello")) == 0
    assert "step 1:" in capsys.readouterr().out


# ----------------------------------------------------------------------- finding 6: stdout, Ctrl-C


def test_f6_broken_pipe_exits_quietly(gguf_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "casspec_ref", *_generate(gguf_path, "hi")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away before anything is written (like `| head -c 0`)
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == cli.EXIT_BROKEN_PIPE
    assert err == b"", err


def test_f6_closed_stdout_is_not_a_crash(gguf_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "casspec_ref", *_generate(gguf_path, "hi")],
        stderr=subprocess.PIPE,
        env=_env(),
        timeout=120,
        preexec_fn=lambda: os.close(1),  # noqa: PLW1509 - the child starts with fd 1 closed
    )
    assert proc.returncode == 0, proc.stderr
    assert b"Traceback" not in proc.stderr


def test_f6_sigint_exits_130_without_traceback(gguf_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import signal, sys, time
        # A test run started as a background job inherits SIGINT ignored, and Python then
        # installs no KeyboardInterrupt handler: restore it, as an interactive shell has it.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        import casspec_ref.generate as g
        def wait(*args, **kwargs):
            print("ready", file=sys.stderr, flush=True)
            time.sleep(60)
        g.generate_ar = wait
        from casspec_ref.tools import cli
        sys.exit(cli.main(["generate", "--model", {str(gguf_path)!r}, "--method", "ar", "hi"]))
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script], stderr=subprocess.PIPE, env=_env(), text=True
    )
    assert proc.stderr is not None
    assert proc.stderr.readline().strip() == "ready"
    proc.send_signal(signal.SIGINT)
    err = proc.stderr.read()
    assert proc.wait(timeout=60) == cli.EXIT_INTERRUPTED, err
    assert "Traceback" not in err and "interrupted" in err


def test_f6_in_process_statuses(gguf_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def write(self, text: str) -> int:
            raise BrokenPipeError

        def flush(self) -> None:
            raise BrokenPipeError

        def fileno(self) -> int:
            raise ValueError("no descriptor")

    monkeypatch.setattr(sys, "stdout", Broken())
    assert cli.main(_generate(gguf_path, "hi")) == cli.EXIT_BROKEN_PIPE

    def interrupt(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("casspec_ref.io.weights.load_model", interrupt)
    assert cli.main(_generate(gguf_path, "hi")) == cli.EXIT_INTERRUPTED


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--seed", str(10**26)], "--seed"),
        (["--seed", "-1"], "--seed"),
        (["--memory-budget", "lots"], "--memory-budget 'lots'"),
        (["--memory-budget", "1K"], "memory budget"),
        (["--max-context", "0"], "--max-context=0"),
        (["--max-new-tokens", "-3"], "--max-new-tokens=-3"),
        (["--max-new-tokens", "1000"], "exceeds the model context"),
    ],
)
def test_bad_generate_flags_exit_2(gguf_path: Path, capsys, args, message) -> None:
    assert cli.main(_generate(gguf_path, *args, "hi")) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_bad_model_paths_exit_2(tmp_path: Path, capsys) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model at all")
    for model in ("", str(tmp_path / "missing.gguf"), str(junk), str(tmp_path)):
        assert cli.main(["generate", "--model", model, "hi"]) == 2
        assert "Traceback" not in capsys.readouterr().err


# ----------------------------------------------------------------------- finding 7: API arguments


def test_f7_tensor_prompts_one_boundary_check() -> None:
    model = tiny_model(tiny_llama(vocab_size=32, max_seq_len=64))
    ids = [3, 4, 5, 6]
    expected = generate_ar(model, ids, 4).tokens
    for good in (torch.tensor(ids), torch.tensor([ids]), np.array(ids, dtype=np.int32)):
        assert generate_ar(model, good, 4).tokens == expected
        assert generate_speculative(model, good, 4, method="pld").tokens == expected
    bad = {
        "shape \\[2, 4\\]": torch.tensor([ids, ids]),
        "dtype torch.float32": torch.tensor(ids, dtype=torch.float32),
        "dtype torch.bool": torch.tensor([True, False]),
        "shape \\[1, 1, 4\\]": torch.tensor([[ids]]),
        "dtype float64": np.array(ids, dtype=np.float64),
        "must be a sequence of token ids, got str": "3 4 5",
        "contains \\[3.0\\]": [3.0, 4],
        "contains \\[True\\]": [True, 4],
    }
    for message, prompt in bad.items():
        for generate in (generate_ar, generate_speculative):
            with pytest.raises(ValueError, match=message) as info:
                generate(model, prompt, 4)
            assert "tensor(" not in str(info.value) and len(str(info.value)) < 300
    long_prompt = torch.zeros(1, 60, dtype=torch.long)
    with pytest.raises(ValueError, match="exceeds the model context") as info:
        generate_ar(model, long_prompt, 10)
    assert "tensor(" not in str(info.value)


def test_f7_rng_must_be_a_random_source() -> None:
    model = tiny_model(tiny_llama(vocab_size=32, max_seq_len=64))
    for generate in (generate_ar, generate_speculative):
        with pytest.raises(ValueError, match="rng is a object: it must provide"):
            generate(model, [3, 4], 2, temperature=1.0, rng=object())


# ----------------------------------------------------------------------- finding 10: bench


class _Tok:
    stop_ids = (2,)

    def apply_chat_template(self, messages: list[dict[str, str]]) -> list[int]:
        ids = [1]
        for m in messages:
            ids += [3 + b % 29 for b in (m["role"] + m["content"]).encode()] + [2]
        return ids

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(97 + i % 26) for i in ids)


def _questions(path: Path, n: int = 4, long: bool = False) -> Path:
    rows = [
        {"question_id": i, "category": "qa", "turns": ["tell me " * (80 if long else 1) + str(i)]}
        for i in range(n)
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return path


@pytest.fixture(scope="module")
def bench_model() -> torch.nn.Module:
    return tiny_model(tiny_llama(vocab_size=32, max_seq_len=128))


def _bench(tmp_path: Path, model, *extra: str) -> int:
    args = ["--questions", str(_questions(tmp_path / "q.jsonl")), "--methods", "ar,pld"]
    args += ["--runs", "1", "--max-new-tokens", "4", "--warmup", "0", "--no-progress"]
    return bench.main([*args, *extra], model=model, tokenizer=_Tok())


def test_f10_unwritable_out_fails_before_running(
    tmp_path: Path, bench_model, capsys, monkeypatch
) -> None:
    calls = []
    monkeypatch.setattr(bench, "run_question", lambda *a, **k: calls.append(1))
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert _bench(tmp_path, bench_model, "--out", str(blocker / "out")) == 2
    assert "--out" in capsys.readouterr().err and not calls


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--limit", "-1"], "--limit=-1"),
        (["--warmup", "-2"], "--warmup=-2"),
        (["--runs", "0"], "--runs=0"),
        (["--device", "tpu"], "'tpu' is not supported"),
        (["--memory-budget", "-5"], "--memory-budget"),
    ],
)
def test_f10_bad_bench_flags_exit_2(tmp_path: Path, bench_model, capsys, extra, message) -> None:
    assert _bench(tmp_path, bench_model, "--out", str(tmp_path / "o"), *extra) == 2
    assert message in capsys.readouterr().err


def test_f10_bad_model_and_long_question_exit_2(tmp_path: Path, bench_model, capsys) -> None:
    questions = str(_questions(tmp_path / "q.jsonl"))
    status = bench.main(
        ["--questions", questions, "--model", str(tmp_path / "nope.gguf")]
        + ["--out", str(tmp_path / "o")]
    )
    assert status == 2 and "no model at" in capsys.readouterr().err
    long = str(_questions(tmp_path / "long.jsonl", long=True))
    status = bench.main(
        ["--questions", long, "--methods", "ar", "--out", str(tmp_path / "o2"), "--no-progress"],
        model=bench_model,
        tokenizer=_Tok(),
    )
    assert status == 2 and "exceeds the model context 128" in capsys.readouterr().err


def test_f10_results_are_appended_and_resumed(tmp_path: Path, bench_model, monkeypatch) -> None:
    out = tmp_path / "out"
    real = bench.run_question
    calls: list[object] = []

    def interrupted_after_five(*args, **kwargs):
        if len(calls) == 5:
            raise KeyboardInterrupt
        calls.append(args[2].question_id)
        return real(*args, **kwargs)

    monkeypatch.setattr(bench, "run_question", interrupted_after_five)
    with pytest.raises(KeyboardInterrupt):
        _bench(tmp_path, bench_model, "--out", str(out))
    lines = (out / "results.jsonl").read_text().splitlines()
    assert json.loads(lines[0])["settings"]["methods"] == ["ar", "pld"]
    assert len(lines) == 1 + 5  # every answer measured before the interruption is kept
    kept = [json.loads(line) for line in lines[1:5]]  # questions 0 and 1, both methods

    calls.clear()
    monkeypatch.setattr(
        bench, "run_question", lambda *a, **k: (calls.append(a[2].question_id), real(*a, **k))[1]
    )
    assert _bench(tmp_path, bench_model, "--out", str(out), "--resume") == 0
    assert calls == [2, 2, 3, 3]  # question 2 (cut mid-way) and 3 run; 0 and 1 are reused
    lines = (out / "results.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines[1:5]] == kept
    assert len(lines) == 1 + 8
    result = json.loads((out / "results.json").read_text())
    assert result["settings"]["n_questions"] == 4
    # Other settings cannot resume this file.
    assert _bench(tmp_path, bench_model, "--out", str(out), "--resume", "--runs", "2") == 2


def test_tokenizer_entry_points_validate(gguf_path: Path) -> None:
    from casspec_ref.io.weights import load_model

    _, tokenizer = load_model(gguf_path)
    assert tokenizer.decode(tokenizer.encode("hello")) == "hello"
    assert tokenizer.decode(np.array([50, 51])) == tokenizer.decode([50, 51])
    for bad, message in (
        ([3, None], "None.*not an integer"),
        ([3, 2.0], "2.0.*not an integer"),
        ([True], "True.*not an integer"),
        ([3, 100], "100 is outside the vocabulary"),
        ("abc", "got str"),
    ):
        for decode in (tokenizer.decode, tokenizer.decode_bytes):
            with pytest.raises(ValueError, match=message):
                decode(bad)
    with pytest.raises(ValueError, match="text must be a str"):
        tokenizer.encode(b"bytes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="messages\\[0\\] must be a dict"):
        tokenizer.apply_chat_template([{"role": "user"}])
