# hangscope: every target sets up what it needs on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   ?= sample_dumps/chain_tp_dp_w8
OUT    ?= out

.PHONY: demo test fuzz browser torch bench accuracy samples lint clean help

help:
	@echo "make demo   - analyze a bundled sample dump set (and write its HTML report)"
	@echo "make test   - run the test suite"
	@echo "make bench  - speed and memory benchmarks"
	@echo "make fuzz   - the property-based fuzzer of the loader, long run (FUZZ_EXAMPLES=2000)"
	@echo "make accuracy - culprit accuracy over simulated jobs of every fault"
	@echo "make samples- re-record the gloo sample dumps (installs torch in .venv-torch)"

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	@echo "$$ hangscope analyze $(DEMO)"
	@$(BIN)/hangscope analyze $(DEMO); code=$$?; test $$code -le 1
	@mkdir -p $(OUT)
	@$(BIN)/hangscope report $(DEMO) -o $(OUT)/report.html -q; code=$$?; test $$code -le 1

test: $(STAMP) browser torch
	$(BIN)/python -m pytest -q

# A CPU build of torch in its own environment, for recording real jobs (the live recording
# test, make samples) and for fr_trace in the benchmark; the analyzer's environment stays
# without torch. When it cannot be installed, those parts skip and say why.
torch:
	@test -x .venv-torch/bin/python || $(PYTHON) -m venv .venv-torch || true
	@.venv-torch/bin/python -c "import torch" 2>/dev/null || \
	  .venv-torch/bin/python -m pip install --quiet torch==2.13.0 numpy || \
	  echo "torch 2.13.0 could not be installed: recording and fr_trace will be skipped"

# Debian's Chromium for the browser tests and static images (installed only when absent;
# without root the browser tests skip and say why).
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else echo "chromium missing and not root: browser tests will be skipped"; fi; \
	fi

# Scale benchmark (BENCH_ARGS="--sizes 64,512 --with-16k" ...); torch for fr_trace goes into
# .venv-torch, and fr_trace is skipped with a note when it cannot be installed.
BENCH_ARGS ?=
bench: $(STAMP) torch
	$(BIN)/python bench/run_bench.py $(BENCH_ARGS)

# The loader fuzzer of tests/test_fuzz.py with fresh randomness and many more examples than
# make test runs, and the cost of each kind of hostile input.
FUZZ_EXAMPLES ?= 2000
fuzz: $(STAMP)
	HANGSCOPE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -p no:cacheprovider tests/test_fuzz.py
	$(BIN)/python bench/hostile_input.py

# Culprit accuracy over simulated jobs (topologies x faults x seeds); prints the misses.
accuracy: $(STAMP)
	$(BIN)/python bench/accuracy.py

samples: torch
	.venv-torch/bin/python -m tools.record_gloo --out sample_dumps

clean:
	rm -rf $(VENV) $(OUT) .pytest_cache .hypothesis
