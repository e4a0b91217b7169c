"""Precompiled bytecode for what Lambda runs.

Lambda mounts a function's code at /var/task and its layers at /opt, both read-only: a module
without a usable `.pyc` is compiled from source at every cold start, and the result is thrown
away. So every asset and layer we build ships `__pycache__/<module>.cpython-313.pyc` beside each
`.py`, compiled by a Python of the runtime's version (a `.pyc` of another version is ignored).
They are hash-based and unchecked (PEP 552): a timestamp `.pyc` would compare the source's
modification time, which zipping and extracting the asset changes; an unchecked one is used as
it is, which is right for an asset that never changes after it is built.

With no Python of the runtime's version here, assets ship without bytecode (as before) and the
synth prints a note saying so: never a `.pyc` Lambda would ignore.
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Protocol

# `compileall --invalidation-mode`: hash-based, never checked against the source.
INVALIDATION_MODE = "unchecked-hash"
# How a copy is staged and compiled: a change to it must change every key, so no cached copy
# of the old way is reused.
STAGING_FORMAT = 1
# Files left as source: python-phonenumbers' geocoder, carrier and time-zone data (about 19 MB of
# bytecode, which tripled its layer's size), which `pipeline.phones` never imports (it parses,
# validates and formats: `phonenumbers/data`, compiled). `compileall -x` searches each path.
NOT_COMPILED = r"[/\\]phonenumbers[/\\](geodata|carrierdata|tzdata)[/\\]"
# Staged copies of a source not used for this long are removed when another is staged.
STALE_SECONDS = 3600


class Derived(Protocol):
    """Files built from a staged copy by the runtime's Python (`infra.dataclass_code`)."""

    def key(self) -> str:
        """What the files depend on beyond the copy's own source (part of the copy's key)."""
        ...

    def files(self, staged: Path, python: str) -> Mapping[str, bytes]:
        """File name -> content, at the copy's top."""
        ...


@cache
def bytecode_python(version: str) -> str | None:
    """An interpreter of `version` ("3.13") to compile with: this one if it is that version,
    else `python<version>` on PATH; None, with a note printed once, if there is none."""
    if f"{sys.version_info.major}.{sys.version_info.minor}" == version:
        return sys.executable
    found = shutil.which(f"python{version}")
    if found is None:
        print(
            f"note: no Python {version} (Lambda's runtime) here to compile bytecode with: the assets"
            f" ship without .pyc, and Lambda compiles every module at each cold start",
            file=sys.stderr,
        )
    return found


def _excluded(name: str, excludes: Sequence[str]) -> bool:
    """Whether a file or folder named `name` matches one of `excludes`, each `**/<name glob>`
    (the only form `infra.paths.ASSET_EXCLUDES` uses, at any depth as the CDK reads it)."""
    for pattern in excludes:
        glob = pattern.removeprefix("**/")
        if "/" in glob:
            raise ValueError(f"exclude {pattern!r}: only `**/<name>` patterns are supported")
        if fnmatch.fnmatchcase(name, glob):
            return True
    return False


def source_files(source: Path, excludes: Sequence[str]) -> list[Path]:
    """The files of `source` an asset ships (relative, sorted): all but the excluded ones."""
    files = []
    for folder, dirs, names in os.walk(source):
        dirs[:] = sorted(d for d in dirs if not _excluded(d, excludes))
        here = Path(folder).relative_to(source)
        files += [here / name for name in names if not _excluded(name, excludes)]
    return sorted(files)


def source_key(
    source: Path,
    files: Sequence[Path],
    compiled_by: str,
    generated: Mapping[str, bytes] | None = None,
    derived_key: str = "",
) -> str:
    """What a staged copy is named and hashed by: its files' paths and contents, the files
    generated into it, what the files derived from it are built from (`derived_key`), and the
    bytecode it carries (`compiled_by`: the Python version, or "none"), so the same source always
    gives the same asset hash, whatever the bytes of its `.pyc`."""
    digest = hashlib.sha256(f"{STAGING_FORMAT}\n{compiled_by}\n{INVALIDATION_MODE}\n".encode())
    for relative in files:
        digest.update(relative.as_posix().encode() + b"\0")
        digest.update(hashlib.sha256((source / relative).read_bytes()).digest())
    for name, content in sorted((generated or {}).items()):
        digest.update(f"generated {name}".encode() + b"\0" + hashlib.sha256(content).digest())
    if derived_key:
        digest.update(f"derived {derived_key}".encode())
    return digest.hexdigest()[:32]


def compile_command(python: str, folder: str, runtime_path: str) -> list[str]:
    """`compileall` writing the bytecode Lambda uses into `folder` (see `compile_tree`)."""
    mode = ["--invalidation-mode", INVALIDATION_MODE]
    return [python, "-m", "compileall", "-q", *mode, "-x", NOT_COMPILED, "-d", runtime_path, folder]


def compile_tree(folder: Path, python: str, *, runtime_path: str, strict: bool) -> None:
    """Writes an unchecked hash-based `.pyc` beside every `.py` under `folder`, with `python`.

    Their code names its file as Lambda mounts it (`runtime_path`, /var/task or /opt/python),
    not this machine's folder; with a fixed hash seed the bytes are the same at every synth.
    `strict`: a module that does not compile fails (our code); else it is left without bytecode,
    as pip leaves a third-party file that does not compile."""
    done = subprocess.run(  # noqa: S603
        compile_command(python, str(folder), runtime_path),
        env={"PATH": os.environ.get("PATH", os.defpath), "PYTHONHASHSEED": "0"},
        capture_output=True,
        text=True,
        check=False,
    )
    if strict and done.returncode != 0:
        raise RuntimeError(f"compiling {folder} failed:\n{(done.stdout + done.stderr)[-2000:]}")


def cache_entry(entry: Path, build: Callable[[Path], None]) -> Path:
    """`entry`, built first by `build` if missing: into a temporary folder beside it, renamed when
    complete, so a failed or interrupted build never leaves an entry; a concurrent build of the
    same entry that completes first is used."""
    if entry.is_dir():
        return entry
    entry.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=entry.parent, prefix=".partial-") as partial:
        build(Path(partial))
        try:
            os.rename(partial, entry)
        except OSError:
            if not entry.is_dir():
                raise
    return entry


def staged(
    source: Path,
    excludes: Sequence[str],
    *,
    cache_dir: Path,
    version: str,
    runtime_path: str,
    generated: Mapping[str, bytes] | None = None,
    derived: Derived | None = None,
) -> tuple[Path, str]:
    """A copy of `source` without `excludes`, with `generated` (file name -> content, at its
    top: the functions' `pipeline.declarations.SNAPSHOT`), the files `derived` builds from the
    staged copy with the runtime's Python (the functions' precompiled dataclass methods: only with
    such a Python, and only when the copy is staged), and bytecode for Python `version`, and its key.

    Kept in `cache_dir` under its key, so a synth with the same source reuses it; built in a
    temporary folder renamed when complete (an interrupted synth leaves no entry)."""
    files = source_files(source, excludes)
    python = bytecode_python(version)
    derived_by = derived.key() if derived is not None and python else ""
    key = source_key(source, files, version if python else "none", generated, derived_by)
    entry = cache_dir / f"{source.name}-{key}"

    def stage(partial: Path) -> None:
        for relative in files:
            (partial / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source / relative, partial / relative)  # content and mode
        for name, content in (generated or {}).items():
            (partial / name).write_bytes(content)
        if python:
            if derived is not None:
                for name, content in derived.files(partial, python).items():
                    (partial / name).write_bytes(content)
            compile_tree(partial, python, runtime_path=runtime_path, strict=True)

    cache_entry(entry, stage)
    os.utime(entry)
    _remove_stale(cache_dir, source.name, keep=entry)
    return entry, key


def _remove_stale(cache_dir: Path, name: str, keep: Path) -> None:
    """Earlier copies of the same source, unused for STALE_SECONDS (best effort)."""
    for other in cache_dir.glob(f"{name}-*"):
        try:
            stale = other != keep and time.time() - other.stat().st_mtime > STALE_SECONDS
        except OSError:  # removed by another synth meanwhile
            continue
        if stale:
            shutil.rmtree(other, ignore_errors=True)
