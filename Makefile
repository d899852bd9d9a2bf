# Two commands matter: `make demo` and `make test`. Both build the virtual environment first.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test docs bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	# Pinned on purpose: an unpinned torch pulls a multi-GB CUDA build.
	$(PY) -m pip install -q "torch==2.13.0"
	$(PY) -m pip install -q -e ".[dev]"
	# Optional extras the tests exercise (HTML report, TensorBoard), torch held by constraints.txt.
	$(PY) -m pip install -q -c constraints.txt -e ".[html,tensorboard]"
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py

test: $(STAMP)
	$(PY) -m pytest

docs: $(STAMP)
	$(PY) -m traindoctor.docs docs/rules

bench: $(STAMP)
	$(PY) benchmarks/lint_speed.py
	$(PY) benchmarks/runtime_overhead.py

clean:
	rm -rf $(VENV) build dist src/*.egg-info
