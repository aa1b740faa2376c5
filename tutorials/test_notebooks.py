"""Execute every tutorial notebook with its exercises solved, and prove each check can fail.

Run by ``make tutorials`` (part of ``make test``); one notebook:
``.venv/bin/python -m pytest -q tutorials/test_notebooks.py -k 03``. The mechanism (cell tags
``exercise:NAME`` / ``check:NAME``, solutions and wrong answers in tutorials/solutions/) is in
tutorials/exercises.py. ``-s`` prints what each check said to each wrong answer.
"""

import pytest
from exercises import MIN_WRONG, WITHOUT_EXERCISES, notebooks, run_notebook


@pytest.mark.slow
@pytest.mark.real_model
@pytest.mark.parametrize("path", notebooks(), ids=lambda p: p.stem[:2])
def test_notebook_runs_solved_and_its_checks_fail_on_stubs_and_wrong_answers(path):
    report = run_notebook(path)
    print(
        f"{path.name}: {report.seconds:.1f} s, exercises {report.exercises}, "
        f"checks on stubs raised {report.stub_failures}"
    )
    for name, answers in report.wrong_failures.items():
        for label, message in answers.items():
            print(f"  {name} / wrong answer '{label}': {message}")
    if path.name not in WITHOUT_EXERCISES:
        assert 2 <= len(report.exercises) <= 3, report.exercises
    assert set(report.stub_failures) == set(report.exercises)
    for name in report.exercises:
        assert len(report.wrong_failures.get(name, {})) >= MIN_WRONG, (name, report.wrong_failures)
