"""The benchmark harness runs end to end on a tiny model, so that it cannot rot.

No timing is asserted: only the structure of the results and the equality checks.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from casspec_ref.accel import threads
from casspec_ref.config import tiny_llama
from casspec_ref.generate import GenerationResult
from casspec_ref.model import Transformer
from casspec_ref.tools import bench


class ByteTokenizer:
    """A stand-in tokenizer: one token per byte of the text, folded into a small vocabulary."""

    stop_ids = (2,)

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        return [3 + b % (self.vocab_size - 3) for b in text.encode()]

    def apply_chat_template(self, messages: list[dict[str, str]]) -> list[int]:
        ids = [1]
        for m in messages:
            ids += self.encode(m["role"] + ":" + m["content"]) + [2]
        return ids + [1]

    def decode(self, ids: list[int]) -> str:
        return "".join(chr(ord("a") + (i % 26)) for i in ids)


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every run here reads the same quiet load at its start and end: what a run prints must not
    depend on what other processes (a second test worker) do meanwhile."""
    quiet = {"others_cores": 0.0, "cpus": 2, "loadavg_1m": 0.0}
    monkeypatch.setattr(threads, "machine_load", lambda window_s=0.5: dict(quiet))


@pytest.fixture(scope="module")
def tiny() -> tuple[Transformer, ByteTokenizer]:
    torch.manual_seed(0)
    model = Transformer(tiny_llama(max_seq_len=1024)).to(torch.float64).eval()
    return model, ByteTokenizer(model.config.vocab_size)


def write_questions(path: Path) -> None:
    rows = [
        {"question_id": 1, "category": "writing", "turns": ["say hi", "say it again"]},
        {"question_id": 2, "category": "qa", "turns": ["what is one plus one?"]},
        {"question_id": 3, "category": "rag", "turns": ["context: a b c a b c. repeat: a b"]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")


def test_load_questions_groups_mt_bench_categories(tmp_path: Path) -> None:
    path = tmp_path / "q.jsonl"
    write_questions(path)
    questions = bench.load_questions(path)
    assert [q.group for q in questions] == ["mt_bench", "qa", "rag"]
    assert questions[0].turns == ("say hi", "say it again")


def test_bundled_prompt_set_covers_the_six_groups() -> None:
    groups = {q.group for q in bench.load_questions(bench.default_questions_path())}
    assert groups == set(bench.GROUP_ORDER)


@pytest.mark.parametrize(
    "line, problem",
    [
        ('{"question_id": 1, "turns": ["x"]}', "category"),
        ('{"question_id": 1, "category": "qa", "turns": []}', "turns"),
        ("not json", ""),
    ],
)
def test_bad_question_files_get_clear_errors(tmp_path: Path, line: str, problem: str) -> None:
    path = tmp_path / "q.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ValueError, match=r"q.jsonl:1: not a Spec-Bench question"):
        bench.load_questions(path)


def test_first_divergence() -> None:
    assert bench.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert bench.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert bench.first_divergence([1, 2, 3], [1, 2]) == 2


def test_harness_end_to_end_on_a_tiny_model(tmp_path: Path, tiny) -> None:
    model, tokenizer = tiny
    questions = tmp_path / "q.jsonl"
    write_questions(questions)
    out = tmp_path / "out"
    status = bench.main(
        [
            "--questions",
            str(questions),
            "--methods",
            "ar,pld,cas-spec",
            "--runs",
            "2",
            "--max-new-tokens",
            "6",
            "--out",
            str(out),
            "--record",
            str(tmp_path / "record.json"),
            "--no-progress",
        ],
        model=model,
        tokenizer=tokenizer,
    )
    assert status == 0
    result = json.loads((out / "results.json").read_text())
    assert result["environment"]["torch"] == torch.__version__
    # The record make results reads is the summary, with the command that reproduces it.
    assert json.loads((tmp_path / "record.json").read_text()) == result
    command = result["environment"]["command"]
    assert "python -m casspec_ref bench --questions" in command and "--max-new-tokens 6" in command
    assert result["environment"]["machine"]
    records = result["records"]
    keys = {(r["method"], r["group"]) for r in records}
    for method in ("ar", "pld", "cas-spec"):
        for group in ("mt_bench", "qa", "rag", "overall"):
            assert (method, group) in keys
    for r in records:
        assert {
            "method",
            "group",
            "speedup",
            "speedup_total",
            "mat",
            "tokens_per_s",
            "equal_to_ar",
        } <= set(r)
        assert r["equal_to_ar"] is True, r
        assert r["mat"] >= 1.0
    ar_overall = next(r for r in records if r["method"] == "ar" and r["group"] == "overall")
    assert ar_overall["speedup"] == pytest.approx(1.0)
    assert ar_overall["speedup_interval"] == pytest.approx([1.0, 1.0])
    for r in records:  # an interval for the whole set only, around its figure
        if r["group"] != "overall":
            assert r["speedup_interval"] is None
        else:
            low, high = r["speedup_interval"]
            assert low <= r["speedup"] * (1 + 1e-12) and r["speedup"] <= high * (1 + 1e-12)
    paired = result["paired"]
    assert paired["target"] == "cas-spec" and set(paired["against"]) == {"pld"}
    low, high = paired["against"]["pld"]["interval"]
    assert low <= paired["against"]["pld"]["ratio"] <= high
    table = (out / "table.txt").read_text()
    assert table.startswith("method") and "95% interval" in table and "decode" in table
    assert ar_overall["speedup_decode"] == pytest.approx(1.0)
    assert all(r["speedup_decode"] > 0 for r in records)


def test_decode_speedup_leaves_each_turns_first_token_and_prompt_out() -> None:
    """Two questions: the naive loop decodes 9 tokens after the first in 1 s and 3 s (9 and 3
    tok/s, mean 6), the other method in 0.5 s and 1 s (18 and 9, mean 13.5): 13.5 / 6 = 2.25,
    whatever the walls (which hold the prompt's forward) say. A turn without ``decode_s``, as
    transformers' methods record, gives no decode figure."""

    def record(i: int, decode_s: float | None, wall: float) -> bench.QuestionRecord:
        stats = {} if decode_s is None else {"decode_s": decode_s}
        return bench.QuestionRecord(
            bench.Question(i, "qa", ("q",)), [bench.TurnRecord([0] * 10, wall, stats)]
        )

    base = [record(0, 1.0, 5.0), record(1, 3.0, 4.0)]
    mine = [record(0, 0.5, 9.0), record(1, 1.0, 1.5)]
    assert base[1].decode_tokens_per_s == pytest.approx(3.0)
    assert bench.decode_speedup(mine, base) == pytest.approx(2.25)
    assert bench.decode_speedup([record(0, None, 1.0), mine[1]], base) is None
    two_turns = bench.QuestionRecord(
        bench.Question(2, "qa", ("q", "r")),
        [
            bench.TurnRecord([0] * 4, 9.0, {"decode_s": 1.0}),
            bench.TurnRecord([0], 9.0, {"decode_s": 1.0}),
        ],
    )
    assert two_turns.decode_tokens_per_s == pytest.approx(1.5)  # (3 + 0) tokens over 2 s


def test_a_turn_records_the_seconds_of_its_decoding() -> None:
    timing = {"prefill_s": 1.0, "decode_s": 2.0, "total_s": 3.0, "tokens_per_s": 1.0}
    result = GenerationResult([7, 8, 9], [1], False, timing, {"mat": 1.0})
    assert bench.turn_stats(result) == {"mat": 1.0, "decode_s": 2.0}


def _records(walls: list[float], tokens: int = 10) -> list[bench.QuestionRecord]:
    """One record per question, each `tokens` tokens in the given wall seconds."""
    return [
        bench.QuestionRecord(
            bench.Question(i, "qa", ("q",)), [bench.TurnRecord([0] * tokens, wall, {})]
        )
        for i, wall in enumerate(walls)
    ]


def test_bootstrap_interval_on_cases_with_known_answers() -> None:
    """A statistic that does not depend on the questions has a point interval; the mean of two
    questions worth 0 and 1 takes 0, 0.5 or 1 (each extreme with probability 1/4, far beyond
    the 2.5% tails), so its 95% interval is exactly [0, 1]; the seed fixes the interval."""
    assert bench.bootstrap_interval(lambda idx: 3.0, 7) == (3.0, 3.0)
    values = [0.0, 1.0]
    mean = lambda idx: sum(values[i] for i in idx) / len(idx)  # noqa: E731
    assert bench.bootstrap_interval(mean, 2) == (0.0, 1.0)
    spread = [0.1 * i for i in range(20)]
    wide = bench.bootstrap_interval(lambda idx: sum(spread[i] for i in idx) / len(idx), 20)
    assert wide == bench.bootstrap_interval(lambda idx: sum(spread[i] for i in idx) / len(idx), 20)
    assert wide[0] < sum(spread) / 20 < wide[1]
    # The first index of a resample is uniform on 0..99: the 2.5% and 97.5% quantiles of 2000
    # draws are ~2 and ~97 (cut at the 50th from each end, not at the extremes).
    low, high = bench.bootstrap_interval(lambda idx: float(idx[0]), 100)
    assert 1 <= low <= 4 and 95 <= high <= 98
    for bad in ({"n": 0}, {"n": 3, "level": 1.0}, {"n": 3, "resamples": 0}):
        with pytest.raises(ValueError, match="bootstrap"):
            bench.bootstrap_interval(lambda idx: 0.0, **bad)


def test_paired_comparison_of_a_uniformly_faster_method_is_exact() -> None:
    """A method 1.25x faster on every question is 1.25x faster on every resample: ratio and
    interval are 1.25 exactly (up to rounding), however different the questions are; a method
    faster on one question only gets an interval that is not a point."""
    walls = [1.0, 3.0, 0.5, 7.0, 2.0]
    run = {
        "ar": _records(walls),
        "fast": _records([w / 1.25 for w in walls]),
        "one": _records([walls[0] / 2, *walls[1:]]),
    }
    assert bench.speedup_over([run], "fast", "ar", range(5)) == pytest.approx(1.25)
    paired = bench.paired_comparisons([run, run], ["ar", "fast", "one"], "fast")
    assert set(paired) == {"one"}
    against_fast = bench.paired_comparisons([run], ["ar", "one", "fast"], "one")["fast"]
    assert against_fast["interval"][0] < against_fast["ratio"] < against_fast["interval"][1]
    exact = bench.paired_comparisons([{**run, "slow": run["ar"]}], ["ar", "fast", "slow"], "fast")
    assert exact["slow"]["ratio"] == pytest.approx(1.25)
    assert exact["slow"]["interval"] == pytest.approx((1.25, 1.25))


def test_a_record_in_a_missing_folder_is_refused_before_anything_runs(
    tmp_path: Path, tiny, capsys
) -> None:
    model, tokenizer = tiny
    record = tmp_path / "absent" / "record.json"
    argv = ["--out", str(tmp_path / "out"), "--record", str(record), "--no-progress"]
    assert bench.main(argv, model=model, tokenizer=tokenizer) == 2
    assert "--record" in capsys.readouterr().err and not record.exists()


def test_unknown_method_is_rejected(tiny, capsys) -> None:
    model, tokenizer = tiny
    assert bench.main(["--methods", "ar,warp-drive"], model=model, tokenizer=tokenizer) == 2
    assert "warp-drive" in capsys.readouterr().err


def test_parse_method() -> None:
    known = ("ar", "pld", "chain", "cas-spec")
    assert bench.parse_method("pld:3", known) == ("pld", 3)
    assert bench.parse_method("cas-spec", known) == ("cas-spec", None)
    assert bench.parse_method("pld:3+plain", known) == ("pld", 3)  # the same method, plain forms
    assert bench.parse_method("cas-spec+plain", known) == ("cas-spec", None)
    for bad in ("pld:0", "pld:x", "cas-spec:2", "warp", "chain:", "warp+plain", "pld:0+plain"):
        with pytest.raises(ValueError, match="method"):
            bench.parse_method(bad, known)
    for naive in ("ar+plain", "ar-plain+plain", "hf+plain"):  # no plain form of a naive loop
        with pytest.raises(ValueError, match="the plain naive loop is 'ar-plain'"):
            bench.parse_method(naive, known)
    assert [bench.plain_form(m) for m in ("ar", "ar-plain", "cas-spec", "cas-spec+plain")] == [
        False,
        True,
        False,
        True,
    ]


def test_sized_methods_sampling_verify_curve_and_dytc_report(tmp_path: Path, tiny) -> None:
    """pld:K and chain:K run; sampling runs without a token-for-token comparison; the verify
    curve and DyTC's learned state land in results.json."""
    model, tokenizer = tiny
    questions = tmp_path / "q.jsonl"
    write_questions(questions)
    out = tmp_path / "out"
    argv = [
        "--questions",
        str(questions),
        "--methods",
        "ar,pld:2,chain:2,cas-spec",
        "--runs",
        "1",
        "--max-new-tokens",
        "5",
        "--out",
        str(out),
        "--no-progress",
        "--verify-curve",
        "--temperature",
        "0.8",
        "--top-p",
        "0.9",
        "--seed",
        "3",
    ]
    assert bench.main(argv, model=model, tokenizer=tokenizer) == 0
    result = json.loads((out / "results.json").read_text())
    methods = {r["method"] for r in result["records"]}
    assert methods == {"ar", "pld:2", "chain:2", "cas-spec"}
    assert result["settings"]["temperature"] == 0.8 and result["divergences"] == []
    assert all(r["equal_to_ar"] is None for r in result["records"])  # sampled: not compared
    assert set(result["verify_curve_ms"]) == {str(t) for t in bench.VERIFY_SIZES}
    report = result["dytc"]["cas-spec"]
    assert report["verify_ms"] and {"pld", "recycle"} <= set(report["drafts"])
    assert report["drafts"]["pld next"]["c"] is None  # a continuing estimate has no cost of its own
    assert report["drafts"]["pld"]["c"] is not None  # the lookup's own estimate has one
    assert bench.main([*argv[:-6], "--temperature", "-1"], model=model, tokenizer=tokenizer) == 2


def _answers(walls: list[float], tokens: list[list[int]]) -> list[bench.QuestionRecord]:
    """One single-turn record per question: the given tokens in the given wall seconds."""
    return [
        bench.QuestionRecord(
            bench.Question(i, "qa", ("q",)), [bench.TurnRecord(list(tokens[i]), wall, {})]
        )
        for i, wall in enumerate(walls)
    ]


SAME = [[5, 6, 7], [8, 9, 10]]
OTHER = [[5, 6, 7], [8, 0, 10]]  # the second question differs at token 1


@pytest.mark.parametrize(
    "plain_tokens, plain_walls, mine_tokens, sampled, base",
    [
        (SAME, [1.0, 1.0], SAME, False, "ar-plain"),  # equal to both: the faster, ar-plain
        (SAME, [4.0, 4.0], SAME, False, "ar"),  # equal to both: the faster, ar
        (OTHER, [1.0, 1.0], SAME, False, "ar"),  # equal to ar only: ar, though ar-plain is faster
        (OTHER, [4.0, 4.0], OTHER, False, "ar-plain"),  # equal to ar-plain only
        (OTHER, [1.0, 1.0], [[1], [2]], False, "ar"),  # equal to neither: ar (and flagged)
        (SAME, [1.0, 1.0], SAME, True, "ar"),  # sampled: outputs not compared, ar
    ],
)
def test_the_base_is_the_faster_naive_loop_whose_output_the_method_equals(
    plain_tokens, plain_walls, mine_tokens, sampled, base
) -> None:
    run = {
        "ar": _answers([2.0, 2.0], SAME),
        "ar-plain": _answers(plain_walls, plain_tokens),
        "m": _answers([1.0, 1.0], mine_tokens),
    }
    assert bench.speedup_base([run, run], "m", sampled) == base
    # The naive loops' own rows are against ar; without ar-plain in the run, ar is the base.
    assert bench.speedup_base([run], "ar-plain", sampled) == "ar"
    assert bench.speedup_base([{"ar": run["ar"], "m": run["m"]}], "m", sampled) == "ar"


def test_every_speedup_of_a_row_is_against_its_base() -> None:
    """m runs in 1 s, ar in 2 s, ar-plain in 1 s (equal outputs): m's speedup against ar-plain is
    1, while ar-plain's row is against ar (2: the plain form's speed ratio)."""
    run = {
        "ar": _answers([2.0, 2.0], SAME),
        "ar-plain": _answers([1.0, 1.0], SAME),
        "m": _answers([1.0, 1.0], SAME),
    }
    methods = ["ar", "ar-plain", "m"]
    equal, _, _ = bench.compare_outputs([run], methods, sampled=False)
    bases = {m: bench.speedup_base([run], m, False) for m in methods}
    rows = {r["method"]: r for r in bench.summarize([run], methods, equal, bases)}
    assert rows["m"]["base"] == "ar-plain" and rows["ar-plain"]["base"] == "ar"
    for key in ("speedup", "speedup_total"):
        assert rows["m"][key] == pytest.approx(1.0) and rows["ar-plain"][key] == pytest.approx(2.0)
    assert rows["m"]["speedup_interval"] == pytest.approx([1.0, 1.0])
    assert bench.base_label(rows["m"]) == "ar-plain"
    assert bench.base_label({"method": "m", "equal_to_ar": False}) == "ar (not equal)"
    assert bench.base_label({"method": "m", "equal_to_ar": None}) == "ar (sampled)"
    assert "ar-plain" in bench.format_table(list(rows.values())).splitlines()[-1]


def test_a_divergent_plain_loop_is_counted_and_fails_no_check() -> None:
    run = {
        "ar": _answers([1.0, 1.0], SAME),
        "ar-plain": _answers([1.0, 1.0], OTHER),
        "m": _answers([1.0, 1.0], SAME),
    }
    equal, divergences, plain = bench.compare_outputs([run], ["ar", "ar-plain", "m"], False)
    assert equal == {"ar": True, "ar-plain": False, "m": True} and divergences == []
    assert list(plain) == ["ar-plain"]
    assert (plain["ar-plain"]["differing"], plain["ar-plain"]["generations"]) == (1, 2)
    assert plain["ar-plain"]["divergences"][0]["position"] == 1
    assert bench.unequal_methods(equal) == []
    assert bench.plain_line("ar-plain", plain["ar-plain"]) == (
        "ar-plain differs from ar in 1 of 2 generations, first differences at tokens 1"
    )
    # Another method's divergence still fails the run; a sampled run compares nothing.
    equal, divergences, _ = bench.compare_outputs([{**run, "m": run["ar-plain"]}], [*run], False)
    assert bench.unequal_methods(equal) == ["m"] and [d["method"] for d in divergences] == ["m"]
    assert bench.compare_outputs([run], [*run], True) == ({m: None for m in run}, [], {})
    # The same method in the plain forms is reported apart, beside the plain loop, in run order.
    both = {**run, "m+plain": run["ar-plain"]}
    equal, divergences, plain = bench.compare_outputs([both], [*both], False)
    assert equal == {"ar": True, "ar-plain": False, "m": True, "m+plain": False}
    assert divergences == [] and list(plain) == ["ar-plain", "m+plain"]
    assert plain["m+plain"]["differing"] == 1 and bench.unequal_methods(equal) == []


def test_the_plain_loop_in_a_run_is_reported_apart(
    tmp_path: Path, tiny, capsys, monkeypatch
) -> None:
    """The tiny model's plain form is made to choose other tokens (its logits negated): the run
    counts the divergences of ar-plain and of pld in the plain forms (whose tokens are then the
    plain loop's, its base), pld's base stays ar, and no warning is raised."""
    model, tokenizer = tiny
    forward = model.forward

    def plain_differs(*args, **kwargs):
        logits = forward(*args, **kwargs)
        return logits if model.shape_invariant else -logits

    monkeypatch.setattr(model, "forward", plain_differs)
    questions = tmp_path / "q.jsonl"
    write_questions(questions)
    out = tmp_path / "out"
    argv = ["--questions", str(questions), "--methods", "ar,ar-plain,pld,pld+plain", "--runs", "1"]
    argv += ["--max-new-tokens", "4", "--out", str(out), "--no-progress"]
    assert bench.main(argv, model=model, tokenizer=tokenizer) == 0
    result = json.loads((out / "results.json").read_text())
    overall = {r["method"]: r for r in result["records"] if r["group"] == "overall"}
    assert overall["pld"]["base"] == "ar" and overall["pld"]["equal_to_ar"] is True
    assert overall["ar-plain"]["equal_to_ar"] is False and result["divergences"] == []
    assert result["plain_divergences"]["ar-plain"]["generations"] == 4  # 3 questions, 1 of 2 turns
    assert result["plain_divergences"]["ar-plain"]["differing"] == 4
    assert (
        overall["pld+plain"]["equal_to_ar"] is False and overall["pld+plain"]["base"] == "ar-plain"
    )
    assert result["plain_divergences"]["pld+plain"]["differing"] == 4
    assert model.shape_invariant  # each method's forms were set for its run alone
    captured = capsys.readouterr()
    assert "ar-plain differs from ar in 4 of 4 generations" in captured.out
    assert "pld+plain differs from ar in 4 of 4 generations" in captured.out
    assert "WARNING" not in captured.err and "DIVERGENCE" not in captured.err


def test_machine_name_names_the_widest_vector_extension() -> None:
    def cpuinfo(flags: str) -> str:
        return f"processor\t: 0\nmodel name\t: AMD EPYC\nflags\t\t: {flags}\n\nprocessor\t: 1\n"

    assert bench.machine_name("cpu", cpuinfo("fpu sse4_2 avx avx2 fma")).endswith(", AVX2")
    wide = bench.machine_name("cpu", cpuinfo("avx2 avx512f avx512bw avx512_bf16"))
    assert wide.startswith("AMD EPYC, ") and wide.endswith(", AVX-512 (bf16)")
    arm = "processor\t: 0\nFeatures\t: fp asimd sve\nCPU part\t: 0xd40\n"
    assert bench.machine_name("cpu", arm).endswith(", SVE")
    assert bench.machine_name("cpu", "model name\t: Old\nflags\t: fpu\n").endswith(" cores")


def test_a_run_from_modified_sources_names_no_bare_commit(tmp_path: Path, monkeypatch) -> None:
    """The record's commit is the checkout's, marked ``+modified`` while a tracked file of the
    package differs from it (a file outside the package, or an untracked one, does not count)."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    (tmp_path / "casspec_ref").mkdir()
    (tmp_path / "casspec_ref" / "m.py").write_text("A = 1\n")
    (tmp_path / "notes.md").write_text("n\n")
    monkeypatch.chdir(tmp_path)
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "c"], check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert bench.git_commit() == head.strip()
    (tmp_path / "notes.md").write_text("changed\n")
    (tmp_path / "casspec_ref" / "new.py").write_text("B = 2\n")
    assert bench.git_commit() == head.strip()
    (tmp_path / "casspec_ref" / "m.py").write_text("A = 2\n")
    assert bench.git_commit() == head.strip() + "+modified"
    monkeypatch.chdir(tmp_path / "..")
    assert "+modified" not in bench.git_commit()


def test_a_records_command_names_its_program_and_the_thread_count_it_ran_under(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert (
        bench.command_line(["--quick"]) == "OMP_NUM_THREADS=3 python -m casspec_ref bench --quick"
    )
    script = bench.command_line(["recost", "a b.json"], ("benchmarks/dytc_replay.py",))
    assert script == "OMP_NUM_THREADS=3 python benchmarks/dytc_replay.py recost 'a b.json'"
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert bench.command_line(["x"], ("benchmarks/dsia_table.py",)) == (
        "python benchmarks/dsia_table.py x"
    )
