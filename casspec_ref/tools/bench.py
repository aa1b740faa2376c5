"""The speed harness: Spec-Bench's protocol on any question set, CPU or CUDA.

``python -m casspec_ref bench --questions FILE --methods ar,pld,cas-spec --max-new-tokens N
--runs R --device cpu|cuda --dtype float32|bfloat16|float16 --out DIR [--quick] [--resume]``

Nothing measured is lost: ``--out`` is created before anything runs, and each answer is appended
to ``DIR/results.jsonl`` (a settings line, then one line per run, question and method) as soon
as it is measured; ``--resume`` reloads the questions that line file holds in full and runs
only the others. The summary (``results.json``, ``table.txt``, plots) is written at the end;
``--record FILE`` also writes ``results.json`` to FILE, one of the records in docs/bench/ that
``make results`` turns into docs/results.md (its ``environment`` names the command, the machine
and the commit, which the page prints beside every figure).

Protocol (docs/method.md §7, after Spec-Bench, Xia et al. 2024):
- questions in Spec-Bench's ``question.jsonl`` format (``question_id``, ``category``, ``turns``);
  the eight MT-Bench categories count as one group, ``mt_bench``; a multi-turn question is a
  conversation in which each turn sees the method's previous answers, and its tokens and wall
  times are summed over the turns;
- batch 1, warm-up runs before timing, prefill inside the timed region, CUDA synchronized around
  every timed call;
- every method's greedy output is checked equal to the naive loop's before any speed is reported
  (the first divergence is printed); the divergences from ``ar`` of the methods in the plain
  form (``ar-plain``, ``M+plain``) are counted apart, a lesson in rounding that fails no check;
- speedup as Spec-Bench computes it (the mean over questions of tokens/s, divided by the same mean
  for the naive loop: of the naive loops in the run whose outputs the method equals, the faster;
  ``ar`` under sampling or when it equals none, see `speedup_base`), as total tokens over total
  time, and over the decoding alone (each turn's prompt forward and first token left out for
  both methods: `decode_speedup`); MAT pooled over all steps, bonus token included; R runs,
  mean and standard deviation; for the whole set, a 95% bootstrap interval over the questions
  (how much the figure depends on which questions were asked, and on the machine's noise in
  each: `bootstrap_interval`), and CAS-Spec (else the last method) against every other method
  as the ratio of their speedups, with a paired interval (`paired_comparisons`).

Methods are those of `casspec_ref.speculative.METHODS`, plus ``hf`` and ``hf-pld`` (Hugging Face
transformers' greedy and prompt-lookup ``generate`` on the same weights) when transformers is
installed. ``pld:K`` is prompt lookup proposing at most K tokens and ``chain:K`` a chain of K
tokens (the fixed schedules DyTC must beat at their best k). ``M+plain`` is method M with every
forward in the plain form (`PLAIN_SUFFIX`).

Sampling (``--temperature``, ``--top-k``, ``--top-p``, ``--seed``): every method draws from the same
law as the naive loop but from another stream of coins, so outputs are not compared token for
token (the exact-law tests prove the law); speed and MAT are reported as under greedy.

``--verify-curve`` first measures the target's forward over T = 1, 2, 3, 4, 6, 8, 12, 16 new
tokens after 256 cached ones (median of 5), the cost curve every speculative method lives on.
After the runs, DyTC's learned state (its cost curve, alpha and c per draft, how many of its
trees branched) is printed and kept in ``results.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import shlex
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any

from casspec_ref.tools.arguments import check_device, method_names, parse_size

MT_BENCH_CATEGORIES = frozenset(
    {"writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities"}
)
GROUP_ORDER = ("mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag")
EXTERNAL_METHODS = ("hf", "hf-pld")
#: The naive loop in the plain form (`Transformer.shape_invariant` off: the fused attention
#: kernel and the per-row-count products, whose rows round by shape): its tok/s and its
#: divergences from ``ar``, the shape-invariant naive loop every method is checked against
#: (docs/floating_point.md).
PLAIN_AR = "ar-plain"
#: The naive loops a method's speedup may be taken against (`speedup_base`).
NAIVE_LOOPS = ("ar", PLAIN_AR)
#: ``M+plain``: speculative method M with every forward in the plain form, the target's verify
#: forwards included (``cas-spec+plain``). Its outputs are compared with ``ar``'s and its
#: divergences counted apart, as the plain loop's are: what the exact forms cost and buy, for
#: the whole method, measured side by side.
PLAIN_SUFFIX = "+plain"


def plain_form(method: str) -> bool:
    """True for a method that runs the plain forms: ``ar-plain`` and every ``M+plain``."""
    return method == PLAIN_AR or method.endswith(PLAIN_SUFFIX)


#: Methods that take a fixed k (``pld:K``, ``chain:K``, ``pld-or-chain:K``: its chain's K).
SIZED_METHODS = ("pld", "chain", "pld-or-chain")
VERIFY_SIZES = (1, 2, 3, 4, 6, 8, 12, 16)


def parse_method(spec: str, known: Sequence[str]) -> tuple[str, int | None]:
    """``"pld:3"`` -> ("pld", 3); ``"cas-spec"`` -> ("cas-spec", None); ValueError if unknown.
    A ``+plain`` suffix (`PLAIN_SUFFIX`) names the same method: ``"pld:3+plain"`` -> ("pld", 3);
    it is allowed on the speculative methods only."""
    if spec.endswith(PLAIN_SUFFIX):
        name = spec.removesuffix(PLAIN_SUFFIX)
        if name in ("ar", PLAIN_AR, *EXTERNAL_METHODS):
            raise ValueError(
                f"method {spec!r}: {PLAIN_SUFFIX!r} runs a speculative method in the plain forms; "
                f"the plain naive loop is {PLAIN_AR!r}"
            )
        return parse_method(name, known)
    if spec in known:  # a method whose name holds a colon, such as ``cas-spec:paper``
        return spec, None
    base, sep, arg = spec.partition(":")
    allowed = f"{', '.join(known)}, or {'/'.join(SIZED_METHODS)}:K with K >= 1"
    if base not in known or (sep and (base not in SIZED_METHODS or not arg.isdigit())):
        raise ValueError(f"unknown method {spec!r}: allowed are {allowed}")
    k = int(arg) if sep else None
    if k is not None and k < 1:
        raise ValueError(f"method {spec!r}: K must be >= 1")
    return base, k


def measure_verify_curve(
    model: Any, sizes: Sequence[int] = VERIFY_SIZES, cached: int = 256, repeats: int = 5
) -> dict[int, float]:
    """Median seconds of one target forward over T new tokens after `cached` ones, per T."""
    import torch

    from casspec_ref.kv_cache import KVCache

    param = next(model.parameters())
    cached = min(cached, model.config.max_seq_len - max(sizes))
    cache = KVCache(model.config, cached + max(sizes), param.dtype, param.device)
    prefix = torch.arange(cached, device=param.device)[None] % model.config.vocab_size  # (1, P)
    with torch.no_grad():
        model.forward(prefix, cache=cache)
        times: dict[int, list[float]] = {t: [] for t in sizes}
        for _ in range(repeats):
            for t in sizes:  # interleaved, so that load drifts hit every size alike
                tokens = torch.arange(t, device=param.device)[None] + 7  # (1, T)
                _sync(str(param.device))
                start = time.perf_counter()
                model.forward(tokens, cache=cache)
                _sync(str(param.device))
                times[t].append(time.perf_counter() - start)
                cache.truncate(cached)
    return {t: statistics.median(v) for t, v in times.items()}


def dytc_report(policy: Any) -> dict[str, Any]:
    """What DyTC learned: its verify cost curve (ms), and alpha and c per estimate (each
    draft's own, then the refined ones, named by `Outcome.label`)."""
    return {
        "verify_ms": {t: 1000 * s for t, s in sorted(policy.verify_cost.seconds.items())},
        "drafts": {
            # c belongs to a draft's own estimate; a refined one (a lookup's continuation, a
            # margin bin) is drafted by the same forward or lookup and has none of its own
            key.label: {
                "alpha": est.alpha,
                "observations": est.count,
                "c": policy.cost(key.draft)
                if key.kind == "draft" and key.draft in policy.draft_cost
                else None,
            }
            for key, est in policy.estimates().items()
        },
        # the refinement `exploration`'s budget; the paper's policy has none
        "explore_budget_s": getattr(policy, "explore_budget", 0.0),
    }


def default_questions_path(name: str = "prompts") -> Path:
    """A bundled Spec-Bench prompt set: ``prompts`` (tuned on) or ``prompts_heldout``."""
    return Path(str(resources.files("casspec_ref") / "data" / f"{name}.jsonl"))


def group_of(category: str) -> str:
    """Spec-Bench's grouping: the eight MT-Bench categories form one group."""
    return "mt_bench" if category in MT_BENCH_CATEGORIES else category


@dataclass(frozen=True)
class Question:
    question_id: Any
    category: str
    turns: tuple[str, ...]

    @property
    def group(self) -> str:
        return group_of(self.category)


def load_questions(path: str | Path) -> list[Question]:
    """Read a Spec-Bench ``question.jsonl``; a clear error names the bad line."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"question file {path} does not exist")
    questions = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            turns = record["turns"]
            if isinstance(turns, str):
                turns = [turns]
            if not turns or not all(isinstance(t, str) and t.strip() for t in turns):
                raise ValueError("'turns' must be a non-empty list of non-empty strings")
            questions.append(Question(record["question_id"], str(record["category"]), tuple(turns)))
        except (json.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
            raise ValueError(
                f"{path}:{number}: not a Spec-Bench question (needs 'question_id', 'category' and "
                f"'turns'): {exc}"
            ) from exc
    if not questions:
        raise ValueError(f"{path} holds no questions")
    return questions


@dataclass
class TurnRecord:
    tokens: list[int]
    wall_s: float
    stats: dict[str, Any]


@dataclass
class QuestionRecord:
    """One method's answer to one question in one run."""

    question: Question
    turns: list[TurnRecord] = field(default_factory=list)
    peak_memory_bytes: int = 0

    @property
    def new_tokens(self) -> int:
        return sum(len(t.tokens) for t in self.turns)

    @property
    def wall_s(self) -> float:
        return sum(t.wall_s for t in self.turns)

    @property
    def decode_tokens_per_s(self) -> float | None:
        """Tokens after each turn's first over the time after it (the prompt's forward left
        out); None when a turn has no ``decode_s`` (transformers' methods) or none was spent."""
        if any(t.stats.get("decode_s") is None for t in self.turns):
            return None
        seconds = sum(t.stats["decode_s"] for t in self.turns)
        tokens = sum(max(0, len(t.tokens) - 1) for t in self.turns)
        return tokens / seconds if seconds > 0 else None


# ----------------------------------------------------------------------------------------------
# Memory and timing helpers
# ----------------------------------------------------------------------------------------------


def _reset_peak_rss() -> None:
    # Linux: writing 5 to clear_refs resets the peak resident set size (VmHWM) of this process.
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _peak_rss_bytes() -> int:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024


class _Progress:
    """A dependency-free progress bar on stderr."""

    def __init__(self, total: int, label: str, enabled: bool = True) -> None:
        self.total, self.label, self.done = total, label, 0
        self.enabled = enabled and total > 0
        self.start = time.perf_counter()

    def step(self, note: str = "") -> None:
        self.done += 1
        if not self.enabled:
            return
        width = 30
        filled = int(width * self.done / self.total)
        elapsed = time.perf_counter() - self.start
        bar = "#" * filled + "-" * (width - filled)
        sys.stderr.write(
            f"\r{self.label} [{bar}] {self.done}/{self.total} {elapsed:6.1f}s {note[:30]:<30}"
        )
        if self.done == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


# ----------------------------------------------------------------------------------------------
# Running methods
# ----------------------------------------------------------------------------------------------

Runner = Callable[[list[int], int], tuple[list[int], dict[str, Any]]]


def turn_stats(result: Any) -> dict[str, Any]:
    """A turn's statistics as the harness records them: the generation's ``stats`` and the
    seconds of its decoding (``timing["decode_s"]``, the prompt's forward left out)."""
    return {**result.stats, "decode_s": result.timing["decode_s"]}


def _make_runner(
    method: str, model: Any, stop_ids: Sequence[int], sampling: dict[str, Any] | None = None
) -> Runner:
    """A function answering one prompt with `method` (``name`` or ``name:K``)."""
    from casspec_ref.generate import generate_ar

    sampling = dict(sampling or {})
    seed = sampling.pop("seed", None)
    calls = [0]

    def coins() -> dict[str, Any]:
        # Sampling: a fresh seeded stream per call (the same for every method's n-th call).
        calls[0] += 1
        return {"seed": None if seed is None else seed + calls[0]} if sampling else {}

    if method in ("ar", PLAIN_AR):

        def run_ar(prompt_ids: list[int], max_new: int) -> tuple[list[int], dict[str, Any]]:
            result = generate_ar(
                model, prompt_ids, max_new, stop_ids=stop_ids, **sampling, **coins()
            )
            return list(result.tokens), turn_stats(result)

        return in_forms(run_ar, model, exact=not plain_form(method))
    if method in EXTERNAL_METHODS:
        return make_hf_runner(method, model, stop_ids)

    from casspec_ref.baselines import ScheduleOptions
    from casspec_ref.dsia.prompt_lookup import PromptLookupConfig
    from casspec_ref.dytc import DyTC
    from casspec_ref.dytc_refinements import RefinedDyTC
    from casspec_ref.speculative import METHODS, default_drafts, generate_speculative

    base, k = parse_method(method, METHODS)
    options: dict[str, Any] = {}
    if base == "pld" and k is not None:
        options["pld"] = PromptLookupConfig(max_proposal=k)
    if base in ("chain", "pld-or-chain") and k is not None:
        options["schedule"] = ScheduleOptions(chain_k=k)
    if base in ("cas-spec", "cas-spec:paper"):
        # DyTC's online estimates (acceptance, costs) persist across questions, as they would
        # in a server: each call would otherwise spend its first steps re-learning the costs.
        levels = [plan.name for plan in default_drafts(model)]
        options["policy"] = DyTC(levels) if base == "cas-spec:paper" else RefinedDyTC(levels)

    def run_spec(prompt_ids: list[int], max_new: int) -> tuple[list[int], dict[str, Any]]:
        result = generate_speculative(
            model,
            prompt_ids,
            max_new,
            method=base,
            stop_ids=stop_ids,
            **sampling,
            **coins(),
            **options,
        )
        return list(result.tokens), turn_stats(result)

    runner = in_forms(run_spec, model, exact=not plain_form(method))
    runner.policy = options.get("policy")  # type: ignore[attr-defined]
    return runner


def in_forms(runner: Runner, model: Any, exact: bool) -> Runner:
    """`runner` with the model's forwards in the exact forms (`Transformer.shape_invariant`) or
    the plain ones while it runs; the model's setting is restored after each call."""

    def run_in_forms(prompt_ids: list[int], max_new: int) -> tuple[list[int], dict[str, Any]]:
        previous, model.shape_invariant = model.shape_invariant, exact
        try:
            return runner(prompt_ids, max_new)
        finally:
            model.shape_invariant = previous

    return run_in_forms


def make_hf_runner(method: str, model: Any, stop_ids: Sequence[int]) -> Runner:
    """Hugging Face transformers' own greedy / prompt-lookup generate on our weights."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = model.config
    if cfg.family != "llama":
        raise ValueError("the hf methods are wired for the Llama family only")
    # A dict, so that both transformers 4 (rope_theta) and 5 (which folds it into
    # rope_parameters) accept it.
    hf_kwargs: dict[str, Any] = dict(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.d_model,
        intermediate_size=cfg.d_ff,
        num_hidden_layers=cfg.n_layers,
        num_attention_heads=cfg.n_heads,
        num_key_value_heads=cfg.n_kv_heads,
        max_position_embeddings=cfg.max_seq_len,
        rms_norm_eps=cfg.norm_eps,
        rope_theta=cfg.rope_theta,
        tie_word_embeddings=cfg.tie_embeddings,
        attention_bias=cfg.attention_bias,
    )
    hf_config = LlamaConfig(**hf_kwargs)
    dtype = next(model.parameters()).dtype
    device = next(model.parameters()).device
    hf: Any = LlamaForCausalLM(hf_config)
    hf = hf.to(dtype=dtype, device=device).eval()
    from casspec_ref.io.weights import to_hf_llama_state_dict

    hf.load_state_dict(to_hf_llama_state_dict(model.state_dict()), strict=False)
    extra: dict[str, Any] = {"prompt_lookup_num_tokens": 10} if method == "hf-pld" else {}
    eos = list(stop_ids) or None

    def run_hf(prompt_ids: list[int], max_new: int) -> tuple[list[int], dict[str, Any]]:
        ids = torch.tensor([prompt_ids], device=device)
        with torch.inference_mode():
            out = hf.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=max_new,
                do_sample=False,
                eos_token_id=eos,
                pad_token_id=eos[0] if eos else 0,
                **extra,
            )
        return out[0, len(prompt_ids) :].tolist(), {}

    return run_hf


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def run_question(
    runner: Runner,
    tokenizer: Any,
    question: Question,
    max_new_tokens: int,
    device: str,
    reference: QuestionRecord | None = None,
) -> QuestionRecord:
    """Answer every turn of `question`; later turns see the earlier answers (Spec-Bench).

    With a `reference` (the naive loop's record), later turns are conditioned on the naive loop's
    answers, so that a divergence in one turn does not cascade into the next.
    """
    import torch

    record = QuestionRecord(question)
    messages: list[dict[str, str]] = []
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    else:
        _reset_peak_rss()
    for index, turn in enumerate(question.turns):
        messages.append({"role": "user", "content": turn})
        prompt_ids = tokenizer.apply_chat_template(messages)
        _sync(device)
        start = time.perf_counter()
        tokens, stats = runner(prompt_ids, max_new_tokens)
        _sync(device)
        record.turns.append(TurnRecord(tokens, time.perf_counter() - start, stats))
        answer_ids = reference.turns[index].tokens if reference is not None else tokens
        answer = tokenizer.decode([t for t in answer_ids if t not in tokenizer.stop_ids])
        messages.append({"role": "assistant", "content": answer})
    if device.startswith("cuda"):
        record.peak_memory_bytes = int(torch.cuda.max_memory_allocated())
    else:
        record.peak_memory_bytes = _peak_rss_bytes()
    return record


def first_divergence(reference: Sequence[int], candidate: Sequence[int]) -> int | None:
    """Index of the first differing token (or of the length mismatch), None when equal."""
    for i, (a, b) in enumerate(zip(reference, candidate, strict=False)):
        if a != b:
            return i
    if len(reference) != len(candidate):
        return min(len(reference), len(candidate))
    return None


# ----------------------------------------------------------------------------------------------
# Aggregation
# ----------------------------------------------------------------------------------------------


def _stat_sum(records: Sequence[QuestionRecord], key: str) -> float:
    return float(sum(t.stats.get(key, 0) or 0 for r in records for t in r.turns))


def _level_counts(records: Sequence[QuestionRecord]) -> dict[str, dict[str, float]]:
    """Per draft level, proposed and accepted token counts summed over all turns."""
    levels: dict[str, dict[str, float]] = defaultdict(lambda: {"proposed": 0.0, "accepted": 0.0})
    for r in records:
        for t in r.turns:
            for key in ("proposed", "accepted"):
                for name, count in (t.stats.get(key) or {}).items():
                    levels[name][key] += float(count)
    return {
        name: {**c, "acceptance": c["accepted"] / c["proposed"] if c["proposed"] else 0.0}
        for name, c in levels.items()
    }


#: Resamples and level of the bootstrap intervals the harness reports.
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_LEVEL = 0.95


def bootstrap_interval(
    statistic: Callable[[Sequence[int]], float],
    n: int,
    resamples: int = BOOTSTRAP_RESAMPLES,
    level: float = BOOTSTRAP_LEVEL,
    seed: int = 0,
) -> tuple[float, float]:
    """The percentile bootstrap interval of ``statistic``, a function of the indices of the
    questions it is computed over, when the ``n`` questions are drawn again with replacement
    (seeded: the same records give the same interval). It says how much a figure depends on
    which questions were asked and on the machine's noise in each; not on a shift of the whole
    machine between runs, which only more runs show."""
    if n < 1 or resamples < 1 or not 0 < level < 1:
        raise ValueError(
            f"bootstrap needs n >= 1, resamples >= 1, 0 < level < 1; got {n}, {resamples}, {level}"
        )
    rng = random.Random(seed)
    values = sorted(statistic([rng.randrange(n) for _ in range(n)]) for _ in range(resamples))
    tail = int((1 - level) / 2 * resamples)
    return values[tail], values[resamples - 1 - tail]


def mean_tokens_per_s(records: Sequence[QuestionRecord]) -> float:
    """The mean over questions of tokens per second: Spec-Bench's speedup is its ratio."""
    return statistics.fmean(r.new_tokens / r.wall_s for r in records)


def decode_speedup(mine: Sequence[QuestionRecord], base: Sequence[QuestionRecord]) -> float | None:
    """The speedup over the decoding alone (each turn's prompt forward and first token left
    out, for both methods): the mean over questions of decode tokens/s, as a ratio."""
    a, b = [r.decode_tokens_per_s for r in mine], [r.decode_tokens_per_s for r in base]
    if not a or not b or None in a or None in b:
        return None
    base_mean = statistics.fmean(x for x in b if x is not None)
    return statistics.fmean(x for x in a if x is not None) / base_mean if base_mean else None


def speedup_over(
    runs: Sequence[dict[str, list[QuestionRecord]]], method: str, base: str, idx: Sequence[int]
) -> float:
    """Spec-Bench's speedup of ``method`` over ``base`` on the questions ``idx`` (indices into
    each run's records, repeats allowed), averaged over the runs."""
    return statistics.fmean(
        mean_tokens_per_s([run[method][i] for i in idx])
        / mean_tokens_per_s([run[base][i] for i in idx])
        for run in runs
    )


def paired_comparisons(
    runs: Sequence[dict[str, list[QuestionRecord]]], methods: Sequence[str], target: str
) -> dict[str, dict[str, Any]]:
    """``target`` against every other method but the naive loop: the ratio of their speedups
    over the whole set, and its bootstrap interval with the same questions drawn for both
    (paired: a question that is easy for every method moves both alike)."""
    n = len(runs[0][target])
    every = range(n)
    return {
        other: {
            "ratio": speedup_over(runs, target, other, every),
            "interval": bootstrap_interval(partial(speedup_over, runs, target, other), n),
        }
        for other in methods
        if other not in ("ar", target)
    }


def output_differences(
    runs: Sequence[dict[str, list[QuestionRecord]]], method: str, base: str = "ar"
) -> list[dict[str, Any]]:
    """Every generation (a question's turn in a run) whose tokens under ``method`` differ from
    ``base``'s, with the first differing token; empty when the outputs are equal."""
    found = []
    for run in runs:
        for theirs, mine in zip(run[base], run[method], strict=True):
            for turn, (a, b) in enumerate(zip(theirs.turns, mine.turns, strict=True)):
                at = first_divergence(a.tokens, b.tokens)
                if at is not None:
                    question_id = theirs.question.question_id
                    found.append(
                        {"method": method, "question_id": question_id, "turn": turn, "position": at}
                    )
    return found


def compare_outputs(
    runs: Sequence[dict[str, list[QuestionRecord]]], methods: Sequence[str], sampled: bool
) -> tuple[dict[str, bool | None], list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """Each method's outputs against the naive loop's: whether they are equal, the divergences
    of every method in the exact forms, and, per method in the plain forms (`plain_form`), a
    report of how many generations differ from ``ar``'s and where: a lesson in rounding and no
    failure. Sampled runs draw another stream of coins: nothing is compared (None, no
    divergences, no reports)."""
    if sampled:
        return {m: None for m in methods}, [], {}
    exact = [m for m in methods if not plain_form(m)]
    divergences = [d for m in exact if m != "ar" for d in output_differences(runs, m)]
    equal: dict[str, bool | None] = {
        m: not any(d["method"] == m for d in divergences) for m in exact
    }
    generations = sum(len(r.turns) for run in runs for r in run["ar"])
    plain: dict[str, dict[str, Any]] = {}
    for method in [m for m in methods if plain_form(m)]:
        differing = output_differences(runs, method)
        equal[method] = not differing
        plain[method] = {
            "generations": generations,
            "differing": len(differing),
            "divergences": differing,
        }
    return {m: equal[m] for m in methods}, divergences, plain


def unequal_methods(equal: dict[str, bool | None]) -> list[str]:
    """The methods whose greedy outputs differ from the naive loop's: the run's verdict. The
    methods in the plain forms are not among them (their divergences are reported apart, by
    `plain_line`)."""
    return [m for m, value in equal.items() if value is False and not plain_form(m)]


def plain_line(method: str, report: dict[str, Any], shown: int = 10) -> str:
    """A method in the plain forms: its divergences from ``ar`` in one sentence."""
    counts = f"{report['differing']} of {report['generations']}"
    line = f"{method} differs from ar in {counts} generations"
    positions = [str(d["position"]) for d in report["divergences"][:shown]]
    if positions:
        more = ", ..." if len(report["divergences"]) > shown else ""
        line += f", first differences at tokens {', '.join(positions)}{more}"
    return line


def speedup_base(
    runs: Sequence[dict[str, list[QuestionRecord]]], method: str, sampled: bool
) -> str:
    """The naive loop ``method``'s speedups are taken against: of the naive loops in the run
    (``ar``, and ``ar-plain`` when it ran) whose tokens equal ``method``'s on every question and
    turn, the one with the higher mean tok/s (the mean over questions, averaged over the runs).
    ``ar`` when none is equal, under sampling (outputs are not compared), and for the naive
    loops themselves (``ar-plain``'s speedup is then the plain form's speed ratio)."""
    if sampled or method in NAIVE_LOOPS:
        return "ar"
    candidates = [
        base
        for base in NAIVE_LOOPS
        if base in runs[0] and not output_differences(runs, method, base)
    ]
    if not candidates:
        return "ar"
    return max(candidates, key=lambda b: statistics.fmean(mean_tokens_per_s(r[b]) for r in runs))


def summarize(
    runs: list[dict[str, list[QuestionRecord]]],
    methods: Sequence[str],
    equal: dict[str, bool | None],
    bases: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One record per method and group (``overall`` for the whole set), Spec-Bench's metrics,
    each against the method's base (`speedup_base`; ``ar`` where ``bases`` names none)."""
    groups = sorted(
        {r.question.group for r in runs[0]["ar"]},
        key=lambda g: (GROUP_ORDER.index(g) if g in GROUP_ORDER else len(GROUP_ORDER), g),
    )
    bases = bases or {}
    return [
        {
            "method": method,
            "group": group,
            "base": bases.get(method, "ar"),
            **_speedups(runs, method, bases.get(method, "ar"), group),
            **_figures(runs, method, group),
            "equal_to_ar": equal[method],
        }
        for method in methods
        for group in [*groups, "overall"]
    ]


def _in_group(records: Sequence[QuestionRecord], group: str) -> list[QuestionRecord]:
    return [r for r in records if group in ("overall", r.question.group)]


def _speedups(
    runs: Sequence[dict[str, list[QuestionRecord]]], method: str, base: str, group: str
) -> dict[str, Any]:
    """A method's speedups over ``base`` in one group: Spec-Bench's, total and decode, with the
    spread over runs and, for the whole set, the bootstrap interval."""
    speedups, totals, decodes = [], [], []
    for run in runs:
        mine, theirs = _in_group(run[method], group), _in_group(run[base], group)
        speedups.append(mean_tokens_per_s(mine) / mean_tokens_per_s(theirs))
        totals.append(
            (sum(r.new_tokens for r in mine) / sum(r.wall_s for r in mine))
            / (sum(r.new_tokens for r in theirs) / sum(r.wall_s for r in theirs))
        )
        decodes.append(decode_speedup(mine, theirs))
    return {
        "speedup": statistics.fmean(speedups),
        "speedup_std": statistics.stdev(speedups) if len(speedups) > 1 else 0.0,
        # Groups hold 2-3 questions: an interval over them would say little.
        "speedup_interval": (
            bootstrap_interval(partial(speedup_over, runs, method, base), len(runs[0][method]))
            if group == "overall"
            else None
        ),
        "speedup_total": statistics.fmean(totals),
        "speedup_decode": (
            None if None in decodes else statistics.fmean(d for d in decodes if d is not None)
        ),
    }


def _figures(
    runs: Sequence[dict[str, list[QuestionRecord]]], method: str, group: str
) -> dict[str, Any]:
    """A method's own figures in one group: MAT, tok/s, levels, steps, time split, memory."""
    tps_list, mats = [], []
    for run in runs:
        mine = _in_group(run[method], group)
        tps_list.append(mean_tokens_per_s(mine))
        steps = _stat_sum(mine, "steps")
        mats.append(sum(r.new_tokens for r in mine) / steps if steps else float("nan"))
    all_records = [r for run in runs for r in _in_group(run[method], group)]
    ar_peak = max(r.peak_memory_bytes for run in runs for r in _in_group(run["ar"], group))
    peak = max(r.peak_memory_bytes for r in all_records)
    return {
        "mat": statistics.fmean(mats) if method not in NAIVE_LOOPS else 1.0,
        "tokens_per_s": statistics.fmean(tps_list),
        "tokens_per_s_std": statistics.stdev(tps_list) if len(tps_list) > 1 else 0.0,
        "levels": _level_counts(all_records),
        "steps": _stat_sum(all_records, "steps"),
        "branching_steps": _stat_sum(all_records, "branching_steps"),
        "time_split_s": {
            key: _stat_sum(all_records, key)
            for key in ("time_draft_s", "time_plan_s", "time_verify_s", "time_other_s")
        },
        "peak_memory_bytes": peak,
        "peak_memory_vs_ar": peak / max(1, ar_peak),
    }


def base_label(row: dict[str, Any]) -> str:
    """What a row's speedup is taken against, as the tables print it: the base's name, with
    "(sampled)" where outputs are not compared and "(not equal)" where the method equals no
    naive loop. Records written before the rule hold no base: theirs is ``ar``."""
    base = row.get("base", "ar")
    if row["method"] in NAIVE_LOOPS:
        return base
    if row.get("equal_to_ar") is None:
        return f"{base} (sampled)"
    if row.get("equal_to_ar") is False and base == "ar":
        return f"{base} (not equal)"
    return base


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """A readable table: one line per method and group."""
    header = (
        f"{'method':<12} {'group':<15} {'base':<14} {'speedup':>14} {'95% interval':>16} "
        f"{'total':>7} {'decode':>7} {'MAT':>6} {'tok/s':>7} equal"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        low_high = row.get("speedup_interval")
        interval = f"[{low_high[0]:.3f}, {low_high[1]:.3f}]" if low_high else ""
        decode = row.get("speedup_decode")
        lines.append(
            f"{row['method']:<12} {row['group']:<15} {base_label(row):<14} "
            f"{row['speedup']:>7.3f}±{row['speedup_std']:<6.3f} {interval:>16} "
            f"{row['speedup_total']:>7.3f} {'' if decode is None else f'{decode:.3f}':>7} "
            f"{row['mat']:>6.2f} {row['tokens_per_s']:>7.1f} "
            f"{ {True: 'yes', False: 'NO', None: 'n/a'}[row['equal_to_ar']] }"
        )
    return "\n".join(lines)


def format_paired(target: str, paired: dict[str, dict[str, Any]], n: int) -> str:
    """One line per method: ``target``'s speedup over that method's, with its interval."""
    lines = [
        f"{target} over each method (ratio of speedups; paired 95% bootstrap interval over "
        f"the {n} questions):"
    ]
    for other, p in paired.items():
        low, high = p["interval"]
        lines.append(f"  {other:<14} {p['ratio']:.3f} [{low:.3f}, {high:.3f}]")
    return "\n".join(lines)


#: Vector extensions, widest first, as /proc/cpuinfo's flags (x86) or Features (Arm) name them.
VECTOR_EXTENSIONS = (
    ("avx512f", "AVX-512"),
    ("avx2", "AVX2"),
    ("avx", "AVX"),
    ("sse4_2", "SSE4.2"),
    ("sve2", "SVE2"),
    ("sve", "SVE"),
    ("asimd", "NEON"),
)


def vector_extension(flags: set[str]) -> str:
    """The widest vector extension among a CPU's flags, with AVX-512's 16-bit float
    instructions when present ("AVX-512 (bf16, fp16)"); "" when none is known."""
    name = next((label for flag, label in VECTOR_EXTENSIONS if flag in flags), "")
    if name == "AVX-512":
        extras = [kind for kind in ("bf16", "fp16") if f"avx512_{kind}" in flags]
        name += f" ({', '.join(extras)})" if extras else ""
    return name


def machine_name(device: str, cpuinfo: str | None = None) -> str:
    """The processor (its model name, core count and widest vector extension: two CPUs of the
    same name may round and run differently) or the GPU a run measured. ``cpuinfo`` is the text
    of /proc/cpuinfo (read when None; absent on macOS and Windows, where platform's name
    stands)."""
    import os

    import torch

    if device.startswith("cuda"):
        return f"{torch.cuda.get_device_name()}, {os.cpu_count()} host cores"
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields.setdefault(key.strip(), value.strip())  # the first processor's
    model = fields.get("model name") or platform.processor() or platform.machine()
    vector = vector_extension(set((fields.get("flags") or fields.get("Features") or "").split()))
    return f"{model}, {os.cpu_count()} cores" + (f", {vector}" if vector else "")


def command_line(
    argv: Sequence[str], program: Sequence[str] = ("-m", "casspec_ref", "bench")
) -> str:
    """The command that reproduces a run of ``python PROGRAM ARGV`` (default: the bench; a
    benchmark script: its path), with the thread count it ran under."""
    import os

    threads = os.environ.get("OMP_NUM_THREADS")
    prefix = f"OMP_NUM_THREADS={threads} " if threads else ""
    return prefix + shlex.join(["python", *program, *argv])


def git_commit() -> str:
    """The checked-out commit a run measures, marked ``+modified`` where tracked files of the
    package or the benchmarks differ from it (no commit then holds the code that ran); "" outside
    a git checkout."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], capture_output=True, text=True, timeout=5)
        return done.stdout.strip()

    try:
        head = git("rev-parse", "HEAD")
        changed = git(
            "status", "--porcelain", "--untracked-files=no", "--", "casspec_ref", "benchmarks"
        )
    except (OSError, subprocess.SubprocessError):
        return ""
    return head + ("+modified" if head and changed else "")


def environment(device: str, dtype: str, command: str = "") -> dict[str, Any]:
    """What a reader needs to reproduce the figures: the command, machine, software, commit."""
    import torch

    from casspec_ref.accel import invariance, kernel_table, threads

    commit = git_commit()
    name = torch.cuda.get_device_name() if device.startswith("cuda") else platform.processor()
    return {
        "command": command,
        "machine": machine_name(device),
        "device": device,
        "device_name": name or platform.machine(),
        "dtype": dtype,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "thread_policy": threads.apply().as_dict(),
        "shape_invariance": invariance.reports(),
        "dispatch": kernel_table.dispatch_levels(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "git_commit": commit,
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def write_plots(rows: Sequence[dict[str, Any]], out: Path) -> list[Path]:
    """Speedup and MAT per group and method, as PNG files (skipped without matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    written = []
    methods = list(dict.fromkeys(r["method"] for r in rows))
    groups = list(dict.fromkeys(r["group"] for r in rows))
    for key, label, fname in (
        ("speedup", "speedup over the naive loop", "speedup.png"),
        ("mat", "MAT (bonus token included)", "mat.png"),
    ):
        fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(groups) * len(methods) / 3), 4))
        width = 0.8 / len(methods)
        for i, method in enumerate(methods):
            values = [
                next(r[key] for r in rows if r["method"] == method and r["group"] == g)
                for g in groups
            ]
            ax.bar([j + i * width for j in range(len(groups))], values, width, label=method)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(groups))], groups, rotation=20)
        ax.set_ylabel(label)
        if key == "speedup":
            ax.axhline(1.0, color="black", linewidth=0.8)
        ax.legend(fontsize=7, ncol=3)
        fig.tight_layout()
        path = out / fname
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written


# ----------------------------------------------------------------------------------------------
# Entry point
# ----------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m casspec_ref bench",
        description="Spec-Bench-style speed harness: every method against the naive loop.",
    )
    parser.add_argument(
        "--questions",
        default=None,
        help="a Spec-Bench question.jsonl, or 'heldout' (default: the bundled prompt set)",
    )
    parser.add_argument(
        "--methods",
        default=None,
        help="comma-separated methods (default: all of them); 'ar' is always run",
    )
    parser.add_argument(
        "--max-new-tokens", type=int, default=128, help="tokens to generate per question"
    )
    parser.add_argument(
        "--runs",
        type=int,
        default=3,
        help="timed runs of every question (the speedup: their mean, and its standard deviation)",
    )
    parser.add_argument("--warmup", type=int, default=1, help="warm-up questions per method")
    parser.add_argument("--device", default="cpu", help="cpu or cuda")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--model", default=None, help="GGUF file or HF directory (default SmolLM2)")
    parser.add_argument(
        "--out",
        default="bench_out",
        help="output folder (JSON, PNG); created first, results.jsonl grows question by question",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run recorded in --out/results.jsonl (same settings), skipping the "
        "questions it already holds",
    )
    parser.add_argument(
        "--memory-budget",
        default=None,
        help="bytes the model may use, e.g. 8G (default: physical memory)",
    )
    parser.add_argument(
        "--max-context", type=int, default=None, help="cap the model context (max_seq_len)"
    )
    parser.add_argument(
        "--limit", type=int, default=0, help="use only the first N questions (0: all)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="1 run, 32 new tokens, one question per group"
    )
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    parser.add_argument("--top-k", type=int, default=0)
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0, help="first seed of the sampling streams")
    parser.add_argument(
        "--verify-curve",
        action="store_true",
        help="first measure the target's forward cost per tree size (T = 1..16 after 256)",
    )
    parser.add_argument(
        "--record",
        default=None,
        help="also write the summary to this JSON file, a record that `make results` reads "
        "(for example docs/bench/cpu_heldout_greedy.json)",
    )
    parser.add_argument("--no-progress", action="store_true")
    return parser


def _error(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return 2


RESULTS_FILE = "results.jsonl"


def _record_line(run_index: int, method: str, record: QuestionRecord) -> dict[str, Any]:
    return {
        "run": run_index,
        "method": method,
        "question_id": record.question.question_id,
        "category": record.question.category,
        "turns": [{"tokens": t.tokens, "wall_s": t.wall_s, "stats": t.stats} for t in record.turns],
        "peak_memory_bytes": record.peak_memory_bytes,
    }


def _load_results(
    path: Path, settings: dict[str, Any], questions: Sequence[Question], methods: Sequence[str]
) -> dict[tuple[int, Any], dict[str, QuestionRecord]]:
    """The complete questions (every method recorded) of an earlier run, for ``--resume``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    if not lines:
        return {}
    try:
        head = json.loads(lines[0])
    except json.JSONDecodeError:
        raise ValueError(f"{path}:1: not a results file written by this harness") from None
    if head.get("settings") != settings:
        raise ValueError(
            f"{path} was written with other settings ({head.get('settings')}); --resume needs "
            f"the same ones ({settings}), or choose another --out"
        )
    by_id = {q.question_id: q for q in questions}
    found: dict[tuple[int, Any], dict[str, QuestionRecord]] = defaultdict(dict)
    for number, line in enumerate(lines[1:], start=2):
        try:
            row = json.loads(line)
            question = by_id[row["question_id"]]
            record = QuestionRecord(question, peak_memory_bytes=int(row["peak_memory_bytes"]))
            for turn in row["turns"]:
                record.turns.append(
                    TurnRecord(list(turn["tokens"]), float(turn["wall_s"]), dict(turn["stats"]))
                )
            found[(int(row["run"]), question.question_id)][str(row["method"])] = record
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            # A line cut by an interruption, or a question no longer in the set: that
            # question is simply run again.
            print(f"note: {path}:{number} is incomplete; its question runs again", file=sys.stderr)
    return {key: recs for key, recs in found.items() if set(methods) <= set(recs)}


def main(argv: Sequence[str] | None = None, *, model: Any = None, tokenizer: Any = None) -> int:
    """Run the harness; `model` and `tokenizer` may be given directly (the tests do).

    Inputs are checked before anything runs (exit status 2 with a message): the options, the
    question file, the output folder (created first, so an unwritable path fails at once), the
    model, and every question's first turn (tokenizable, and short enough for the context).
    Each answer is appended to ``--out/results.jsonl`` as soon as it is measured, so an
    interrupted run keeps what it measured and ``--resume`` continues it.
    """
    import torch

    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parser().parse_args(argv)
    own_methods = list(method_names())
    available = own_methods + list(EXTERNAL_METHODS) + [PLAIN_AR]
    methods = args.methods.split(",") if args.methods else own_methods
    methods = [m.strip() for m in methods if m.strip()]
    for method in methods:
        try:
            parse_method(method, available)
        except ValueError as exc:
            return _error(str(exc))
    from casspec_ref.base.input_checks import validate_sampling

    try:
        validate_sampling(args.temperature, args.top_k, args.top_p)
    except ValueError as exc:
        return _error(str(exc))
    sampling = (
        {
            "temperature": args.temperature,
            "top_k": args.top_k,
            "top_p": args.top_p,
            "seed": args.seed,
        }
        if args.temperature > 0
        else {}
    )
    if any(m in EXTERNAL_METHODS for m in methods):
        try:
            import transformers  # noqa: F401
        except ImportError:
            print("note: transformers is not installed; skipping hf methods", file=sys.stderr)
            methods = [m for m in methods if m not in EXTERNAL_METHODS]
    if "ar" not in methods:
        methods.insert(0, "ar")
    for flag, value, low in (
        ("--runs", args.runs, 1),
        ("--max-new-tokens", args.max_new_tokens, 1),
        ("--warmup", args.warmup, 0),
        ("--limit", args.limit, 0),
    ):
        if value < low:
            return _error(f"{flag}={value}: must be >= {low}")
    if args.max_context is not None and args.max_context < 1:
        return _error(f"--max-context={args.max_context}: must be >= 1")
    try:
        memory_budget = parse_size(args.memory_budget, "--memory-budget")
    except ValueError as exc:
        return _error(str(exc))
    device_problem = check_device(args.device)
    if device_problem:
        return _error(device_problem)
    if args.quick:
        args.runs, args.max_new_tokens = 1, min(args.max_new_tokens, 32)

    try:
        if args.questions == "heldout":
            args.questions = str(default_questions_path("prompts_heldout"))
        questions = load_questions(args.questions or default_questions_path())
    except (FileNotFoundError, ValueError, UnicodeDecodeError) as exc:
        return _error(str(exc))
    if args.quick:
        seen: set[str] = set()
        questions = [q for q in questions if not (q.group in seen or seen.add(q.group))]  # type: ignore[func-returns-value]
    if args.limit:
        questions = questions[: args.limit]
    ids = [q.question_id for q in questions]
    if len(set(map(repr, ids))) != len(ids):
        return _error("question_id values must be unique within the question file")

    settings = {
        "questions": str(args.questions or default_questions_path()),
        "n_questions": len(questions),
        "methods": methods,
        "max_new_tokens": args.max_new_tokens,
        "runs": args.runs,
        "model": str(args.model) if args.model else None,
        "dtype": args.dtype,
        "device": args.device,
        "temperature": args.temperature,
        "top_k": args.top_k,
        "top_p": args.top_p,
    }
    # The output folder comes first: a path that cannot be written fails now, not after hours.
    out = Path(args.out)
    results_path = out / RESULTS_FILE
    try:
        out.mkdir(parents=True, exist_ok=True)
        resumed = {}
        if args.resume and results_path.is_file():
            resumed = _load_results(results_path, settings, questions, methods)
        with results_path.open("w", encoding="utf-8") as handle:
            handle.write(json.dumps({"settings": settings}) + "\n")
            for (run_index, _), recs in sorted(resumed.items(), key=lambda kv: repr(kv[0])):
                for method in methods:
                    line = _record_line(run_index, method, recs[method])
                    handle.write(json.dumps(line, default=float) + "\n")
    except OSError as exc:
        return _error(f"--out {out}: cannot write there ({exc.strerror or exc})")
    except ValueError as exc:
        return _error(str(exc))
    if args.record and not Path(args.record).parent.is_dir():
        return _error(f"--record {args.record}: its folder does not exist")

    from casspec_ref.accel import threads

    load_start = threads.machine_load()  # before loading: the other processes only
    if model is None:
        from casspec_ref.io.weights import load_model

        dtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
        try:
            model, tokenizer = load_model(
                args.model,
                dtype=dtype[args.dtype],
                device=args.device,
                memory_budget=memory_budget,
                max_context=args.max_context,
            )
        except (FileNotFoundError, ValueError) as exc:
            return _error(str(exc))
    if tokenizer is None:
        return _error(f"no tokenizer could be built for {args.model}: the harness needs text")
    context = model.config.max_seq_len
    for question in questions:
        try:
            first = tokenizer.apply_chat_template([{"role": "user", "content": question.turns[0]}])
        except ValueError as exc:
            return _error(f"question {question.question_id}: cannot be tokenized: {exc}")
        if len(first) + args.max_new_tokens > context:
            return _error(
                f"question {question.question_id}: its first turn is {len(first)} tokens; with "
                f"--max-new-tokens {args.max_new_tokens} that exceeds the model context "
                f"{context} (shorten it or lower --max-new-tokens)"
            )
    runners = {m: _make_runner(m, model, tokenizer.stop_ids, sampling) for m in methods}
    show = not args.no_progress
    verify_curve: dict[int, float] = {}
    if args.verify_curve:
        verify_curve = measure_verify_curve(model)
        one = verify_curve[1]
        print("target forward after 256 cached tokens (median of 5):", file=sys.stderr)
        for t, sec in verify_curve.items():
            print(f"  T={t:2d}: {1000 * sec:6.1f} ms ({sec / one:.2f}x T=1)", file=sys.stderr)

    # Warm-up: every method on the first questions, untimed.
    warm = _Progress(len(methods) * args.warmup, "warm-up", show)
    try:
        for method in methods:
            for question in questions[: args.warmup]:
                run_question(
                    runners[method], tokenizer, question, min(16, args.max_new_tokens), args.device
                )
                warm.step(method)
    except ValueError as exc:
        return _error(f"warm-up: {exc}")

    runs: list[dict[str, list[QuestionRecord]]] = []
    with results_path.open("a", encoding="utf-8") as results:
        for run_index in range(args.runs):
            progress = _Progress(
                len(questions) * len(methods), f"run {run_index + 1}/{args.runs}", show
            )
            run: dict[str, list[QuestionRecord]] = {m: [] for m in methods}
            for question in questions:
                done = resumed.get((run_index, question.question_id))
                if done is not None:
                    for method in methods:
                        run[method].append(done[method])
                        progress.step(method)
                    continue
                reference = None
                # Methods alternate within each question, so that a drift in the machine's
                # speed hits every method alike.
                for method in methods:
                    try:
                        record = run_question(
                            runners[method],
                            tokenizer,
                            question,
                            args.max_new_tokens,
                            args.device,
                            reference,
                        )
                    except ValueError as exc:  # e.g. a later turn no longer fits the context
                        return _error(
                            f"question {question.question_id}, method {method}: {exc} (the "
                            f"answers measured so far are in {results_path}; --resume continues)"
                        )
                    if method == "ar" and not sampling:
                        reference = record
                    results.write(
                        json.dumps(_record_line(run_index, method, record), default=float) + "\n"
                    )
                    results.flush()
                    run[method].append(record)
                    progress.step(method)
            runs.append(run)

    # Greedy: checked token for token. Sampling: another stream of coins, same law (the
    # exact-law tests prove it), so nothing is compared and the table says "n/a".
    equal, divergences, plain = compare_outputs(runs, methods, bool(sampling))
    for d in divergences:
        print(
            f"\nDIVERGENCE: {d['method']} question {d['question_id']} turn {d['turn']} first "
            f"differs from the naive loop at token {d['position']}",
            file=sys.stderr,
        )
    bases = {m: speedup_base(runs, m, bool(sampling)) for m in methods}
    rows = summarize(runs, methods, equal, bases)
    target = "cas-spec" if "cas-spec" in methods else methods[-1]
    paired = paired_comparisons(runs, methods, target)  # empty beside the naive loop alone
    learned = {
        m: dytc_report(runners[m].policy)  # type: ignore[attr-defined]
        for m in methods
        if getattr(runners[m], "policy", None) is not None
    }
    load = threads.load_record(load_start, threads.machine_load())
    if load["changed"]:
        print(
            "WARNING: the machine's load changed during the run (see environment.load)",
            file=sys.stderr,
        )
    result = {
        "environment": {**environment(args.device, args.dtype, command_line(argv)), "load": load},
        "settings": settings,
        "records": rows,
        "divergences": divergences,
        "plain_divergences": plain,
        "paired": {"target": target, "against": paired},
        "verify_curve_ms": {t: 1000 * sec for t, sec in verify_curve.items()},
        "dytc": learned,
    }
    summary = json.dumps(result, indent=2, default=float)
    (out / "results.json").write_text(summary)
    if args.record:
        Path(args.record).write_text(summary + "\n")
    table = format_table(rows)
    (out / "table.txt").write_text(table + "\n")
    plots = write_plots(rows, out)
    print(table)
    for method, report in plain.items():
        print(f"\n{plain_line(method, report)} (its kernels round by shape; not an error)")
    if paired:
        print("\n" + format_paired(target, paired, len(questions)))
    for method, report in learned.items():
        curve = ", ".join(f"{t}: {ms:.1f}" for t, ms in report["verify_ms"].items())
        print(f"\n{method}: learned verify cost (tree size: ms) {curve}")
        for name, d in report["drafts"].items():
            cost = "" if d["c"] is None else f", c {d['c']:.3f}"
            print(f"  {name:24s} alpha {d['alpha']:.2f} ({d['observations']} obs){cost}")
        row = next(r for r in rows if r["method"] == method and r["group"] == "overall")
        print(f"  branching trees: {row['branching_steps']:.0f} of {row['steps']:.0f} steps")
    also = f", {args.record}" if args.record else ""
    print(
        f"\nwrote {out / 'results.json'}, {out / 'table.txt'}{also}"
        + "".join(f", {p}" for p in plots)
    )
    unequal = unequal_methods(equal)
    if unequal:
        print(
            f"WARNING: {', '.join(unequal)} diverged from the naive loop; their speeds are not "
            "comparable with it (see divergences in results.json)",
            file=sys.stderr,
        )
    return 0
