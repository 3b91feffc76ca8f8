"""Block payloads in object storage (S3 API, or ``file://`` on a shared mount) via obstore.

Objects are ``<prefix>/<sha256>.kv``: content-addressed and immutable, so a deposit is a
put-if-absent (``If-None-Match: *``) made before the catalog transaction, and two hosts
depositing the same payload store it once. Reads go through a bounded read-through cache
in the host's home (``cache/``); the size and SHA-256 are checked on every read, from the
cache or the bucket, and a cached copy that fails is dropped and fetched again. A bad
object in the bucket is moved to ``<prefix>/quarantine/`` and its catalog row marked, so
every host skips it and nobody downloads it again. Derived prefix states shared by the hosts
lie under ``<prefix>/derived/`` (:mod:`skillgraft.store.shared_derived`) and the namespaces' objects
under ``<prefix>/namespaces/`` (:mod:`skillgraft.memory.namespaces`): never the base's blocks, never strays.

An object that no catalog row claims is reported (and quarantined by ``--repair``) only
once it is older than :data:`UNCLAIMED_GRACE_S`: a younger one may belong to a deposit
in progress on another host.
"""

from __future__ import annotations

import os
import time
import uuid
from contextlib import AbstractContextManager, suppress
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable, Optional
from urllib.parse import unquote, urlsplit

from .block_folder import (
    MOVED_ASIDE, TEMP_SUFFIX, Strays, block_file, dead_writer_temp, prove_writable, read_regular, temp_file, write_synced,
)
from ..core.blocks import BLOCK_SUFFIX, Block
from .catalog_postgres import first_line, redact_url
from .derived_states import NAMESPACES_FOLDER
from ..errors import ConfigError, StoreError
from .protocols import Verify

__all__ = ["ObjectBlocks", "DEFAULT_DISK_CACHE_BYTES", "UNCLAIMED_GRACE_S"]

DEFAULT_DISK_CACHE_BYTES = 8 * 1024**3
UNCLAIMED_GRACE_S = 3600.0
QUARANTINE_PREFIX = "quarantine/"
DERIVED_PREFIX = "derived/"  # derived prefix states (:mod:`skillgraft.store.shared_derived`), not blocks
NAMESPACES_PREFIX = NAMESPACES_FOLDER + "/"  # the namespaces' own objects, not the base's strays
RETRIES = {"max_retries": 2, "backoff": {"init_backoff": timedelta(milliseconds=100)}, "retry_timeout": timedelta(seconds=10)}


class ObjectBlocks:
    """Block objects under one URL, with this host's cache folder."""

    kind = "object"

    def __init__(self, url: str, cache_dir: Path, *, cache_bytes: Optional[int] = None) -> None:
        try:
            import obstore
            from obstore.store import from_url
        except ImportError:
            raise ConfigError("blocks in object storage need obstore: pip install 'skillgraft[shared]'") from None
        self._obstore = obstore
        self.url = url
        self.where = redact_url(url)
        self.cache_dir = Path(cache_dir)
        self.local_dir = self.cache_dir  # this host's folder of block files: the cache
        env_cache = os.environ.get("SKILLGRAFT_CACHE_BYTES")
        self.cache_bytes = cache_bytes or (int(env_cache) if env_cache and env_cache.isdigit() else DEFAULT_DISK_CACHE_BYTES)
        try:
            if url.startswith("file://"):
                self._store = from_url(url, mkdir=True)
            else:
                endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""
                options = {"allow_http": True} if endpoint.startswith("http://") else {}
                self._store = from_url(url, client_options={"timeout": timedelta(seconds=60), **options}, retry_config=RETRIES)
        except Exception as exc:  # obstore raises its own configuration errors
            raise ConfigError(f"cannot use the blocks URL {self.where}: {first_line(exc, 300)}") from None

    def prepare(self) -> None:
        """Create the cache folder and prove it can be written (raises :class:`OSError`)."""
        prove_writable(self.cache_dir)

    def path_of(self, block: Block) -> Path:
        """This host's cached copy of the block (it may not be there)."""
        return block_file(self.cache_dir, block)

    def _failure(self, what: str, exc: BaseException) -> StoreError:
        return StoreError(f"cannot {what} in {self.where}: {first_line(exc, 300)}")

    # -- writing ---------------------------------------------------------------------------

    def stage(self, block: Block, payload: bytes) -> str:
        """Upload the payload unless an object already holds it (put-if-absent); its key."""
        key = block.file_name
        if self.has(block):  # stored by an earlier deposit, maybe on another host: no upload
            self._cache_put(block, payload)
            return key
        try:
            self._obstore.put(self._store, key, payload, mode="create")
        except self._obstore.exceptions.AlreadyExistsError:
            pass  # content-addressed: the object there holds these bytes, or a read will quarantine it
        except Exception as exc:
            raise self._failure(f"store block {block.id} ({block.n_bytes} bytes)", exc) from exc
        self._cache_put(block, payload)
        return key

    def commit(self, block: Block, staged: str) -> None:
        """Nothing left to do: the object was written by :meth:`stage`."""

    @staticmethod
    def release(staged: str) -> None:
        """Nothing to clean: an upload is never partial."""

    def has(self, block: Block) -> bool:
        try:
            return self._obstore.head(self._store, block.file_name)["size"] == block.n_bytes
        except FileNotFoundError:
            return False
        except Exception as exc:
            raise self._failure(f"look up block {block.id}", exc) from exc

    # -- reading ---------------------------------------------------------------------------

    def read(self, block: Block, verify: Verify) -> tuple[Optional[bytes], Optional[str]]:
        """The verified payload from the cache, else from the bucket (then cached)."""
        cached = self.path_of(block)
        payload, problem = read_regular(cached, block.n_bytes)
        if problem is None and verify(block, payload) is None:
            try:
                os.utime(cached)  # least recently used goes first when the cache is full
            except OSError:
                pass
            return payload, None
        if problem != "file missing":
            self._drop(cached)  # a bad cached copy is only a cache miss
        try:
            result = self._obstore.get(self._store, block.file_name)
            size = result.meta["size"]
            if size != block.n_bytes:
                return None, f"{size} bytes, expected {block.n_bytes}"
            payload = bytes(result.bytes())
        except FileNotFoundError:
            return None, "file missing"
        except Exception as exc:
            return None, f"unreachable ({first_line(exc, 300)})"
        problem = verify(block, payload)
        if problem:
            return None, problem
        self._cache_put(block, payload)
        return payload, None

    # -- the host's cache ------------------------------------------------------------------

    def _cache_put(self, block: Block, payload: bytes) -> None:
        if len(payload) > self.cache_bytes:
            return
        temp = temp_file(self.cache_dir, block)
        try:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            write_synced(temp, payload)
            os.replace(temp, self.path_of(block))
        except OSError:
            return  # a cache that cannot be written only costs a download
        finally:
            temp.unlink(missing_ok=True)
        self._prune(keep=block.file_name)

    def _prune(self, keep: str) -> None:
        """Drop the least recently used cached payloads until the cache fits its bound."""
        try:
            entries = [(st.st_mtime, st.st_size, p) for p in self.cache_dir.iterdir()
                       if p.name.endswith(BLOCK_SUFFIX) and p.name != keep for st in [p.stat()]]
            total = sum(size for _, size, _ in entries) + (self.cache_dir / keep).stat().st_size
        except OSError:
            return
        for _, size, path in sorted(entries):
            if total <= self.cache_bytes:
                break
            self._drop(path)
            total -= size

    @staticmethod
    def _drop(path: Path) -> None:
        try:
            path.unlink()
        except OSError:
            pass

    # -- moving aside and removing ---------------------------------------------------------

    def quarantine(self, block: Block) -> Optional[str]:
        """Move the block's object to ``quarantine/`` (kept, never deleted) and drop the cached copy."""
        self._drop(self.path_of(block))
        return self._move_aside(block.file_name)

    def _move_aside(self, key: str) -> Optional[str]:
        target = f"{QUARANTINE_PREFIX}{key}.{time.strftime('%Y%m%dT%H%M%S')}.{uuid.uuid4().hex[:6]}"
        try:
            self._obstore.copy(self._store, key, target)
            self._obstore.delete(self._store, key)
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._failure(f"move {key} to quarantine/", exc) from exc
        return target

    def delete(self, block: Block) -> str:
        self._drop(self.path_of(block))
        try:
            self._obstore.delete(self._store, block.file_name)
        except FileNotFoundError:
            return "already gone"
        except Exception as exc:
            raise self._failure(f"remove block {block.id}", exc) from exc
        return "deleted"

    # -- derived states: other objects, under derived/ ---------------------------------------

    def put_derived(self, name: str, data: bytes) -> None:
        """Store ``derived/<name>`` (whole or not at all); raises :class:`StoreError`."""
        try:
            self._obstore.put(self._store, DERIVED_PREFIX + name, data)
        except Exception as exc:
            raise self._failure(f"store the derived state {name}", exc) from exc

    def get_derived(self, name: str, n_bytes: int) -> Optional[bytes]:
        """``derived/<name>`` when it holds exactly ``n_bytes`` (None when missing or of another
        size: nothing more is read); raises :class:`StoreError` when the bucket cannot be reached."""
        try:
            result = self._obstore.get(self._store, DERIVED_PREFIX + name)
            if result.meta["size"] != n_bytes:
                return None
            data = bytes(result.bytes())
        except FileNotFoundError:
            return None
        except Exception as exc:
            raise self._failure(f"read the derived state {name}", exc) from exc
        return data if len(data) == n_bytes else None

    def delete_derived(self, name: str) -> None:
        try:
            self._obstore.delete(self._store, DERIVED_PREFIX + name)
        except FileNotFoundError:
            pass
        except Exception as exc:
            raise self._failure(f"remove the derived state {name}", exc) from exc

    def delete_all(self) -> tuple[int, int]:
        """Delete every object under this URL's prefix (blocks, quarantined, derived), and on a
        ``file://`` mount the folders left empty; how many objects and their bytes. Raises
        :class:`StoreError`."""
        try:
            listed = [meta for batch in self._obstore.list(self._store) for meta in batch]
            for meta in listed:
                try:
                    self._obstore.delete(self._store, meta["path"])
                except FileNotFoundError:
                    pass
        except Exception as exc:
            raise self._failure("delete the objects", exc) from exc
        if self.url.startswith("file://"):
            root = Path(unquote(urlsplit(self.url).path))
            for folder in sorted((p for p in root.rglob("*") if p.is_dir() and not p.is_symlink()), reverse=True):
                with suppress(OSError):  # not empty: something else lies there
                    folder.rmdir()
            with suppress(OSError):
                root.rmdir()
        return len(listed), sum(int(meta["size"]) for meta in listed)

    # -- check -----------------------------------------------------------------------------

    def strays(self, known: set[str], repair: bool, lock: Callable[[], AbstractContextManager]) -> tuple[list[dict], list[dict]]:
        """``(problems, repaired)``: objects no row claims (past the grace) and dead writers' cache temp files.

        ``lock`` is not needed here: an upload precedes its transaction, so only an object's
        age can tell a dead writer's object from one whose deposit is still in progress.
        """
        found = Strays(repair)
        now = datetime.now(timezone.utc)
        try:
            listed = [meta for batch in self._obstore.list(self._store) for meta in batch]
        except Exception as exc:
            return [{"block_id": None, "file": self.where, "problem": f"unreachable ({first_line(exc, 300)})"}], []
        for meta in listed:
            key = meta["path"]
            if key.startswith((QUARANTINE_PREFIX, DERIVED_PREFIX, NAMESPACES_PREFIX)) or key in known:
                continue
            if (now - meta["last_modified"]).total_seconds() < UNCLAIMED_GRACE_S:
                continue  # maybe a deposit in progress on another host
            found.add(key, "object without a catalog row", lambda: self._move_aside(key), MOVED_ASIDE)
        for path in sorted(self.cache_dir.glob(f"*{TEMP_SUFFIX}")):
            if dead_writer_temp(path):
                found.add(f"cache/{path.name}", "temp file of an interrupted write", lambda: self._drop(path), "deleted")
        return found.problems, found.repaired
