# Two commands do all set-up on a fresh machine (Python 3.11 with pip and venv):
#   make demo   create .venv, install loops with the embedded model, run a Creator–Critic–Iterator loop
#   make test   install the test tools too, lint, run the whole test suite, and execute every notebook
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
DEMO_REQUIREMENTS ?= Write a two-sentence product description for a reusable water bottle.

.PHONY: demo test clean

demo: $(VENV)/.installed-local
	@# Exit code 1 means the loop ran and stopped without approval (likely with a 135M model): still a good demo.
	$(BIN)/loops refine "$(DEMO_REQUIREMENTS)" --max-iterations 2 --trace demo-trace.jsonl || [ $$? -eq 1 ]

test: $(VENV)/.installed-dev
	$(BIN)/ruff check loops signatures sexp optimize benchmarks tests
	$(BIN)/python -m pytest
	$(BIN)/python -m pytest --nbmake notebooks

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# llama-cpp-python compiles from source the first time (about 8-12 minutes on 2 cores); pip caches the wheel.
# PyPI has no portable CPU wheel of it, and no other wheel that serves as well (README.md, "Why compile").
# A portable build (AVX2, not -march=native): a native build on a VM whose CPU reports AMX it cannot run
# dies with SIGILL at the first generation, and a cached wheel may be reused on another machine.
export CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON
$(VENV)/.installed-local: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[local]'
	touch $@

$(VENV)/.installed-dev: pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[local,dev,server,optimize,ray,notebooks]'
	touch $@ $(VENV)/.installed-local

clean:
	rm -rf $(VENV) demo-trace.jsonl
