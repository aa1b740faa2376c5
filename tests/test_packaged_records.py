"""The results records a tutorial reads ship in the package, identical to docs/bench/'s.

Notebooks 4 and 6 read the DSIA drafts' alpha and c, with the machine that measured them, from
``casspec_ref/data/dsia_table.json`` (package data, so that they run from a wheel install),
a copy of the record ``benchmarks/dsia_table.py`` writes to docs/bench/ (it writes both).
"""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ("dsia_table.json",)


def test_each_shipped_record_is_the_results_record():
    for name in SHIPPED:
        shipped = (resources.files("casspec_ref") / "data" / name).read_text()
        assert shipped == (ROOT / "docs" / "bench" / name).read_text(), (
            f"casspec_ref/data/{name} differs from docs/bench/{name}: copy the record again"
        )


def test_the_shipped_dsia_record_names_its_machine_and_the_drafts_the_notebooks_read():
    record = json.loads((resources.files("casspec_ref") / "data" / "dsia_table.json").read_text())
    assert record["environment"]["machine"]
    names = {row["name"] for row in record["rows"]}
    notebook_4 = {
        "target",
        "bfloat16",
        "exit20",
        "exit25",
        "alt0.30",
        "search-10sub",
        "search-0.3",
        "w8a8-fast",
        "w8a8-no_mlp_down-fast",
        "search-10sub+w8a8-fast",
    }
    notebook_6 = {"L2:s0.3+a8", "w8a8-fast", "prompt lookup (n=3..1, 10 tok)"}
    assert notebook_4 | notebook_6 <= names, sorted((notebook_4 | notebook_6) - names)
