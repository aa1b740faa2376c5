"""The hand-mutant gallery: bugs of the kind that ship in real engines, applied to the shipped
source one at a time, each with the tests expected to kill it (`make hand-mutants`).

mutmut (`make mutation`) mutates operators and constants; these are the bugs it does not write:
a rule applied to the wrong law, transforms in the wrong order, a shortcut taken too often. Each
mutant replaces one anchored fragment of one file. The tree is copied to a temporary directory;
for each mutant the copy's file is edited, the named tests run there (pytest ``-x``, the ``ci``
Hypothesis profile unless HYPOTHESIS_PROFILE says otherwise) and the file is restored. A mutant
is killed when its tests fail (pytest's exit status 1). Anything else is reported and makes the
run fail: a mutant that survives, an anchor that is not found exactly once (the source moved:
the anchor must be re-written, and the mutant is not counted as killed), an error of pytest
itself, a timeout.

An anchor is matched with any run of whitespace standing for any other (a reformatted line still
matches); ``loose=True`` makes it a regular expression. Run from the repository root:

    python tests/hand_mutants.py [NAME ...]      # all mutants, or those named
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TIMEOUT_S = 900
IGNORED = (".git", ".venv", "mutants", "bench_out", "__pycache__", ".hypothesis", ".*_cache")


@dataclass(frozen=True)
class Mutant:
    """One bug: in ``path``, the fragment ``old`` becomes ``new``; ``tests`` should fail."""

    name: str
    path: str
    old: str
    new: str
    tests: tuple[str, ...]
    loose: bool = False  # ``old`` is a regular expression (a file another change restructures)

    def pattern(self) -> re.Pattern[str]:
        if self.loose:
            return re.compile(self.old)
        return re.compile(r"\s+".join(re.escape(part) for part in self.old.split()))


LOOP = "tests/test_loop_laws.py::"
MUTANTS = (
    Mutant(
        "siblings tested against the parent's p, not the updated residual",
        "casspec_ref/verify.py",
        "residual = _residual(residual, draft)",
        "_residual(residual, draft)",
        ("tests/test_verify.py",),
    ),
    Mutant(
        "without-replacement q rebuilt at each sibling (only the latest sibling removed)",
        "casspec_ref/verify.py",
        "if conditional_q is None:",
        "if True:",
        (LOOP + "test_loop_law_equals_ar_and_exercises_what_it_claims[cas-spec]",),
    ),
    Mutant(
        "no bonus token after a leaf",
        "casspec_ref/verify.py",
        "result.next_token = int(rng.categorical(residual))",
        "result.next_token = int(rng.categorical(residual)) if children else None",
        ("tests/test_verify.py",),
    ),
    Mutant(
        "residual not normalized",
        "casspec_ref/verify.py",
        "return excess / mass",
        "return excess",
        (LOOP + "test_loop_law_equals_ar_and_exercises_what_it_claims[static-tree]",),
    ),
    Mutant(
        "q recorded at temperature 1, tokens drawn at T",
        "casspec_ref/draft.py",
        "law = q",
        "law = target_law(logits, 1.0, self.sampling.top_k, self.sampling.top_p).cpu().numpy()",
        ("tests/test_draft.py",),
    ),
    Mutant(
        "tokens drawn without top-k/top-p, the processed q recorded",
        "casspec_ref/draft.py",
        "tokens, rest = [], q.copy()",
        "tokens, rest = [], target_law(logits, self.sampling.temperature).cpu().numpy()",
        ("tests/test_draft.py",),
    ),
    Mutant(
        "lookup/recycled tokens given a uniform law as INDEPENDENT under sampling",
        "casspec_ref/draft.py",
        "node = self.add_node(node, token, NodeInfo(source, True))",
        "node = self.add_node(node, token, NodeInfo(source, True), "
        "*(() if self.sampling.greedy else (ChildRule.INDEPENDENT, "
        "np.full(self.runner.model.config.vocab_size, 1 / self.runner.model.config.vocab_size))))",
        ("tests/test_draft.py",),
    ),
    Mutant(
        "KV commit shortcut: no compaction when the first drafted node is accepted",
        "casspec_ref/kv_cache.py",
        "if keep != list(range(len(keep))):",
        "if keep[1:2] not in ([], [1]):",
        ("tests/test_kv_cache.py", "tests/test_speculative.py"),
    ),
    Mutant(
        "tree node positions by node index, not by depth",
        "casspec_ref/tree.py",
        "prefix_len + n.depth for n in self.nodes",
        "prefix_len + i for i, n in enumerate(self.nodes)",
        ("tests/test_verify.py", "tests/test_sampling_tree_edges.py"),
    ),
    Mutant(
        "a causal mask for the tree verify forward",
        "casspec_ref/tree.py",
        "self.ancestors_mask()], dim=1)",
        "torch.ones((n, n), dtype=torch.bool).tril()], dim=1)",
        ("tests/test_verify.py", "tests/test_sampling_tree_edges.py"),
    ),
    Mutant(
        # A loose anchor on the guard alone, in either of its spellings (`pooled(name) != name`,
        # `key.pooled() != key`).
        "a pooled estimate counted twice (its own outcome taught to it again)",
        "casspec_ref/dytc_refinements.py",
        r" if (?:\w+\.)?pooled\(\w*\) != \w+(?=\)?\])",
        "",
        ("tests/test_dytc.py",),
        loose=True,
    ),
    Mutant(
        "early exit through the last block's MLP norm, not the final norm",
        "casspec_ref/model.py",
        "x = self._norm(x, w.norm)",
        "x = self._norm(x, w.norm if n_run == c.n_layers else w.layers[n_run - 1].mlp_norm)",
        ("tests/test_dsia.py", "tests/test_model.py"),
    ),
    Mutant(
        "top-p boundary off by one (a token whose mass before equals top_p kept)",
        "casspec_ref/base/nucleus.py",
        "keep_sorted = mass_before < top_p",
        "keep_sorted = mass_before <= top_p",
        ("tests/test_sampling.py",),
    ),
    Mutant(
        "top-p applied before top-k",
        "casspec_ref/sampling.py",
        "keep = nucleus.top_p_keep(probs, top_p)",
        "keep = nucleus.top_p_keep(torch.softmax(logits.double() / temperature, -1), top_p)",
        ("tests/test_sampling_semantics.py",),
    ),
    Mutant(
        "tiles: the last tile left short (a call of another shape, as an unpadded form makes)",
        "casspec_ref/base/kernels.py",
        "rows = F.pad(rows, (0, 0, 0, -n % size))",
        "rows = rows",
        ("tests/test_kernels.py",),
    ),
    Mutant(
        "tiles: a single short tile sent unpadded",
        "casspec_ref/base/kernels.py",
        "padded = torch.cat((rows, _zeros(size - n, rows.shape[1], x.dtype, x.device)))",
        "padded = rows",
        ("tests/test_kernels.py",),
    ),
    Mutant(
        "elementwise: rows not padded to whole vector steps (the scalar tail comes back)",
        "casspec_ref/base/elementwise.py",
        "if width % VECTOR_CHUNK or not rows.is_contiguous():",
        "if not rows.is_contiguous():",
        ("tests/test_elementwise.py",),
    ),
    Mutant(
        "elementwise: one call whatever its size (torch splits it between threads)",
        "casspec_ref/base/elementwise.py",
        "if rows.shape[0] <= per_call:",
        "if True:",
        ("tests/test_elementwise.py",),
    ),
    Mutant(
        "attention: a tree token reads its ancestors where the tree wrote them, among siblings",
        "casspec_ref/base/exact_attention.py",
        "if moved is not None:",
        "if False:",
        ("tests/test_shape_invariance.py",),
    ),
    Mutant(
        "attention: a tree's new K/V left in a token's order, not put back in node order",
        "casspec_ref/base/exact_attention.py",
        "k[:, :, low:], v[:, :, low:] = saved",
        "pass",
        ("tests/test_kv_cache.py",),
    ),
)


def apply(mutant: Mutant, source: str) -> str:
    """``source`` with the mutant's fragment replaced; ValueError unless it occurs once."""
    found = list(mutant.pattern().finditer(source))
    if len(found) != 1:
        raise ValueError(
            f"anchor found {len(found)} times in {mutant.path} (exactly once needed; re-anchor "
            f"this mutant): {mutant.old!r}"
        )
    start, end = found[0].span()
    return source[:start] + mutant.new + source[end:]


def run(mutant: Mutant, tree: Path) -> tuple[str, str]:
    """(status, detail) of one mutant in the copied ``tree``: killed, SURVIVED, ANCHOR, ERROR."""
    path = tree / mutant.path
    original = path.read_text()
    try:
        mutated = apply(mutant, original)
    except ValueError as error:
        return "ANCHOR", str(error)
    path.write_text(mutated)
    env = {
        **os.environ,
        "PYTHONPATH": str(tree),
        "HYPOTHESIS_PROFILE": os.environ.get("HYPOTHESIS_PROFILE", "ci"),
    }
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider"]
    try:
        done = subprocess.run(
            [*command, *mutant.tests],
            cwd=tree,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return "ERROR", f"timeout after {TIMEOUT_S} s"
    finally:
        path.write_text(original)
    failed = re.search(r"^FAILED (\S+)", done.stdout, re.MULTILINE)
    if done.returncode == 1:
        return "killed", failed.group(1) if failed else "failed"
    if done.returncode == 0:
        return "SURVIVED", done.stdout.strip().splitlines()[-1]
    return "ERROR", f"pytest exit status {done.returncode}: {done.stdout[-2000:]}"


def main(names: list[str]) -> int:
    """Run the mutants named (all when none), ``HAND_MUTANT_WORKERS`` at a time (default 1),
    each worker in its own copy of the tree; print one line per mutant, then "k of n killed"."""
    unknown = set(names) - {m.name for m in MUTANTS}
    if unknown:
        print(f"unknown mutant names: {sorted(unknown)}", file=sys.stderr)
        return 2
    chosen = [m for m in MUTANTS if not names or m.name in names]
    workers = max(1, min(int(os.environ.get("HAND_MUTANT_WORKERS", "1")), len(chosen)))
    with tempfile.TemporaryDirectory(prefix="hand-mutants-") as scratch:
        trees: queue.Queue[Path] = queue.Queue()
        for i in range(workers):
            tree = Path(scratch) / f"tree{i}"
            shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(*IGNORED))
            trees.put(tree)

        def one(mutant: Mutant) -> str:
            tree = trees.get()
            try:
                status, detail = run(mutant, tree)
            finally:
                trees.put(tree)
            print(f"{status:8} {mutant.name} [{mutant.path}]: {detail}", flush=True)
            return status

        with ThreadPoolExecutor(workers) as pool:
            statuses = list(pool.map(one, chosen))
    killed = statuses.count("killed")
    print(f"{killed} of {len(chosen)} killed")
    return 0 if killed == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
