#!/usr/bin/env bash
# Install the freshly built wheel into a throwaway venv and check it imports.
set -euo pipefail
wheel="$(ls -t dist/*.whl | head -n 1)"
tmp="$(mktemp -d)"
python -m venv "$tmp/venv"
"$tmp/venv/bin/pip" install --quiet "$wheel"
pkg="${1:-$(basename "$wheel" | cut -d- -f1)}"
"$tmp/venv/bin/python" -c "import importlib, sys; m = importlib.import_module('$pkg'); print(m.__name__, 'ok')"
python -m zipfile -l "$wheel" | awk '{print $1}' | sed -n '1,200p'
rm -rf "$tmp"
