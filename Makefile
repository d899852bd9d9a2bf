# Two commands matter: `make demo` and `make test`. Both build the virtual environment first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test docs bench gpu-check clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	# Pinned on purpose: an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install -q "torch==2.13.0"
	# dev tools, the optional extras the tests exercise (HTML report, TensorBoard, the LSP server)
	# and the frameworks the integration tests run (lightning, transformers, accelerate), always
	# under constraints.txt so nothing re-resolves torch.
	$(PY) -m pip install -q -c constraints.txt -e ".[dev,html,tensorboard,lsp,frameworks]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(PY) -m pytest

docs: $(STAMP)
	$(PY) -m traindoctor.docs docs/rules

bench: $(STAMP)
	$(PY) benchmarks/lint_speed.py
	$(PY) benchmarks/runtime_overhead.py

# Every GPU path in one go (< 5 min on one NVIDIA GPU); writes gpu_check.json and gpu_check.md.
# Without CUDA (no GPU, or a CPU wheel) it says why and exits 2; --allow-cpu rehearses it on the CPU.
gpu-check: $(STAMP)
	$(PY) benchmarks/gpu_check.py --json gpu_check.json --markdown gpu_check.md

clean:
	rm -rf $(VENV) build dist src/*.egg-info
