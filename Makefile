# Every target sets up what it needs: a fresh clone runs `make demo` or `make test` directly.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# mlc-chakra (the reference, test-only) is installed without its heavy notebook dependencies:
# the tests use only its schema bindings, framing helpers and text converter.
REFERENCE := mlc-chakra==1.0.0

.PHONY: install demo test test-all bench fuzz proto clean

install: $(STAMP)

# setup.py builds the compiled encoders (*.c): a changed one is rebuilt by the next target.
$(STAMP): pyproject.toml setup.py $(wildcard chakra_tools/*/*.c)
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# The CPU build from this machine's wheel cache; the extra's range is then already met.
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[capture,onnx,dask,test,dev,frameworks,infragraph]'
	$(BIN)/python -m pip install -q --no-deps $(REFERENCE)
	touch $(STAMP)

demo: install
	PATH=$(CURDIR)/$(BIN):$$PATH bash examples/demo.sh

# Headless Chromium (Debian package) renders the HTML report in the visualize tests.
test: install
	sh tests/visualize/ensure_chromium.sh
	$(BIN)/python -m pytest -q -n 2 -m "not slow" tests

test-all: install
	sh tests/visualize/ensure_chromium.sh
	$(BIN)/python -m pytest -q -n 2 tests

bench: install
	$(BIN)/python bench/run_all.py

# The long fuzz run: 10,000 mutated inputs of every kind through the commands (docs/robustness.md);
# `make test` runs a short one. Prints outcomes by input kind and each failure with a reproducer.
FUZZ_SEED ?= 1
FUZZ_COUNT ?= 10000
fuzz: install
	$(BIN)/python bench/fuzz.py --seed $(FUZZ_SEED) --count $(FUZZ_COUNT) --keep out/fuzz --json out/fuzz/report.json

proto: install
	$(BIN)/python -m grpc_tools.protoc -Iproto --python_out=chakra_tools/core/schema \
		--pyi_out=chakra_tools/core/schema proto/et_def.proto

clean:
	rm -rf $(VENV) build *.egg-info
