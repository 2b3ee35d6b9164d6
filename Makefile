# restartlab: the two commands are `make demo` (the whole experiment on this machine) and
# `make test` (the suite). Both bootstrap .venv when it is missing.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
DOCSTAMP := $(VENV)/.docs
TORCH   ?= torch==2.13.0
SCEN    ?= scenarios/local.yaml
ACCOUNT ?=
PYTEST_ARGS ?=
N       ?= 100

.PHONY: install demo demo-warm demo-faults demo-strategies test bench fuzz fuzz-trainer render sunspot-expt aurora-expt polaris-expt clean test-fast docs soak

install: $(STAMP)

# --system-site-packages: an HPC site's own torch / mpi4py (from its module) stays visible and is
# never reinstalled; torch and MPI are installed only when they cannot be imported.
$(STAMP): setup.cfg setup.py
	test -x $(BIN)/python || $(PY) -m venv --system-site-packages $(VENV)
	$(BIN)/python -c 'import torch' 2>/dev/null || $(BIN)/pip install -q '$(TORCH)'
	$(BIN)/python -c 'import mpi4py' 2>/dev/null && command -v mpiexec >/dev/null \
	  || $(BIN)/pip install -q mpi4py mpich
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/restartlab run $(SCEN)

# cold and warm restart side by side (relaunch.warm: ranks forked from a standby pool that imported
# torch and the trainer once): one report, a cold and a warm phase, both compared with the baseline
demo-warm: $(STAMP)
	$(BIN)/restartlab run scenarios/warm.yaml

# one failure of each kind (kill, node, rank, hang, preempt) and the report's per-kind table
demo-faults: $(STAMP)
	$(BIN)/restartlab run scenarios/faults.yaml

# recovery strategies side by side (scenarios/strategies.yaml): restart cold, restart warm and torchft
# replica groups under the same failures, one report; needs torchft (setup.cfg [torchft])
demo-strategies: $(STAMP)
	$(BIN)/pip install -q -c $(VENV)/torch-constraint.txt -e '.[torchft]' 2>/dev/null || \
	  ($(BIN)/python -c 'import torch; print("torch==" + torch.__version__)' > $(VENV)/torch-constraint.txt && \
	   $(BIN)/pip install -q -c $(VENV)/torch-constraint.txt -e '.[torchft]')
	$(BIN)/restartlab run scenarios/strategies.yaml

# the frameworks of the "your trainer" tests (setup.cfg [frameworks], [transformers], [deepspeed]) and
# torchft (setup.cfg [torchft]:
# the torchft phases), with the torch already there
# held as it is (a constraint: never a second torch download)
FRAMEWORKS := $(VENV)/.frameworks
$(FRAMEWORKS): $(STAMP) setup.cfg
	$(BIN)/python -c 'import torch; print("torch==" + torch.__version__)' > $(VENV)/torch-constraint.txt
	$(BIN)/pip install -q -c $(VENV)/torch-constraint.txt -e '.[frameworks,torchft,transformers,deepspeed]'
	@# DeepSpeed on CPU builds a communication op with g++ at its first init (tests/conftest.py keeps
	@# it in the venv's own TORCH_EXTENSIONS_DIR): built here once, not inside the first test's launch.
	@# With the PATH the tests have (the venv's bin first): torch builds it with the first ninja on PATH,
	@# and a build by the venv's ninja (1.13) and one by Debian's (1.11) each rebuild the other's (60 CPU-s)
	PATH=$(CURDIR)/$(BIN):$$PATH TORCH_EXTENSIONS_DIR=$(CURDIR)/$(VENV)/torch-extensions DS_ACCELERATOR=cpu $(BIN)/python -c \
	  'from deepspeed.ops.op_builder.cpu import ShareMemCommBuilder as B; B().load()' >/dev/null 2>&1 \
	  || echo "make: DeepSpeed's CPU op not prebuilt: the first DeepSpeed launch builds it"
	touch $(FRAMEWORKS)

# ezpz 0.26.1 (saforem2/ezpz at 1229a17: the seed's own program) from the fixture's source
# tarball, --no-deps (its own list wants a git URL), then what it needs (setup.cfg [ezpz]); without
# the fixture this says so and the ezpz tests skip (fail under RESTARTLAB_REQUIRE_ALL=1)
EZPZ_SRC ?= ../shared/fixtures/ezpz/ezpz-0.26.1-1229a17-src.tgz
EZPZ     := $(VENV)/.ezpz
$(EZPZ): $(FRAMEWORKS) setup.cfg
	@if [ -f '$(EZPZ_SRC)' ]; then \
	  rm -rf $(VENV)/src/ezpz && mkdir -p $(VENV)/src/ezpz && tar -xzf '$(EZPZ_SRC)' -C $(VENV)/src/ezpz && \
	  $(BIN)/pip install -q -c $(VENV)/torch-constraint.txt -e '.[ezpz]' && \
	  $(BIN)/pip install -q --no-deps $(VENV)/src/ezpz/ezpz-* && touch $(EZPZ); \
	else echo "make: no $(EZPZ_SRC): ezpz not installed (its tests skip)"; fi

# the suite on WORKERS pytest-xdist workers (WORKERS=0: one process); what shares a cluster or a
# module fixture stays on one worker (tests/conftest.py); tests marked `alone` run after, by
# themselves; the slowest tests are printed (--durations), then the test time by file (tests/durations.py,
# from the JUnit reports in build/test-times)
# 3: the suite waits on its ranks more than it computes; a fresh-clone .ci/run took 1296 s with 2
# workers and 1110 s with 3 on this 2-core machine (2026-12-05; the soak runs with them too)
WORKERS ?= 3
TIMES   := build/test-times
# the files that hold a test marked alone: the run after the rest collects those, not the whole
# suite again (about 10 s before its one test began, 2026-12-07); `=`: grep runs only when a recipe uses it
ALONE    = $(shell grep -l 'pytest.mark.alone' tests/test_*.py)
# the checkout's own modules compiled once, before the suite starts its ~5,000 Python processes:
# where PYTHONDONTWRITEBYTECODE is set (this machine's environment sets it), no process caches
# what it compiles, and each would compile every restartlab and trainer module it imports again
# (measured: 0.08 CPU-s more for each restartlab command, 2026-12-07). Python still reads the
# cache the variable stops it writing; a module edited later is compiled afresh (its time is in it)
PYC = $(BIN)/python -m compileall -q restartlab trainer tests >/dev/null
test: $(STAMP) $(FRAMEWORKS) $(EZPZ)
	rm -rf $(TIMES)
	$(PYC)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -n $(WORKERS) --dist loadgroup -m "not alone" \
	  --durations=25 --junitxml=$(TIMES)/parallel.xml $(PYTEST_ARGS) tests
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -m alone --durations=10 --junitxml=$(TIMES)/alone.xml \
	  $(PYTEST_ARGS) $(or $(ALONE),tests); rc=$$?; [ $$rc = 0 ] || [ $$rc = 5 ]  # 5: no test is marked alone
	$(BIN)/python -m tests.durations $(TIMES)/*.xml

# the edit-test loop: unit, recorded-output and single-process tests (no ranks, no Slurm, no slow
# job-script runs); make test stays the whole suite and is what CI runs
test-fast: $(STAMP)
	$(PYC)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m pytest -q -n $(WORKERS) --dist loadgroup \
	  -m "not multirank and not slurm and not slow" $(PYTEST_ARGS) tests

# the multi-rank and end-to-end tiers RUNS times beside LOAD busy processes, every failure recorded
# with its seed, experiment directories and stacks (build/soak/failures.jsonl), then a table of
# failures by test (tests/soak.py); SOAK_K: only the tests matching a pytest -k expression
RUNS ?= 2
LOAD ?= 2
SOAK_K ?=
soak: $(STAMP) $(FRAMEWORKS) $(EZPZ)
	$(PYC)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m tests.soak --runs $(RUNS) --load $(LOAD) --workers $(WORKERS) \
	  $(if $(SOAK_K),-k '$(SOAK_K)')

bench: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python bench/run_all.py $(if $(PUBLISH),--publish)

# kill anywhere through `restartlab fuzz`: the bundled trainer, its sync then its async phase, N
# kills each (a share of them inside saves made while a complete checkpoint exists), every restart
# checked against the baseline (the loss at every step, the final parameters); the run's length
# grows with N so that every kill lands in a live attempt
SEED    ?= 0
fuzz: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/restartlab fuzz scenarios/fuzz.yaml --phase sync --kills $(N) \
	  --seed $(SEED) --after-complete --set trainer.train_iters=$$(( 3 * $(N) + 24 ))
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/restartlab fuzz scenarios/fuzz.yaml --phase async --kills $(N) \
	  --seed $(SEED) --after-complete --set trainer.train_iters=$$(( 3 * $(N) + 24 ))

# the trainer's own kill-anywhere (tests/fuzz.py: four layouts, --keep, the raw format); CI runs a
# short version in make test
fuzz-trainer: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m tests.fuzz --kills $(N)

render: $(STAMP)
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/python -m restartlab.cli render-all build/rendered

# the two reference experiments on Sunspot, charged to your project: make sunspot-expt ACCOUNT=<project>
# (no default: a job charged to a project that is not yours is refused here, not by the server);
# each submit runs restartlab preflight first and submits nothing on an error
sunspot-expt: $(STAMP)
	@test -n "$(ACCOUNT)" || { echo "make sunspot-expt: ACCOUNT=<your ALCF project> is required: the jobs are charged to it (nothing submitted)" >&2; exit 2; }
	$(BIN)/restartlab submit scenarios/debug.yaml --set extends=systems/sunspot.yaml --set job.account=$(ACCOUNT)
	$(BIN)/restartlab submit scenarios/agpt2b.yaml --set extends=systems/sunspot.yaml --set job.account=$(ACCOUNT)

# agpt-2b on Aurora or Polaris (scenarios/aurora/agpt2b.yaml, scenarios/polaris/agpt2b.yaml), charged
# to your project: make aurora-expt ACCOUNT=<project>. The smoke job first, in debug (the experiment's
# 2 nodes for 15 minutes), then the experiment in capacity, submitted from here once the smoke job's
# report says READY (submit --after waits in this shell: a one-job-per-user queue never holds both)
aurora-expt polaris-expt: $(STAMP)
	@test -n "$(ACCOUNT)" || { echo "make $@: ACCOUNT=<your ALCF project> is required: the jobs are charged to it (nothing submitted)" >&2; exit 2; }
	@out=$$($(BIN)/restartlab submit --smoke scenarios/$(@:-expt=)/agpt2b.yaml --set job.account=$(ACCOUNT) \
	  --set job.queue=debug) || { echo "make $@: the smoke job was not submitted: the experiment is not either" >&2; exit 2; }; \
	echo "$$out"; smoke=$$(echo "$$out" | sed -n 's/^experiment //p'); \
	echo "make $@: the experiment is submitted once $$smoke says READY (Ctrl-C: nothing more is submitted; later: restartlab submit scenarios/$(@:-expt=)/agpt2b.yaml --set job.account=$(ACCOUNT) --after $$smoke)"; \
	$(BIN)/restartlab submit scenarios/$(@:-expt=)/agpt2b.yaml --set job.account=$(ACCOUNT) --after "$$smoke"

clean:
	rm -rf build expt .pytest_cache

# the documentation site: the generated reference pages must be current (regenerate with
# `$(BIN)/python -m restartlab.reference docs/reference`), then MkDocs in strict mode (a broken
# link fails) into build/site
$(DOCSTAMP): $(STAMP) setup.cfg
	$(BIN)/pip install -q -e '.[docs]'
	touch $(DOCSTAMP)

docs: $(DOCSTAMP)
	$(BIN)/python -m restartlab.reference docs/reference --check
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet
