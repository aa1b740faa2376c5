"""The product's text says what the project is and does, not when it changed: no commit hash.

A commit hash in a doc, the README, a test or the package's code dates a sentence ("over commit
X's code") instead of stating what holds now. Records are the exception: the generated pages
(`GENERATED`, docs/results.md from `make results`) print the commit each figure ran, by design.

A commit-like token is a whole word of 7 to 40 lowercase hexadecimal digits with at least one
digit and one letter a-f, or any such word of digits alone right after "commit"; URLs are not
read, and a word that is part of a number (``1.7e-05``), a path or a longer run (a 64-digit
SHA-256) is not one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: Pages a tool writes from records that name their commit; each says it is generated.
GENERATED = {"docs/results.md": "This page is generated: `make results`"}

COMMIT_LIKE = re.compile(
    r"(?<![\w.+/-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w+-])"
)
#: A hash of digits alone reads as a number unless "commit" names it.
NAMED_COMMIT = re.compile(r"\bcommits?\s+([0-9a-f]{7,40})(?![\w+-])", re.IGNORECASE)
URL = re.compile(r"https?://\S+")


def commit_like_tokens(text: str) -> list[tuple[int, str]]:
    """[(line number, token)] of every commit-like token in ``text``, URLs aside."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = URL.sub(" ", line)
        tokens = set(COMMIT_LIKE.findall(line)) | set(NAMED_COMMIT.findall(line))
        found += [(number, token) for token in sorted(tokens)]
    return found


def product_files() -> list[Path]:
    files = [ROOT / "README.md", ROOT / "tutorials" / "README.md"]
    files += sorted((ROOT / "docs").glob("*.md"))
    files += sorted((ROOT / "tests").glob("*.py"))
    files += sorted((ROOT / "casspec_ref").rglob("*.py"))
    files += sorted((ROOT / "benchmarks").glob("*.py"))
    files += sorted((ROOT / "tutorials").glob("*.py"))
    return [f for f in files if str(f.relative_to(ROOT)) not in GENERATED]


def test_the_excluded_pages_are_generated():
    for page, says in GENERATED.items():
        assert says in (ROOT / page).read_text(), f"{page} no longer says it is generated"


def test_no_commit_hash_in_the_product_text():
    files = product_files()
    assert len(files) > 50, [str(f) for f in files]
    found = [
        f"{path.relative_to(ROOT)}:{line}: {token}"
        for path in files
        for line, token in commit_like_tokens(path.read_text(encoding="utf-8"))
    ]
    assert not found, "commit-like tokens (say what holds now instead):\n" + "\n".join(found)


def _hex(text: str) -> str:
    """``text`` without its dashes: the hashes below are written in dashed pieces, so that this
    file itself holds none."""
    return text.replace("-", "")


@pytest.mark.parametrize(
    "text",
    [
        "Scores over commit " + _hex("4ac-3696") + "'s code",
        "(commit " + _hex("163-5877") + "; mutmut run)",
        "`" + _hex("2c8-3c75") + "`",
        "at " + _hex("7f6c38-6ee35c-4d4e55-cd89c0-5f4c6b-00815b-0051") + ".",
    ],
)
def test_the_detector_flags_a_commit_hash(text):
    assert commit_like_tokens(text), text


@pytest.mark.parametrize(
    "text",
    [
        "1.702965428041825e-05",  # a float's digits
        "0x7f3a9b2c",  # a hex constant
        "deadbeef and 12345678 commits",  # letters only; digits only, no "commit" before
        "sha256 " + _hex("012345-6789ab-cdef") * 4,  # a 64-digit digest
        "https://example.invalid/commit/" + _hex("4ac-3696"),  # a URL
        "path/to/" + _hex("abc-1234") + "/file",  # a path component
        "vllm-ascend #2881, #47932",  # an issue of another project
    ],
)
def test_the_detector_spares_what_is_not_a_commit_hash(text):
    assert commit_like_tokens(text) == [], text
