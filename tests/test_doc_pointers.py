"""Every pointer from the package's code into docs/ resolves.

The forms the code writes, each checked against the page it names:

- ``docs/NAME.md``: the page exists.
- ``docs/NAME.md §4``, ``§4.1``, ``§4-§5``, ``§4-5``, ``§1, §5``: each numbered section exists, a
  heading whose text starts with that number (``## 4. DyTC``, ``### 4.1 The paper's policy``).
- ``docs/NAME.md (`name`)`` or ``docs/NAME.md, "Some words"``: a heading or a bold lead
  (``**...**``, as the decisions of docs/design.md open) contains that text.
- ``docs/NAME.md §2, "quoted words"``: the words appear in that section (a quote may skip text
  with ``...``).

A path in backticks or inside a longer path (ggml's ``docs/gguf.md``) names another project's
file and is not checked.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "casspec_ref"

_NUMBER = r"\d+(?:\.\d+)*"
POINTER = re.compile(
    r"(?<![\w/`.-])docs/(?P<page>[\w-]+\.md)"
    rf"(?P<sections>\s*§\s*{_NUMBER}(?:\s*(?:-\s*§?|,\s*§)\s*{_NUMBER}(?!\w))*)?"
    r"(?:\s*(?:,|\()\s*(?P<name>`[^`\n]+`|\"[^\"\n]+\"))?"
)


@dataclass(frozen=True)
class Pointer:
    where: str
    page: str
    sections: tuple[str, ...]
    name: str | None  # the backticked or quoted text, quotes removed (backticks kept)

    def __str__(self) -> str:
        sections = " ".join(f"§{s}" for s in self.sections)
        name = f" {self.name!r}" if self.name else ""
        return f"{self.where}: docs/{self.page}{' ' if sections else ''}{sections}{name}"


def _flat(text: str) -> str:
    return " ".join(text.split())


def _joined_source(text: str) -> str:
    """A Python file's lines joined, each without its indentation and comment marker, so that a
    pointer wrapped across docstring or comment lines reads as one line."""
    return " ".join(re.sub(r"^\s*(?:#:?\s?)?", "", line) for line in text.splitlines())


def find_pointers(text: str, where: str) -> list[Pointer]:
    """Every pointer into docs/ in ``text`` (already joined, see `_joined_source`)."""
    found = []
    for match in POINTER.finditer(text):
        sections = tuple(re.findall(_NUMBER, match.group("sections") or ""))
        name = match.group("name")
        if name and name.startswith('"'):
            name = name[1:-1]
        found.append(Pointer(where, match.group("page"), sections, name))
    return found


@dataclass(frozen=True)
class Page:
    headings: list[tuple[int, str]]  # (level, text), in page order, outside code fences
    lines: list[str]
    heading_lines: list[int]  # the line index of each heading
    leads: list[str]  # every **bold** span


def read_page(text: str) -> Page:
    headings, heading_lines, lines = [], [], text.splitlines()
    fenced = False
    for index, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        heading = re.match(r"^(#{1,6}) +(.+?) *#* *$", line)
        if heading and not fenced:
            headings.append((len(heading.group(1)), heading.group(2)))
            heading_lines.append(index)
    leads = re.findall(r"\*\*(.+?)\*\*", _flat(text))
    return Page(headings, lines, heading_lines, leads)


def _section(page: Page, number: str) -> str | None:
    """The text of section ``number`` (its heading to the next heading of its level or above),
    or None where no heading starts with that number."""
    for i, (level, text) in enumerate(page.headings):
        if re.match(rf"{re.escape(number)}(?:[.\s]|$)", text):
            end = len(page.lines)
            for later_level, later_line in zip(
                (lv for lv, _ in page.headings[i + 1 :]), page.heading_lines[i + 1 :], strict=True
            ):
                if later_level <= level:
                    end = later_line
                    break
            return "\n".join(page.lines[page.heading_lines[i] : end])
    return None


def _contains(text: str, quote: str) -> bool:
    """Whether every piece of ``quote`` (split at "...") appears in ``text``, case and line
    breaks aside."""
    flat = _flat(text).lower()
    return all(_flat(piece).lower() in flat for piece in quote.split("...") if piece.strip())


def problems(pointer: Pointer, docs: Path = ROOT / "docs") -> list[str]:
    """What does not resolve in ``pointer`` (empty when it all does)."""
    path = docs / pointer.page
    if not path.is_file():
        return [f"{pointer}: docs/{pointer.page} does not exist"]
    page = read_page(path.read_text())
    out = []
    texts = []
    for number in pointer.sections:
        text = _section(page, number)
        if text is None:
            out.append(f"{pointer}: docs/{pointer.page} has no heading numbered {number}")
        else:
            texts.append(text)
    if pointer.name:
        if pointer.sections:
            if texts and not any(_contains(text, pointer.name) for text in texts):
                out.append(f"{pointer}: {pointer.name!r} is not in that section")
        elif not any(_contains(t, pointer.name) for _, t in page.headings) and not any(
            _contains(lead, pointer.name) for lead in page.leads
        ):
            out.append(f"{pointer}: no heading or bold lead of docs/{pointer.page} holds it")
    return out


def package_pointers() -> list[Pointer]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = _joined_source(path.read_text())
        found += find_pointers(text, str(path.relative_to(ROOT)))
    return found


def test_every_pointer_from_the_package_into_docs_resolves():
    pointers = package_pointers()
    assert len(pointers) >= 40, f"only {len(pointers)} pointers found: is the pattern broken?"
    assert any(p.sections for p in pointers) and any(p.name for p in pointers)
    broken = [message for pointer in pointers for message in problems(pointer)]
    assert not broken, "\n".join(broken)


def test_the_pointer_forms_are_parsed():
    text = _joined_source(
        "x (docs/method.md §4-§5) y docs/method.md §4-5): z\n"
        "# (docs/method.md §1, §5). w docs/method.md §5 rules 1-4\n"
        '    docs/method.md\n    §2, "Draft KV"): docs/design.md (`dytc.py`) and\n'
        '#: docs/design.md, "Threat\n#: model") ggml\'s ``docs/gguf.md`` docs/results.md (its x)'
    )
    assert [(p.page, p.sections, p.name) for p in find_pointers(text, "t")] == [
        ("method.md", ("4", "5"), None),
        ("method.md", ("4", "5"), None),
        ("method.md", ("1", "5"), None),
        ("method.md", ("5",), None),
        ("method.md", ("2",), "Draft KV"),
        ("design.md", (), "`dytc.py`"),
        ("design.md", (), "Threat model"),
        ("results.md", (), None),
    ]


@pytest.mark.parametrize(
    "text",
    [
        "docs/no_such_page.md",
        "docs/method.md §99",
        "docs/method.md §4-§99",
        "docs/method.md §4.99",
        "docs/design.md (`no_such_module.py`)",
        'docs/design.md, "No heading says this"',
        'docs/method.md §2, "words that section does not hold"',
        'docs/method.md §5, "Draft KV"',  # the words are in §2, not §5
    ],
)
def test_a_pointer_that_does_not_resolve_is_flagged(text):
    (pointer,) = find_pointers(text, "synthetic")
    assert problems(pointer), f"{text!r} was taken as resolved"


@pytest.mark.parametrize(
    "text",
    [
        "docs/method.md §4",
        "docs/method.md §4.1",
        'docs/method.md §2 ("SWIFT chooses the skipped sub-layers on the fly ... matchness")',
        "docs/design.md (`accel/int8.py`)",
        'docs/design.md, "Strategies are data"',
        'docs/floating_point.md, "The scalar tail"',
    ],
)
def test_a_pointer_that_resolves_is_not_flagged(text):
    (pointer,) = find_pointers(text, "synthetic")
    assert problems(pointer) == []
