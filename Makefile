# Set-up happens on first use: a local .venv with the CPU build of torch, then the package.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-fast lint redis-server

# test workers (pytest-xdist): this machine and CI have 2 cores
JOBS ?= 2
# a test file runs in one worker, so its module fixtures (a server, an executed notebook) run once
PYTEST := HF_HUB_OFFLINE=1 $(PY) -m pytest -q -n $(JOBS) --dist loadfile

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# torch first, pinned to the CPU wheel, or pip pulls a multi-GB CUDA build. --no-compile: Python
	# compiles a module on first import; pip would compile all of torch and transformers (2 minutes)
	$(PY) -m pip install --quiet --no-compile torch==2.13.0
	$(PY) -m pip install --quiet --no-compile -e '.[dev]'
	# byte-compile what the package and its tests import, once: Python caches a module at its first
	# import, except where PYTHONDONTWRITEBYTECODE is set (as on this machine), and then every process
	# (test workers, CLI, notebook and tokenizer subprocesses) compiled them again: 8 s each
	env -u PYTHONDONTWRITEBYTECODE $(PY) -c "import llama_index_ext_recursive.cli, llama_index_ext_recursive.eval, \
	    onnxruntime, faiss, llama_index.vector_stores.postgres"
	touch $(STAMP)

demo: $(STAMP)
	HF_HUB_OFFLINE=1 $(VENV)/bin/llama-recursive demo

# ruff (lint, format) over the repository and mypy over the package; part of make test
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy

# everything, what CI runs (.ci/run): the static checks, then every test (real models, servers)
test: lint redis-server
	$(PYTEST)

# the shared-cache tests start their own Redis on a free port of 127.0.0.1 (tests/redis_server.py):
# Debian's redis-server, installed when missing (as root, or through sudo)
SUDO := $(if $(filter 0,$(shell id -u)),,sudo)
redis-server:
	@command -v redis-server >/dev/null || $(SUDO) apt-get install -y --no-install-recommends redis-server \
	    || { $(SUDO) apt-get update && $(SUDO) apt-get install -y --no-install-recommends redis-server; }

# the edit loop: tests without a real model, a server or a subprocess (markers set in tests/conftest.py)
test-fast: $(STAMP)
	$(PYTEST) -m "not integration and not server"
