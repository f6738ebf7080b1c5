# The course's commands. Each creates .venv and installs what it needs on first use.
#   make test      run the test suite (what CI runs)
#   make nightly   execute every notebook headless and write a report under build/nightly/ (course nightly)
#   make lab       start JupyterLab on the course
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test nightly lab bench clean-venv

# torch is installed first with its exact pin, so no resolver ever picks another build:
# on a CPU machine the pin takes the CPU wheel, on a GPU node the CUDA build from PyPI.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q torch==2.13.0
	$(BIN)/python -m pip install -q -e '.[course,test]'
	@command -v bwrap >/dev/null || { if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then apt-get install -y -q bubblewrap; else echo "course grade needs bubblewrap: sudo apt-get install bubblewrap"; fi; }
	touch $@

test: $(STAMP)
	$(BIN)/python -m pytest -q

nightly: $(STAMP)
	$(BIN)/course nightly $(NIGHTLY_ARGS)

lab: $(STAMP)
	$(BIN)/jupyter lab --notebook-dir=. --LabApp.default_url=/lab/tree/notebooks/00_start_here.ipynb $(if $(filter 0,$(shell id -u)),--allow-root,) notebooks/00_start_here.ipynb

bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python bench/launch.py

# On a GPU node: GPU-marked tests, single-GPU benchmarks and NCCL all_reduce, appended as a dated
# entry to docs/gpu-results.md. Without a GPU: one line, exit 0, nothing written.
.PHONY: gpu-check
gpu-check: $(STAMP)
	@$(BIN)/python bench/gpu_checks.py

clean-venv:
	rm -rf $(VENV)
