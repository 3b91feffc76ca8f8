# The README's commands. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install demo test clean

install: $(STAMP)

# Reinstall only when the packaging changes. CPU torch goes in first, or pip pulls a CUDA build.
$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[models,dev,docs]'
	touch $(STAMP)

demo: install
	$(BIN)/skillgraft demo

test: install
	$(BIN)/python -m pytest

clean:
	rm -rf $(VENV) build *.egg-info site
