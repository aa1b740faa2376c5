"""The exercise mechanism of the tutorials: stubs in the notebooks, solutions beside them.

A notebook's "your turn" cell carries the cell tag ``exercise:NAME`` and holds a stub that runs
without error but does not do the job (a function that returns None, a variable left at None).
The cell after it (or a later one) carries ``check:NAME`` and asserts that the job was done.
``tutorials/solutions/<notebook stem>.py`` holds one section per exercise, in the percent format
that Jupyter and editors read as cells::

    # %% exercise: NAME
    <the code that replaces the stub>

The same file keeps a gallery of wrong answers a student would plausibly write, at least two per
exercise, each in a section of its own::

    # %% wrong: NAME: what is wrong with it
    <plausible code that does not do the job>

`run_notebook` executes a notebook with every stub replaced by its solution (so each exercise is
proven solvable and every cell passes), then, in the same kernel, for each exercise: runs the
stub and its check, which must fail; runs each wrong answer and the check, which must fail with
an ``AssertionError`` whose message says what is wrong (never the expected value); and finally the
solution and the check again, which must pass. A check that cannot fail, a check that accepts a
wrong answer, or a solution that does not solve, fails CI.

`store_outputs` executes a notebook as a student first sees it (the stubs in place) and writes
it back with its outputs, so that it reads without running: every cell runs, and each check
cell shows the message it gives on the unfilled stub; the repository's path in an output is
written ``<repository>``, and no cell keeps the execution timestamps a kernel records (the
metadata keys in `TIMESTAMP_KEYS`). ``python tutorials/exercises.py 00 03`` stores notebooks
00 and 03 (no argument: all of them).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

TUTORIALS = Path(__file__).resolve().parent
SOLUTIONS = TUTORIALS / "solutions"
#: Notebooks that do not carry exercises yet (each entry needs a reason).
WITHOUT_EXERCISES: set[str] = set()
SECTION = re.compile(r"^# %% (exercise|wrong): *([\w-]+) *(?:: *(.*?))? *$", re.MULTILINE)
#: The fewest wrong answers each exercise's gallery holds.
MIN_WRONG = 2
#: Cell metadata that records when a cell ran (nbclient's ``execution``, the JupyterLab
#: extension's ``ExecuteTime``); a stored notebook carries none of it.
TIMESTAMP_KEYS = ("execution", "ExecuteTime")


def notebooks() -> list[Path]:
    """Every tutorial notebook, in reading order."""
    return sorted(TUTORIALS.glob("[0-9][0-9]_*.ipynb"))


def _tag_names(cell: dict, kind: str) -> list[str]:
    prefix = kind + ":"
    return [
        t[len(prefix) :] for t in cell.get("metadata", {}).get("tags", []) if t.startswith(prefix)
    ]


def exercises(nb: nbformat.NotebookNode) -> dict[str, tuple[int, int]]:
    """{name: (index of the exercise cell, index of its check cell)}, in notebook order."""
    stubs: dict[str, int] = {}
    checks: dict[str, int] = {}
    for index, cell in enumerate(nb.cells):
        for kind, found in (("exercise", stubs), ("check", checks)):
            for name in _tag_names(cell, kind):
                if name in found:
                    raise ValueError(f"two cells are tagged {kind}:{name}")
                if cell.cell_type != "code":
                    raise ValueError(f"the cell tagged {kind}:{name} is not a code cell")
                found[name] = index
    if set(stubs) != set(checks):
        raise ValueError(
            f"exercises without a check or checks without an exercise: {set(stubs) ^ set(checks)}"
        )
    for name, index in stubs.items():
        if checks[name] <= index:
            raise ValueError(f"the check of exercise {name!r} comes before the exercise")
    return {name: (stubs[name], checks[name]) for name in stubs}


def solutions_path(notebook: Path) -> Path:
    return SOLUTIONS / f"{notebook.stem}.py"


def _sections(path: Path) -> list[tuple[str, str, str, str]]:
    """[(kind, name, label, code)] of a solutions file, in file order."""
    text = path.read_text()
    matches = list(SECTION.finditer(text))
    if not any(m.group(1) == "exercise" for m in matches):
        raise ValueError(f"{path} has no '# %% exercise: NAME' section")
    out = []
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following else len(text)
        kind, name, label = match.group(1), match.group(2), match.group(3) or ""
        if kind == "wrong" and not label:
            raise ValueError(f"{path}: the wrong answer to {name!r} needs a label after a colon")
        out.append((kind, name, label, text[match.end() : end].strip("\n") + "\n"))
    return out


def load_solutions(path: Path) -> dict[str, str]:
    """{name: code} from a solutions file (see the module docstring for its format)."""
    return {name: code for kind, name, _, code in _sections(path) if kind == "exercise"}


def load_wrong_answers(path: Path) -> dict[str, dict[str, str]]:
    """{exercise name: {label: code}} of the wrong-answer gallery in a solutions file."""
    gallery: dict[str, dict[str, str]] = {}
    for kind, name, label, code in _sections(path):
        if kind == "wrong":
            if label in gallery.setdefault(name, {}):
                raise ValueError(f"{path}: two wrong answers to {name!r} are labelled {label!r}")
            gallery[name][label] = code
    return gallery


def filled(nb: nbformat.NotebookNode, solutions: dict[str, str]) -> nbformat.NotebookNode:
    """A copy of ``nb`` whose exercise cells hold the solutions."""
    found = exercises(nb)
    if set(found) != set(solutions):
        raise ValueError(
            f"exercises {sorted(found)} and solutions {sorted(solutions)} do not match"
        )
    out = nbformat.from_dict(nb)
    for name, (index, _) in found.items():
        out.cells[index].source = solutions[name]
    return out


@dataclass
class Report:
    """What `run_notebook` established, and how long the executions took."""

    notebook: str
    seconds: float
    exercises: list[str] = field(default_factory=list)
    stub_failures: dict[str, str] = field(default_factory=dict)
    #: {exercise: {wrong answer's label: the check's message}}
    wrong_failures: dict[str, dict[str, str]] = field(default_factory=dict)


def _error_name(error: CellExecutionError) -> str:
    return getattr(error, "ename", None) or str(error).strip().splitlines()[-1]


def _run(client: NotebookClient, nb: nbformat.NotebookNode, source: str) -> None:
    """Execute ``source`` in the client's kernel as a new cell appended to ``nb``."""
    cell = nbformat.v4.new_code_cell(source)
    nb.cells.append(cell)
    client.execute_cell(cell, len(nb.cells) - 1)


def _must_fail(client: NotebookClient, nb: nbformat.NotebookNode, check: str) -> CellExecutionError:
    try:
        _run(client, nb, check)
    except CellExecutionError as error:
        return error
    raise AssertionError("the check passed")


def run_notebook(path: Path, timeout: int = 600) -> Report:
    """Execute ``path`` with its solutions filled in, then prove every check fails on its stub."""
    nb = nbformat.read(path, as_version=4)
    found = exercises(nb)
    solutions = load_solutions(solutions_path(path)) if found else {}
    solved = filled(nb, solutions)
    client = NotebookClient(
        solved,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(TUTORIALS)}},
    )
    report = Report(path.name, 0.0, list(found))
    gallery = load_wrong_answers(solutions_path(path)) if found else {}
    start = time.perf_counter()
    with client.setup_kernel():
        for index, cell in enumerate(solved.cells):
            client.execute_cell(cell, index)
        # The rest runs in the same kernel after the whole notebook, appended to it (nbclient
        # stores each executed cell's outputs in the notebook).
        for name, (stub_index, check_index) in found.items():
            check = nb.cells[check_index].source
            _run(client, solved, nb.cells[stub_index].source)  # the stub itself must run
            try:
                report.stub_failures[name] = _error_name(_must_fail(client, solved, check))
            except AssertionError:
                raise AssertionError(
                    f"{path.name}: the check of {name!r} passes on the unfilled stub"
                ) from None
            for label, code in gallery.get(name, {}).items():
                _run(client, solved, code)
                try:
                    error = _must_fail(client, solved, check)
                except AssertionError:
                    raise AssertionError(
                        f"{path.name}: the check of {name!r} accepts a wrong answer: {label}"
                    ) from None
                if getattr(error, "ename", None) != "AssertionError" or not error.evalue:
                    raise AssertionError(
                        f"{path.name}: on the wrong answer {label!r} the check of {name!r} "
                        f"fails without saying why: {_error_name(error)}"
                    )
                report.wrong_failures.setdefault(name, {})[label] = error.evalue
            _run(client, solved, solutions[name])
            _run(client, solved, check)
    report.seconds = time.perf_counter() - start
    return report


def store_outputs(path: Path, timeout: int = 600) -> None:
    """Execute ``path`` with its stubs and write it back with its outputs (see the module
    docstring); any error outside a check cell is raised."""
    nb = nbformat.read(path, as_version=4)
    checks = {index for _, index in exercises(nb).values()}
    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(TUTORIALS)}},
    )
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            try:
                client.execute_cell(cell, index)
            except CellExecutionError:
                if index not in checks:
                    raise
    nbformat.write(without_timestamps(without_local_paths(nb)), path)


def timestamped_cells(nb: dict) -> list[tuple[int, list[str]]]:
    """[(cell index, the `TIMESTAMP_KEYS` its metadata carries)] of every cell carrying any."""
    found = []
    for index, cell in enumerate(nb["cells"]):
        keys = [key for key in TIMESTAMP_KEYS if key in cell.get("metadata", {})]
        if keys:
            found.append((index, keys))
    return found


def without_timestamps(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` with the `TIMESTAMP_KEYS` removed from every cell's metadata."""
    for cell in nb.cells:
        for key in TIMESTAMP_KEYS:
            cell.get("metadata", {}).pop(key, None)
    return nb


def without_local_paths(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """``nb`` with the repository's absolute path written ``<repository>`` in text outputs."""
    root = str(TUTORIALS.parent)
    for cell in nb.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream":
                output["text"] = output["text"].replace(root, "<repository>")
    return nb


if __name__ == "__main__":
    import sys

    chosen = sys.argv[1:]
    for notebook in notebooks():
        if not chosen or notebook.name[:2] in chosen:
            start = time.perf_counter()
            store_outputs(notebook)
            print(f"{notebook.name}: outputs stored in {time.perf_counter() - start:.0f} s")
