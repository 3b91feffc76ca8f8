# The README's commands. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
ADAPTER := adapters/langchain

.PHONY: install demo test docs bench clean dist browser

install: $(STAMP)

# BFCL's data and checker for `bench skills-effect`, without the API clients its pins would bring
# (they would replace numpy and faiss-cpu): see skillgraft/bench/bfcl_tasks.py.
BFCL := bfcl-eval==2026.3.23 tree-sitter==0.21.3 tree-sitter-java==0.21.0 tree-sitter-javascript==0.21.4

# Reinstall only when the packaging changes. CPU torch goes in first, or pip pulls a CUDA build.
$(STAMP): pyproject.toml $(wildcard $(ADAPTER)/pyproject.toml) Makefile
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[models,qwen,dev,docs,serve]'
	$(BIN)/pip install --quiet --no-deps $(BFCL)
	if [ -f $(ADAPTER)/pyproject.toml ]; then $(BIN)/pip install --quiet -e '$(ADAPTER)[test]'; fi
	touch $(STAMP)

demo: install
	$(BIN)/skillgraft demo

# The verifier's sandbox needs nothing installed (Linux namespaces); its tests fail, never skip, here.
# Two workers share the cores (the models run one thread each by default on 2 cores); a worker takes
# a module whole, and the modules on PostgreSQL and S3 together (tests/conftest.py).
TEST_WORKERS ?= 2
test: install server browser
	SKILLGRAFT_REQUIRE_SERVER=1 SKILLGRAFT_REQUIRE_SANDBOX=1 SKILLGRAFT_REQUIRE_BROWSER=1 $(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=25 tests $(wildcard $(ADAPTER)/tests)

# Debian's Chromium for the inspector's browser tests (Playwright drives it; it downloads no
# browser of its own). Installed with apt-get when missing, as root (CI); nothing to do when present.
CHROMIUM ?= /usr/bin/chromium
browser:
	@test -x $(CHROMIUM) || { test "$$(id -u)" = 0 || { echo "the browser tests need Chromium: sudo apt-get install chromium" >&2; exit 1; }; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null; }

# The sdists and wheels of skillgraft and langchain-skillgraft, built with the installed setuptools.
dist: install
	rm -rf dist
	$(BIN)/python -m build --no-isolation --outdir dist .
	$(BIN)/python -m build --no-isolation --outdir dist $(ADAPTER)

# The fast suite alone: fakes only (skillgraft.testing), no model loaded; the adapter's fast tier too.
.PHONY: test-fast
test-fast: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile tests/unit $(wildcard $(ADAPTER)/tests/unit)

# llama-server built from the llama.cpp sources of the installed llama-cpp-python, cached per
# version and CPU (scripts/build_llama_server.py); `make demo` does not wait for it.
.PHONY: server
server: install
	$(BIN)/python scripts/build_llama_server.py

docs: install
	$(BIN)/mkdocs build --strict

# A quick set; docs/benchmarks.md gives the full commands behind its tables.
bench: install
	mkdir -p build/bench
	$(BIN)/skillgraft bench graft --tokens 256,1024,4096 --repeats 3 --json --plot build/bench/graft.png > build/bench/bench_graft.json
	$(BIN)/skillgraft bench route --keys 1000,10000 --json --plot build/bench/route.png > build/bench/bench_route.json
	$(BIN)/skillgraft bench needles --blocks 8 --json > build/bench/bench_needles.json
	$(BIN)/python benchmarks/tables.py build/bench

clean:
	rm -rf $(VENV) build dist *.egg-info site
