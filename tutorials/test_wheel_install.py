"""The notebooks that read the package's data run from a wheel install, outside the repository.

A student who installs ``casspec_ref`` from a wheel (or a hosted notebook service) has no
``docs/`` and no ``tests/`` beside the notebooks. This test builds the wheel, unpacks it into a
folder of its own, copies notebooks 6 and 7 (their exercises solved) into another folder outside
the repository, and runs them in a kernel whose ``casspec_ref`` is the wheel's: a notebook that
reads a file of the repository (``../docs``, ``../tests``) fails here.
"""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import nbformat
import pytest
from exercises import TUTORIALS, filled, load_solutions, solutions_path
from nbclient import NotebookClient

ROOT = TUTORIALS.parent
FROM_THE_WHEEL = ("06_cascades_vc_hc_boundary.ipynb", "07_dytc_step_by_step.ipynb")


#: What the wheel is not built from: a build folder left in the tree could carry stale modules.
NOT_SOURCES = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "*.egg-info",
    "bench_out",
    "mutants",
    "__pycache__",
    ".*_cache",
    ".hypothesis",
)


def _unpacked_wheel(folder: Path) -> Path:
    """Build the package's wheel from a clean copy of the sources (no dependencies, no network)
    and unpack it into ``folder``."""
    source, wheels = folder / "source", folder / "wheels"
    shutil.copytree(ROOT, source, ignore=NOT_SOURCES)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q"]
        + ["-w", str(wheels), str(source)],
        check=True,
        capture_output=True,
    )
    (wheel,) = wheels.glob("casspec_ref-*.whl")
    site = folder / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    return site


@pytest.mark.slow
@pytest.mark.real_model
def test_notebooks_6_and_7_run_from_a_wheel_outside_the_repository(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = _unpacked_wheel(tmp_path)
    course = tmp_path / "course"
    course.mkdir()
    # The kernel inherits the environment: the wheel's package comes first on its path.
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    for name in FROM_THE_WHEEL:
        notebook = nbformat.read(TUTORIALS / name, as_version=4)
        solved = filled(notebook, load_solutions(solutions_path(TUTORIALS / name)))
        solved.cells.append(
            nbformat.v4.new_code_cell("import casspec_ref\nprint(casspec_ref.__file__)")
        )
        client = NotebookClient(
            solved,
            timeout=600,
            kernel_name="python3",
            resources={"metadata": {"path": str(course)}},
        )
        client.execute()
        where = "".join(out.get("text", "") for out in solved.cells[-1].outputs).strip()
        assert Path(where).is_relative_to(site), f"{name} imported casspec_ref from {where}"
