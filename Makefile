# hangscope: every target sets up what it needs on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   ?= sample_dumps/chain_tp_dp_w8
# make test runs the test files on this many processes (pytest-xdist), a file's tests
# together (its module fixtures, a live job or a browser, are made once): the cores, up to 4.
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); [ $$n -gt 4 ] && n=4; echo $$n)
OUT    ?= out

.PHONY: demo test test-fast browser torch bench bench-capture accuracy accuracy-real accuracy-subsets accuracy-lost-one accuracy-world corpus samples samples-hook fuzz fuzz-native fuzz-loader lint golden clean help

help:
	@echo "make demo   - analyze a bundled sample dump set (and write its HTML report)"
	@echo "make test   - the full gate: lint, 30 s of native fuzzing, every test (under 10 minutes)"
	@echo "make test-fast - the edit loop: unit tests and the layout and docs checks (no installs of torch or Chromium)"
	@echo "make bench  - speed and memory benchmarks"
	@echo "make lint   - ruff over the repository, mypy over analyzer/"
	@echo "make golden - rewrite tests/golden/ (what analyze and graph print for every sample) after a reviewed change"
	@echo "make fuzz   - both fuzzers below, long runs"
	@echo "make fuzz-loader - the property-based fuzzer of the loader (FUZZ_EXAMPLES=2000)"
	@echo "make accuracy - culprit accuracy over simulated jobs of every fault"
	@echo "make accuracy-real - accuracy over the corpus of real recorded hangs (corpus/cases)"
	@echo "make accuracy-subsets - the same with one block of ranks' files kept (a subset of the files)"
	@echo "make accuracy-lost-one - the same with one file lost (a rank that is no culprit)"
	@echo "make accuracy-world - the same with the job's world size given (--world-size N)"
	@echo "make corpus - record more corpus cases (CORPUS_213=N CORPUS_215=M; torch in .venv-torch*)"
	@echo "make bench-capture - step time of a gloo job with and without analyzer.capture"
	@echo "make fuzz-native - fuzz the compiled reader's C core (libFuzzer, ASan, UBSan; FUZZ_SECONDS=300)"
	@echo "make samples- re-record the gloo sample dumps (installs torch in .venv-torch)"
	@echo "make samples-hook - re-record the torch 2.15 nccl2/nccl-lazy hook samples (torch 2.15 in .venv-torch215)"

$(STAMP): pyproject.toml setup.py $(wildcard analyzer/load/_fastpickle/*.c analyzer/load/_fastpickle/*.h analyzer/kernels/_groupkeys/*.c)
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	$(BIN)/python -m compileall -q analyzer  # the bytecode a wheel's install writes (editable installs do not)
	touch $(STAMP)

# The demo installs only what a user's pip install does (no dev extra), in its own venv.
DEMO_VENV := .venv-demo
$(DEMO_VENV)/.installed: pyproject.toml setup.py
	test -x $(DEMO_VENV)/bin/python || $(PYTHON) -m venv $(DEMO_VENV)
	$(DEMO_VENV)/bin/python -m pip install --quiet .
	touch $@

demo: $(DEMO_VENV)/.installed
	@echo "$$ hangscope analyze $(DEMO)"
	@$(DEMO_VENV)/bin/hangscope analyze $(DEMO); code=$$?; test $$code -le 1
	@mkdir -p $(OUT)
	@$(DEMO_VENV)/bin/hangscope report $(DEMO) -o $(OUT)/report.html -q

test: $(STAMP) browser torch
	@$(MAKE) --no-print-directory lint
	@$(MAKE) --no-print-directory fuzz-native FUZZ_SECONDS=30
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# The edit loop: tests/unit mirrors analyzer/ (tests/unit/match/ for analyzer/match/), plus
# the repository's own checks. Scenarios (samples, goldens, adversarial input) and
# integration tests (browser, notebooks, Dask, live torch jobs) run in make test.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -x tests/unit tests/test_layout.py tests/test_docs.py

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

# The golden outputs of tests/scenarios/test_golden.py: text (with exit code), JSON and graph text of
# every sample and shared fixture, written from the code as it is now. Review the diff
# (git diff tests/golden/) and say in the commit why what users see changed.
golden: $(STAMP)
	$(BIN)/python -m tests.scenarios.test_golden

# libFuzzer over the C core of the compiled reader, with AddressSanitizer and
# UndefinedBehaviorSanitizer. Seeds: the sample dumps, also written with pickle protocols 3 to 5.
# clang is installed when absent (as root); without it the run is skipped and says so.
FUZZ_SECONDS ?= 300
FUZZ_DIR := build/fuzz
fuzz-native: $(STAMP)
	@command -v clang >/dev/null 2>&1 || { test "$$(id -u)" = 0 && \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq clang >/dev/null; } || true
	@if ! command -v clang >/dev/null 2>&1; then \
	  echo "fuzz: SKIPPED: clang is not installed and cannot be (not root); the native fuzz run did not happen"; \
	else \
	  mkdir -p $(FUZZ_DIR)/corpus $(FUZZ_DIR)/seeds && \
	  clang -g -O1 -std=c99 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	    -I analyzer/load/_fastpickle fuzz/fuzz_reader.c analyzer/load/_fastpickle/core.c -o $(FUZZ_DIR)/fuzz_reader && \
	  $(BIN)/python fuzz/make_seeds.py $(FUZZ_DIR)/seeds && \
	  echo "fuzz: $(FUZZ_SECONDS) s of libFuzzer over analyzer/load/_fastpickle/core.c" && \
	  $(FUZZ_DIR)/fuzz_reader -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=2048 -timeout=10 \
	    -max_len=65536 -dict=fuzz/pickle.dict -artifact_prefix=$(FUZZ_DIR)/ -print_final_stats=1 \
	    $(FUZZ_DIR)/corpus $(FUZZ_DIR)/seeds 2>$(FUZZ_DIR)/log.txt; code=$$?; \
	  grep -E "^(Done |stat::peak_rss_mb)" $(FUZZ_DIR)/log.txt; \
	  if [ $$code -ne 0 ]; then tail -40 $(FUZZ_DIR)/log.txt; echo "fuzz: FAILED (see $(FUZZ_DIR)/log.txt)"; exit 1; fi; \
	  echo "fuzz: no crash, leak, timeout or undefined behaviour"; \
	fi

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

# What analyzer.capture costs a training job: a 2-rank gloo job with and without its watcher
# (torch from .venv-torch); prints the step times and the overhead.
bench-capture: torch
	.venv-torch/bin/python bench/capture_overhead.py $(BENCH_ARGS)

# The loader fuzzer of tests/scenarios/test_fuzz.py with fresh randomness and many more examples than
# make test runs, and the cost of each kind of hostile input.
FUZZ_EXAMPLES ?= 2000
fuzz-loader: $(STAMP)
	HANGSCOPE_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q -p no:cacheprovider tests/scenarios/test_fuzz.py
	$(BIN)/python bench/hostile_input.py

fuzz: fuzz-native fuzz-loader

# Culprit accuracy over simulated jobs (topologies x faults x seeds); prints the misses.
accuracy: $(STAMP)
	$(BIN)/python bench/accuracy.py

# Accuracy over the corpus of real recorded hangs: a table per fault class and dialect, the
# wrong cases, and last 'real corpus: N cases (K fault classes), R right, W wrong, U unsure'.
accuracy-real: $(STAMP)
	$(BIN)/python bench/accuracy_real.py

# The same cases with one block of ranks' files kept (one host's copied, another's lost):
# last line 'real corpus subsets: N variants of M cases, R right, W wrong (C confident), U unsure'.
accuracy-subsets: $(STAMP)
	$(BIN)/python bench/accuracy_real.py --subsets

# The same with one file lost: each case without the file of one rank that is no culprit.
accuracy-lost-one: $(STAMP)
	$(BIN)/python bench/accuracy_real.py --lost-one

# The same with the job's world size given, as a user who knows it types --world-size N:
# last line 'real corpus with the world size given: N cases (K fault classes), R right, ...'.
accuracy-world: $(STAMP)
	$(BIN)/python bench/accuracy_real.py --world-given

# Record more corpus cases (the next seeds) with torch 2.13 (gloo) and torch 2.15 (gloo and the
# recorder hook's nccl2 / nccl-lazy); one case takes 10-40 s on two cores (30-60 s at 12 and 16
# ranks). CORPUS_TAG=_rounds (or _late, _wide...) records only the seeds whose case draws that
# name tag (the others are skipped).
CORPUS_213 ?= 10
CORPUS_215 ?= 10
CORPUS_TAG ?=
CORPUS_ONLY = $(if $(CORPUS_TAG),--only-tag $(CORPUS_TAG))
corpus: torch
	.venv-torch/bin/python -m tools.corpus.generate --out corpus/cases --count $(CORPUS_213) $(CORPUS_ONLY)
	@if [ "$(CORPUS_215)" != 0 ]; then \
	  test -x $(TORCH215) || { echo "no torch 2.15 at $(TORCH215) (set TORCH215=...)"; exit 2; }; \
	  $(TORCH215) -m tools.corpus.generate --out corpus/cases --count $(CORPUS_215) $(CORPUS_ONLY); fi

samples: torch
	.venv-torch/bin/python -m tools.record_gloo --out sample_dumps

# torch 2.15's recorder hook (nccl2, nccl-lazy) over a Python backend forwarding to gloo.
# torch 2.15 is a 5 GB install: it is not installed here, point TORCH215 at its Python
# (e.g. a venv made with PIP_CONFIG_FILE=/dev/null pip install torch==2.15.0).
TORCH215 ?= .venv-torch215/bin/python
samples-hook:
	@test -x $(TORCH215) || { echo "no torch 2.15 at $(TORCH215) (set TORCH215=...)"; exit 2; }
	$(TORCH215) -m tools.record_hook --out sample_dumps

clean:
	rm -rf $(VENV) $(DEMO_VENV) $(OUT) .pytest_cache .hypothesis
