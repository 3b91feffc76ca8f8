"""The filesystem a sandbox run sees: a fresh root holding only what its interpreter needs.

:func:`root_plan` asks the method's interpreter (``python -I -S``, as the method runs) which
folders it searches for modules and which files it maps once every extension module of its
standard library is loaded, and reads the dynamic loader's path from its ELF header. The plan
lists the mounts that :mod:`skillgraft.verify.sandbox_init` makes in a fresh tmpfs before it
pivots into it:

- read-only binds of the interpreter, its module folders and the folders of the libraries it
  loads, with the loader and ``/etc/ld.so.cache`` (a list of library paths);
- the host root's top-level links (``/lib -> usr/lib`` on merged-``/usr`` systems), so that the
  loader finds libraries under the names it was built with;
- ``/dev/null``, ``/dev/zero``, ``/dev/full``, ``/dev/random`` and ``/dev/urandom``.

Nothing else of the host is there: no ``/etc`` beyond the loader's cache, no ``/home``,
``/root``, ``/work``, ``/run`` or ``/var``, no host ``/proc`` or ``/sys``, no store files.
"""

from __future__ import annotations

import functools
import json
import os
import stat
import struct
import subprocess
from dataclasses import dataclass

from ..errors import ConfigError

DEVICES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom")
LOADER_CACHE = "/etc/ld.so.cache"
# Folders made in the fresh root for the sandbox's own mounts (proc and the private tmpfs).
MOUNT_POINTS = ("/proc", "/tmp", "/var/tmp", "/dev/shm")
_STAGES = ("/mnt", "/srv", "/media", "/opt", "/tmp")  # where the fresh root is built, first free
_PROBE = r"""
import json, os, sys
for folder in sys.path:
    try:
        names = os.listdir(folder)
    except OSError:
        continue
    for name in sorted(names):
        if name.endswith('.so') and not name.startswith('_test'):
            try:
                __import__(name.split('.')[0])
            except BaseException:
                pass
maps = set()
with open('/proc/self/maps') as handle:
    for line in handle:
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith('/'):
            maps.add(parts[5].strip())
sys.stdout.write(json.dumps({'path': sys.path, 'maps': sorted(maps)}))
"""


@dataclass(frozen=True)
class RootPlan:
    """The mounts of a fresh root, as paths of the host (each also its path inside)."""

    python: str  # the interpreter to exec, a real path
    stage: str  # a host folder the root is built on (covered by its tmpfs, never written)
    links: tuple[tuple[str, str], ...]  # (path, target) symbolic links to make
    folders: tuple[str, ...]  # folders to bind read-only
    files: tuple[str, ...]  # files (and devices) to bind

    def as_config(self) -> dict:
        return {
            "python": self.python, "stage": self.stage, "links": [list(link) for link in self.links],
            "folders": list(self.folders), "files": list(self.files), "mount_points": list(MOUNT_POINTS),
        }


def elf_interpreter(path: str) -> str:
    """The program interpreter (dynamic loader) named in an ELF file's header, or ``""``."""
    with open(path, "rb") as handle:
        head = handle.read(64)
        if head[:4] != b"\x7fELF" or head[4] not in (1, 2):
            return ""
        wide, order = head[4] == 2, "<" if head[5] == 1 else ">"
        if wide:
            phoff, phentsize, phnum = struct.unpack_from(order + "Q", head, 32)[0], *struct.unpack_from(order + "HH", head, 54)
        else:
            phoff, phentsize, phnum = struct.unpack_from(order + "I", head, 28)[0], *struct.unpack_from(order + "HH", head, 42)
        for index in range(phnum):
            handle.seek(phoff + index * phentsize)
            entry = handle.read(phentsize)
            kind = struct.unpack_from(order + "I", entry, 0)[0]
            if kind == 3:  # PT_INTERP
                offset, size = struct.unpack_from(order + ("QQQQ" if wide else "IIII"), entry, 8 if wide else 4)[0::3]
                handle.seek(offset)
                return handle.read(size).rstrip(b"\0").decode()
    return ""


def _links_on_the_way(path: str, depth: int = 0) -> list[tuple[str, str]]:
    """The symbolic links met while resolving ``path`` (each to make in the fresh root)."""
    if depth > 40:
        raise ConfigError(f"too many symbolic links resolving {path}")
    parts = [part for part in path.split("/") if part]
    current = "/"
    for index, part in enumerate(parts):
        candidate = os.path.join(current, part)
        if os.path.islink(candidate):
            target = os.readlink(candidate)
            rest = "/".join(parts[index + 1:])
            resolved = os.path.normpath(os.path.join(current, target, rest))
            return [(candidate, target), *_links_on_the_way(resolved, depth + 1)]
        current = candidate
    return []


def _outermost(paths: set[str]) -> tuple[str, ...]:
    """``paths`` less those inside another one of them."""
    kept: list[str] = []
    for path in sorted(paths):
        if not any(path == folder or path.startswith(folder.rstrip("/") + "/") for folder in kept):
            kept.append(path)
    return tuple(kept)


def method_python(executable: str) -> str:
    """The method's interpreter: ``executable`` (real path) when any user may run the file,
    else the system's ``python3`` (the method may run as ``nobody``)."""
    for candidate in (executable, "/usr/bin/python3", "/usr/local/bin/python3"):
        try:
            real = os.path.realpath(candidate)
            if os.stat(real).st_mode & stat.S_IXOTH:
                return real
        except OSError:
            continue
    raise ConfigError("no Python interpreter is executable by the sandbox user")


@functools.lru_cache(maxsize=4)
def root_plan(executable: str) -> RootPlan:
    """The fresh root for method code run by ``executable`` (probed once per interpreter)."""
    python = method_python(executable)
    try:
        probe = subprocess.run([python, "-I", "-S", "-c", _PROBE], capture_output=True, timeout=120,
                               stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, cwd="/")
        found = json.loads(probe.stdout)
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise ConfigError(f"the python sandbox could not probe its interpreter {python}: {exc}") from exc
    folders = {os.path.realpath(folder) for folder in found["path"] if os.path.isdir(folder)}
    files = {python, *(path for path in (LOADER_CACHE, *DEVICES) if os.path.exists(path))}
    for path in (os.path.realpath(path) for path in found["maps"] if os.path.isfile(path)):
        if path != python:  # a library's folder (its siblings may be loaded later), else the file alone
            (folders.add(os.path.dirname(path)) if ".so" in os.path.basename(path) else files.add(path))
    loader = elf_interpreter(python)
    links = {(path, os.readlink(path)) for path in (os.path.join("/", name) for name in os.listdir("/")) if os.path.islink(path)}
    if loader:
        links.update(_links_on_the_way(loader))
        folders.add(os.path.dirname(os.path.realpath(loader)))
    folders = set(_outermost(folders))
    inside = lambda path: any(path.startswith(folder + "/") for folder in folders)  # noqa: E731
    files = {path for path in files if not inside(path)}
    links = {link for link in links if not inside(link[0])}
    sources = [*folders, *files]
    stage = next((path for path in _STAGES if os.path.isdir(path) and not os.path.islink(path)
                  and not any(source == path or source.startswith(path + "/") for source in sources)), None)
    if stage is None:
        raise ConfigError(f"the python sandbox found no empty folder to build its root on (tried {', '.join(_STAGES)})")
    return RootPlan(python, stage, tuple(sorted(links)), _outermost(folders), tuple(sorted(files)))
