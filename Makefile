# `make demo` installs what the offline demo needs (agentcell alone); every other target
# adds the dev and Ray extras the tests and lint use.
# The virtualenv's Python: the newest CPython >= 3.11 here (scripts/newest_python looks on
# PATH and in pyenv's and uv's installs); `make PYTHON=python3.12 VENV=.venv312 test` picks
# another, in a folder of its own.
# (Looked up once, and only by the targets that make or check the virtualenv.)
PYTHON ?= $(eval PYTHON := $(shell scripts/newest_python))$(PYTHON)
VENV ?= .venv
BIN := $(VENV)/bin
BASE_STAMP := $(VENV)/.installed-base
STAMP := $(VENV)/.installed

.PHONY: demo test soak smoke lint bench bench-full fuzz mutants clean .typecheck .venv-python .bytecode \
	bash-tables

$(BASE_STAMP): pyproject.toml
	test -d $(VENV) || scripts/newest_python --venv $(VENV) $(PYTHON)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e .
	touch $(BASE_STAMP)

# Ray may have no wheel for the newest Python: then the Ray tests skip (one line each).
$(STAMP): pyproject.toml $(BASE_STAMP)
	$(BIN)/pip install --quiet -e '.[dev,ray]' 2>/dev/null || { \
	    echo "the ray extra does not install on $$($(BIN)/python -V): the Ray tests skip"; \
	    $(BIN)/pip install --quiet -e '.[dev]'; }
	touch $(STAMP)

# An existing virtualenv is kept; one line says so when it runs another Python than the pick.
.venv-python:
	@scripts/newest_python --check $(VENV) $(PYTHON)

# The editable install's modules as bytecode, refreshed where a source changed: with
# PYTHONDONTWRITEBYTECODE=1 in the environment (as on some CI machines) Python never
# writes it itself, and every process — each CLI run, each fork server — compiled the
# ~150 modules again (about 0.4 s of a 1.1 s start on 2 cores). Python still reads it.
.bytecode:
	@$(BIN)/python -m compileall -q -j 0 agentcell protocol worker orchestrator bench tests

demo: .venv-python $(BASE_STAMP) .bytecode
	$(BIN)/agentcell demo

test: .venv-python $(STAMP) .bytecode
	$(BIN)/python -m pytest -m "not soak" --durations=30

# The soak tests (thousands of sub-agents, minutes each): CI runs them after `make test`.
soak: .venv-python $(STAMP) .bytecode
	$(BIN)/python -m pytest -m soak

# About a minute of tests across the layers (the files tests/smoke.txt names): CI runs it on 3.11.
smoke: .venv-python $(STAMP) .bytecode
	$(BIN)/python -m pytest $$(sed '/^#/d' tests/smoke.txt)

lint: $(STAMP)
	$(BIN)/ruff check agentcell protocol worker orchestrator tests bench fuzz
	$(BIN)/ruff format --check agentcell protocol worker orchestrator tests bench fuzz
	$(MAKE) --no-print-directory .typecheck
	$(BIN)/mypy

# mypy reads the installed layout (agentcell.protocol is protocol/, ...) from symlinks.
.typecheck:
	mkdir -p .typecheck/agentcell
	for f in agentcell/*.py; do ln -sfn ../../$$f .typecheck/$$f; done
	for d in protocol worker orchestrator; do ln -sfn ../../$$d .typecheck/agentcell/$$d; done

# bashlex's parse tables, built once into worker/rules/_bash_tables.py, which
# worker/rules/_bashlex_fast.py reads instead of building them at every import: after
# changing bashlex, run this and commit the file (tests/worker/rules/test_bashlex_tables.py says when).
bash-tables: .venv-python $(BASE_STAMP)
	$(BIN)/python -m agentcell.worker.rules._bashlex_fast

# Coverage-guided fuzzing of the frame decoder for a bounded time (atheris).
FUZZ_SECONDS ?= 60
fuzz: $(STAMP)
	$(BIN)/pip install --quiet atheris
	$(BIN)/python fuzz/fuzz_frames.py -max_total_time=$(FUZZ_SECONDS)

# Mutation testing of the security modules, in place, one module at a time (see
# mutants/run.py; MUTANTS="frame-mac trust" for some). CPU-heavy: minutes per module.
MUTANTS_STAMP := $(VENV)/.mutants-installed
MUTANTS ?=

$(MUTANTS_STAMP): pyproject.toml $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,ray,mutants]'
	touch $(MUTANTS_STAMP)

mutants: $(MUTANTS_STAMP)
	$(BIN)/python mutants/run.py $(MUTANTS)

BENCH_STAMP := $(VENV)/.bench-installed

$(BENCH_STAMP): pyproject.toml $(STAMP)
	$(BIN)/pip install --quiet -e '.[dev,bench]'
	touch $(BENCH_STAMP)

bench: $(BENCH_STAMP) .bytecode
	$(BIN)/python -m bench.run --quick

bench-full: $(BENCH_STAMP) .bytecode
	$(BIN)/python -m bench.run --full

clean:
	rm -rf $(VENV) .typecheck build *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
