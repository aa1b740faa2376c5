"""README's "One step, file by file" names exactly the package files one speculative step runs.

The tour is checked against a trace, not against a list kept by hand: `sys.setprofile` records
the file of every package function called while `speculative_step` runs, over several greedy
CAS-Spec steps on a tiny model (the first steps draft with the model's levels, later ones with
prompt lookup too), and the union is compared with the files the README's table names.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

import casspec_ref
import casspec_ref.speculative as speculative
from casspec_ref.base.random_weights import random_init_
from casspec_ref.config import tiny_llama
from casspec_ref.model import Transformer

PACKAGE = Path(casspec_ref.__file__).parent
README = PACKAGE.parent / "README.md"
FILE = re.compile(r"`((?:\w+/)*\w+\.py)`")
#: The steps traced (1-based): warm-up over, then a few more, until the cap ends the run.
TRACED_STEPS = range(2, 9)


def tour_files(text: str) -> set[str]:
    """The package files (relative to casspec_ref/) named in the tour's table: backquoted
    ``.py`` names in the second column of its rows."""
    section = text.split("### One step, file by file", 1)[1].split("\n## ", 1)[0]
    named: set[str] = set()
    for line in section.splitlines():
        cells = line.split("|")
        if len(cells) >= 4:
            named.update(FILE.findall(cells[2]))
    return named


def traced_files(model: Any, prompt: list[int], steps: range) -> set[str]:
    """The package files whose functions run during the given steps of a greedy CAS-Spec run."""
    files: set[str] = set()
    step_number = 0

    def record(frame: FrameType, event: str, arg: object) -> None:
        path = Path(frame.f_code.co_filename)
        if event == "call" and PACKAGE in path.parents:
            files.add(str(path.relative_to(PACKAGE)))

    def traced_step(state: speculative.Decoding) -> object:
        nonlocal step_number
        step_number += 1
        if step_number not in steps:
            return step(state)
        sys.setprofile(record)
        try:
            return step(state)
        finally:
            sys.setprofile(None)

    step = speculative.speculative_step
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(speculative, "speculative_step", traced_step)
        speculative.generate_speculative(model, prompt, 24, method="cas-spec")
    assert step_number >= max(steps), f"the run ended after {step_number} steps"
    return files


def test_the_readme_names_every_file_one_step_runs_and_no_other() -> None:
    model = random_init_(Transformer(tiny_llama()), seed=0).eval()
    prompt = [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 6, 7, 1, 2, 3]  # repeats: prompt lookup drafts too
    ran = traced_files(model, prompt, TRACED_STEPS)
    readme = README.read_text(encoding="utf-8")
    named = tour_files(readme)
    assert ran - named == set(), f"a step runs files the README's tour does not name: {ran - named}"
    assert named - ran == set(), f"the README's tour names files no step ran: {named - ran}"
    count = re.search(r"runs functions of (\d+) package files", readme)
    assert count is not None and int(count.group(1)) == len(ran), "the tour's count is stale"


def test_tour_parser_reads_the_files_column_only() -> None:
    text = (
        "### One step, file by file\n\n| part | files | what |\n|---|---|---|\n"
        "| draft | `draft.py`, `dsia/recycle.py` | calls `verify.py` |\n"
        "| | `tree.py` | x |\n\n## Next\n| a | `model.py` | b |\n"
    )
    assert tour_files(text) == {"draft.py", "dsia/recycle.py", "tree.py"}
