"""The product speaks of the project only: no words of the process that produced it.

What the package, docs, tutorials, tests, benchmarks and README say must be true of the code as
it is: how it was built is git's history, not the reader's business. `offences` finds, in a
text, the three kinds of process words:

- a numbered working step: "stop 12", "stops 14-19", "stop-12";
- a reference to this project's own tracker or working rounds: "issue 10", "issue #4", "session",
  a round folder such as ``s24/``;
- a remark about the machine the work ran on: "shared and noisy machine", "noisy host".

Citations of other projects' issues stay allowed ("transformers #32867", "EAGLE issues #74 and
#110", "vLLM issue #1234"): an issue number is an offence only when no project in
`CITED_PROJECTS` is named just before it. Words such as "stop tokens", ``stop_ids`` or "stop at"
are not followed by a number and never match.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import casspec_ref

ROOT = Path(casspec_ref.__file__).parent.parent
SCANNED = ("casspec_ref", "docs", "tutorials", "tests", "benchmarks")
SUFFIXES = {".py", ".md", ".ipynb", ".txt", ".sh", ".json", ".toml", ".cfg"}
THIS_FILE = Path(__file__).resolve()

# Other projects whose issue trackers the docs cite (a citation names its project first).
CITED_PROJECTS = (
    "eagle",
    "transformers",
    "vllm",
    "vllm-ascend",
    "llama.cpp",
    "mlx-lm",
    "sglang",
    "pytorch",
    "torch",
    "medusa",
    "spec-bench",
    "github.com",
)

PATTERNS = {
    "a numbered working step": re.compile(r"\bstops?[\s-]+\d+", re.IGNORECASE),
    "a working round": re.compile(
        r"\bsessions?\b|(?<![\w.-])s\d{2}/|\bround\s+\d+\b", re.IGNORECASE
    ),
    "a remark about the host": re.compile(
        r"\b(?:shared|noisy)(?:\s+(?:and|or)\s+(?:shared|noisy))?\s+(?:machine|host|cpu|box)s?\b"
        r"|\b(?:machine|host)s?\s+(?:is|are|was|were)\s+(?:shared|noisy)\b",
        re.IGNORECASE,
    ),
}
ISSUE = re.compile(r"\b(?:issues?|PRs?|pull requests?)\s+#?\d+", re.IGNORECASE)
CITATION_WINDOW = 40  # characters before an issue number searched for a cited project's name


def offences(text: str) -> list[tuple[int, str, str]]:
    """Every process word in ``text``: (line number, kind, the words found)."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        for kind, pattern in PATTERNS.items():
            found += [(number, kind, m.group(0)) for m in pattern.finditer(line)]
        for m in ISSUE.finditer(line):
            before = line[max(0, m.start() - CITATION_WINDOW) : m.start()].lower()
            if not any(project in before for project in CITED_PROJECTS):
                found.append((number, "a tracker reference of this project", m.group(0)))
    return found


def scanned_files() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder in SCANNED:
        files += [
            p
            for p in sorted((ROOT / folder).rglob("*"))
            if p.is_file()
            and p.suffix in SUFFIXES
            and p.resolve() != THIS_FILE
            and ".ipynb_checkpoints" not in p.parts
        ]
    return files


def test_no_process_words_in_the_product() -> None:
    report = [
        f"{path.relative_to(ROOT)}:{line}: {kind}: {words!r}"
        for path in scanned_files()
        for line, kind, words in offences(path.read_text(encoding="utf-8", errors="replace"))
    ]
    assert not report, "process words in the product:\n" + "\n".join(report)


@pytest.mark.parametrize(
    "planted",
    [
        "The window is 40 since stop 23.",
        "as stops 14-19 showed",
        "the stop-12 bundled run",
        "Why issue 10 is reported blocked",
        "see issue #4, item 6",
        "none was lent in thirteen sessions",
        "records in docs/bench/s24/ and s25/README.md",
        "measured in round 3",
        "this machine is shared and noisy",
        "one noisy run on a shared CPU",
        "timings on a noisy host are noise",
    ],
)
def test_each_kind_of_process_word_is_caught(planted: str, tmp_path: Path) -> None:
    path = tmp_path / "planted.md"
    path.write_text(f"A clean line.\n{planted}\n")
    found = offences(path.read_text())
    assert found and all(line == 2 for line, _, _ in found), found


@pytest.mark.parametrize(
    "clean",
    [
        "Generation ends at stop tokens; `stop_ids` holds them.",
        "stop at the first rejection; stop = 3",
        "the verifier of transformers #32867 used the argmax as q",
        "the bug that EAGLE shipped (issues #74 and #110)",
        "vLLM issue #1234 and vllm-ascend #2881",
        "a table of 4 sizes (s1/s2 in the notation: s_1)",
        "the kernel table is cached per machine and shared by every process",
    ],
)
def test_ordinary_words_and_other_projects_citations_pass(clean: str) -> None:
    assert offences(clean) == []
