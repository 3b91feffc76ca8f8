"""mkdocs hook: nav entries for pages that other parts of the project write.

``langchain.md`` documents the separately distributed adapter and is written with it.
Until it exists its nav entry is dropped (with a log line) instead of failing the
``--strict`` build; every other nav entry must exist as usual.
"""

from __future__ import annotations

import logging
from pathlib import Path

OPTIONAL = {"langchain.md"}
log = logging.getLogger("mkdocs.hooks.optional_pages")


def _prune(items, docs_dir: Path):
    kept = []
    for item in items:
        target = next(iter(item.values())) if isinstance(item, dict) else item
        if isinstance(target, list):
            kept.append({next(iter(item)): _prune(target, docs_dir)})
        elif isinstance(target, str) and target in OPTIONAL and not (docs_dir / target).is_file():
            log.info("nav: %s does not exist yet; its entry is left out", target)
        else:
            kept.append(item)
    return kept


def on_config(config):
    if config.nav:
        config.nav = _prune(config.nav, Path(config.docs_dir))
    return config
