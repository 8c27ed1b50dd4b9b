# Two commands do all set-up on a fresh machine (Python 3.11 with pip and venv):
#   make demo   create .venv, install loops with the embedded model, run a Creator–Critic–Iterator loop held to checks
#   make test   install the test tools too, lint, run the whole test suite, and execute every notebook
# Both install exactly the versions in the lock (requirements.lock, requirements-local.lock: every direct and
# transitive dependency, pinned with hashes for Python 3.11 on Linux x86-64), so a fresh clone runs what was tested.
# Upgrading is deliberate, and neither target below is part of CI (docs/dependencies.md says when to run them):
#   make lock          refresh both locks to the newest releases pyproject.toml's ranges allow (uv pip compile)
#   make test-latest   run the suite against the newest releases, without the lock, and report what changed and broke
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
LOCK := requirements.lock
LOCK_LOCAL := requirements-local.lock
# The demo's request and the checks its drafts are held to (docs/checks.md): the embedded model meets them within
# two iterations (the loop draws several candidates, each checked for free, and shows which checks each held).
# Chosen among three wordings of a writing-benchmark-like task (README.md, "A short session"); "a two-sentence
# product description for a reusable water bottle" no longer met them in two iterations once the engine read
# every prompt whole (loops.lm.prefix_cache), which changed its seeded samples.
DEMO_REQUIREMENTS ?= Write a two-sentence description of a reusable water bottle.
DEMO_CHECKS ?= --check sentences=2 --check include=BPA-free --check max-words=40
EXTRAS := local,dev,server,optimize,ray,notebooks,tracing,tracing-e2e
comma := ,

.PHONY: demo test lock test-latest clean

demo: $(VENV)/.installed-local
	@# Exit code 1 means the loop ran and stopped without approval: still a demo of what the loop did.
	$(BIN)/loops refine "$(DEMO_REQUIREMENTS)" $(DEMO_CHECKS) --max-iterations 2 --trace demo-trace.jsonl || [ $$? -eq 1 ]

test: $(VENV)/.installed-dev
	$(BIN)/ruff check loops signatures sexp optimize benchmarks tests
	$(BIN)/python -m pytest
	$(BIN)/python -m pytest --nbmake notebooks

# The venv's own pip first becomes the lock's, hash-checked like every other package: a new venv's bundled pip
# (23.2) took 331-356 s to install the lock here, the lock's pip 178 s (a loaded 2-core machine, wheels cached;
# docs/dependencies.md).
$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	awk '/^pip==/ {found = 1; print; next} found && /^[^ ]/ {exit} found' $(LOCK_LOCAL) > $(VENV)/pip.lock
	$(BIN)/python -m pip install --quiet --require-hashes -r $(VENV)/pip.lock

# llama-cpp-python compiles from source the first time (about 8-12 minutes on 2 cores); pip caches the wheel.
# PyPI has no portable CPU wheel of it, and no other wheel that serves as well (README.md, "Why compile").
# A portable build (AVX2, not -march=native): a native build on a VM whose CPU reports AMX it cannot run
# dies with SIGILL at the first generation, and a cached wheel may be reused on another machine.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
# The lock's pinned, hash-checked packages first; then loops itself, editable, with nothing more (pip check
# says whether the lock still satisfies pyproject.toml).
define install_locked
	$(BIN)/python -m pip install --quiet --require-hashes -r $(1)
	$(BIN)/python -m pip install --quiet --no-deps -e .
	$(BIN)/python -m pip check
endef

$(VENV)/.installed-local: pyproject.toml $(LOCK_LOCAL) | $(BIN)/python
	$(call install_locked,$(LOCK_LOCAL))
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(LOCK) | $(BIN)/python
	$(call install_locked,$(LOCK))
	touch $@ $(VENV)/.installed-local

# The full lock is made first; the demo's lock takes its versions from it (-c), so the two never disagree.
# LOCK_UPGRADE= (empty) keeps every pin that still fits and only resolves what changed in pyproject.toml.
LOCK_UPGRADE ?= --upgrade
UV_COMPILE = $(BIN)/uv pip compile pyproject.toml --quiet --generate-hashes --python-version 3.11 \
	--python-platform x86_64-manylinux_2_28 --no-header
lock: $(VENV)/.installed-dev
	$(UV_COMPILE) $(LOCK_UPGRADE) $(foreach extra,$(subst $(comma), ,$(EXTRAS)),--extra $(extra)) -o $(LOCK)
	$(UV_COMPILE) --extra local -c $(LOCK) -o $(LOCK_LOCAL)
	@echo "Locked: $$(grep -c '^[a-z0-9]' $(LOCK)) packages in $(LOCK), $$(grep -c '^[a-z0-9]' $(LOCK_LOCAL)) in $(LOCK_LOCAL). Run make test before committing them."

# A throwaway environment with the newest releases pyproject.toml allows; the lock and .venv are left alone.
LATEST := .venv-latest
test-latest:
	rm -rf $(LATEST)
	$(PYTHON) -m venv $(LATEST)
	$(LATEST)/bin/python -m pip install --quiet --upgrade pip
	$(LATEST)/bin/python -m pip install --quiet --upgrade --upgrade-strategy eager -e '.[$(EXTRAS)]'
	$(LATEST)/bin/python .ci/lock_drift.py $(LOCK) --tests "$(LATEST)/bin/python -m pytest -q -p no:cacheprovider -rfE"


clean:
	rm -rf $(VENV) $(LATEST) demo-trace.jsonl
