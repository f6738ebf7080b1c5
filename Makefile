# The course's commands. Each creates .venv and installs what it needs on first use.
#   make test      run the test suite (what CI runs)
#   make nightly   execute every notebook headless and write a report under build/nightly/ (course nightly)
#   make lab       start JupyterLab on the course (PORT=8888 IP=127.0.0.1 BROWSER=0 for a remote node)
#   make student   build the students' copy in build/student
#   make hub       start the course's JupyterHub on a shared node (as root), from its own environment
#   make site      the chapters as a website in build/site/ from the last complete nightly run (course site)
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: test nightly lab student hub bench clean-venv

# torch is installed first with its exact pin, so no resolver ever picks another build. On a
# GPU node (nvidia-smi answers) the pin comes from PyTorch's index for the newest CUDA the
# driver runs (labutils/devices/cuda_build.py; the plain pin if that index lacks it); on a CPU
# machine the plain pin takes the CPU wheel.
define install_torch
index="$$($(1)/python labutils/devices/cuda_build.py --index-url)"; \
if [ -n "$$index" ]; then $(1)/python -m pip install -q torch==2.13.0 --index-url "$$index" || $(1)/python -m pip install -q torch==2.13.0; \
else $(1)/python -m pip install -q torch==2.13.0; fi
endef

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(call install_torch,$(BIN))
	$(BIN)/python -m pip install -q -e '.[course,test]'
	@command -v bwrap >/dev/null || { if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then apt-get install -y -q bubblewrap; else echo "course grade needs bubblewrap: sudo apt-get install bubblewrap"; fi; }
	touch $@

# Tests run on TEST_WORKERS parallel workers, more than a 2-core machine's cores: most tests wait on
# ranks, kernels, servers and browsers in subprocesses, and a third worker keeps both cores busy while
# two wait (the README gives the times). Each file, the chapters' QUICK run, the hub's tests and the
# Slurm cluster's stay whole on one worker.
TEST_WORKERS ?= 3
test: $(STAMP) slurm-deps test-environments
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

# What tests would otherwise install in their setup (Chromium, the hub's and the students'
# environments under /var/tmp, the grading account's Python), made once per machine before pytest.
.PHONY: test-environments
test-environments: $(STAMP)
	$(BIN)/python tests/prepare_environments.py

# Debian's Slurm (munge, slurmctld, slurmd, the client commands) for the tests' one-node cluster
# (tests/slurm_cluster.py), installed as root with apt; elsewhere one line, and those tests skip.
# Also batchspawner (the hub's SlurmSpawner), whose tests run in the course's venv.
SLURM_PACKAGES := munge slurmctld slurmd slurm-client
SLURM_STAMP    := $(VENV)/.slurm-installed
$(SLURM_STAMP): pyproject.toml $(STAMP)
	$(BIN)/python -m pip install -q -e '.[slurm]'
	touch $@
.PHONY: slurm-deps
slurm-deps: $(SLURM_STAMP)
	@if [ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/munged ] && command -v sbatch >/dev/null; then :; \
	elif command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  export DEBIAN_FRONTEND=noninteractive; apt-get install -y -q --no-install-recommends $(SLURM_PACKAGES) \
	  || { apt-get update -q && apt-get install -y -q --no-install-recommends $(SLURM_PACKAGES); }; \
	else echo "the Slurm tests skip: they need $(SLURM_PACKAGES) (sudo apt-get install $(SLURM_PACKAGES))"; fi

nightly: $(STAMP)
	$(BIN)/course nightly $(NIGHTLY_ARGS)

# JupyterLab on the course. PORT and IP choose where it listens; BROWSER=0 starts no browser (a
# remote node: open the printed address through an SSH tunnel, see README). The venv's commands
# (labutils, course) are on the PATH of its terminals and notebooks' shell commands, and the
# course's configuration (labutils/data/jupyter) makes nbgrader's Validate fail a lab with
# unwritten parts and adds the "Check my lab" button (labutils check on the open notebook).
PORT    ?= 8888
IP      ?= 127.0.0.1
BROWSER ?= 1
lab: $(STAMP)
	env JUPYTER_CONFIG_PATH=$(CURDIR)/labutils/data/jupyter PATH=$(abspath $(BIN)):$$PATH $(BIN)/jupyter lab --notebook-dir=. --ip=$(IP) --port=$(PORT) --LabApp.default_url=/lab/tree/notebooks/00_start_here.ipynb $(if $(filter 0,$(BROWSER)),--no-browser,) $(if $(filter 0,$(shell id -u)),--allow-root,) notebooks/00_start_here.ipynb

# The "Check my lab" button's JupyterLab extension, rebuilt from its source (labutils/data/check_button)
# into labutils/data/jupyter/labextensions/labutils-check, which is committed: using the button
# needs no node (source.sha256 there names the source it was built from; a test compares).
# Rebuilding needs node and npm (@jupyterlab/builder is installed into build/check_button).
LABEXT_SOURCE  := labutils/data/check_button
LABEXT_BUILT   := labutils/data/jupyter/labextensions/labutils-check
LABEXT_BUILDER := @jupyterlab/builder@4.5.11
.PHONY: labextension
labextension: $(STAMP)
	test -f build/check_button/node_modules/@jupyterlab/builder/package.json || npm install --prefix build/check_button --no-audit --no-fund --no-save $(LABEXT_BUILDER)
	rm -rf build/check_button/ext && cp -r $(LABEXT_SOURCE) build/check_button/ext
	cd build/check_button/ext && node ../node_modules/@jupyterlab/builder/lib/build-labextension.js --core-path "$$($(abspath $(BIN))/python -c 'import jupyterlab, os; print(os.path.join(os.path.dirname(jupyterlab.__file__), "staging"))')" .
	rm -rf $(LABEXT_BUILT) && mkdir -p $(dir $(LABEXT_BUILT)) && cp -r build/check_button/ext/labextension $(LABEXT_BUILT)
	cd $(LABEXT_SOURCE) && find . -type f | LC_ALL=C sort | xargs sha256sum > $(CURDIR)/$(LABEXT_BUILT)/source.sha256

# The students' copy (build/student and a .tar.gz): chapters, released labs, labutils; no
# solution, hidden test or grader (the build fails if any text of theirs is in it).
student: $(STAMP)
	$(BIN)/course student --archive

# The course's JupyterHub on a shared node (grading/hub/course_hub.toml), as root: `course hub`
# checks every prerequisite at once, then makes the students' copy and its environment under the
# settings' shared folder (students' servers run that, never this checkout), and closes the checkout
# to other users. The hub process has an environment of its own, HUB_VENV, made once (the stamp):
# the course's dependencies and JupyterHub with batchspawner (spawner = "slurm" in course_hub.toml
# makes every server a Slurm job), and no copy of the course, editable or not
# (grading/hub/requirements.py). It runs the checkout's grading from the checkout, isolated (-E -s
# -m, as the judge runs), and refuses an environment that holds the course editable.
HUB_VENV  ?= build/hub/venv
HUB_BIN   := $(HUB_VENV)/bin
HUB_STAMP := $(HUB_VENV)/.installed
$(HUB_STAMP): pyproject.toml grading/hub/requirements.py
	test -x $(HUB_BIN)/python || $(PYTHON) -m venv $(HUB_VENV)
	$(HUB_BIN)/python -m pip install -q --upgrade pip
	$(call install_torch,$(HUB_BIN))
	$(HUB_BIN)/python grading/hub/requirements.py course hub slurm > $(HUB_VENV)/requirements.txt
	$(HUB_BIN)/python -m pip install -q -r $(HUB_VENV)/requirements.txt
	touch $@
.PHONY: hub-env
hub-env: $(HUB_STAMP)

hub: $(HUB_STAMP)
	cd $(CURDIR) && $(HUB_BIN)/python -E -s -m grading.hub

bench: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[bench]'
	$(BIN)/python bench/launch.py

# On a GPU node, in under 8 minutes: GPU-marked tests, single-GPU benchmarks, NCCL all_reduce, the
# timed chapters on NCCL (1 rank and one per GPU) and lab 2's judge on NCCL, appended as a dated
# entry to docs/gpu-results.md with what could not run. Without a GPU: one line, exit 0, nothing written.
.PHONY: gpu-check
gpu-check: $(STAMP)
	@$(BIN)/python bench/gpu_checks.py

# MathJax 3 from npm into build/mathjax/ (pages load it from there, never from a CDN).
# SITE_ARGS: e.g. "--run" to execute the chapters first, "--repo-url https://github.com/OWNER/NAME".
.PHONY: site
site: $(STAMP)
	test -f build/mathjax/node_modules/mathjax/es5/tex-svg.js || npm install --prefix build/mathjax --no-audit --no-fund mathjax@3
	$(BIN)/course site $(SITE_ARGS)

clean-venv:
	rm -rf $(VENV)
