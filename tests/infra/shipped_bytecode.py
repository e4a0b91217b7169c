"""What Lambda's Python makes of a shipped `.pyc`: its PEP 552 header, read for the infra tests.

The magic number and the source hash are this interpreter's, so the checks run on the runtime's
Python version only (`runtime_python`).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from infra.constructs.layers import PIP_PYTHON_VERSION

RUNTIME_TAG = "cpython-" + PIP_PYTHON_VERSION.replace(".", "")
# PEP 552 flags: bit 0 hash-based, bit 1 check the source; unchecked = hash-based only.
UNCHECKED_HASH = 0b01

runtime_python = pytest.mark.skipif(
    f"{sys.version_info.major}.{sys.version_info.minor}" != PIP_PYTHON_VERSION,
    reason=f"reading Python {PIP_PYTHON_VERSION} bytecode takes Python {PIP_PYTHON_VERSION}",
)


def pyc_of(source: Path) -> Path:
    """Where the runtime's Python looks for a module's bytecode."""
    return source.parent / "__pycache__" / f"{source.stem}.{RUNTIME_TAG}.pyc"


def pyc_problem(source: Path) -> str | None:
    """Why Lambda would compile `source` at a cold start; None if it uses the shipped `.pyc`."""
    pyc = pyc_of(source)
    if not pyc.is_file():
        return f"{source}: no {pyc.name}"
    header = pyc.read_bytes()[:16]
    if header[:4] != importlib.util.MAGIC_NUMBER:
        return f"{pyc}: not Python {PIP_PYTHON_VERSION} bytecode"
    if int.from_bytes(header[4:8], "little") != UNCHECKED_HASH:
        return f"{pyc}: not unchecked hash-based (flags {header[4:8].hex()})"
    if header[8:16] != importlib.util.source_hash(source.read_bytes()):
        return f"{pyc}: compiled from another source"
    return None


def unshipped(folder: Path) -> list[str]:
    """Every module under `folder` Lambda would compile at a cold start, and why."""
    return [problem for source in sorted(folder.rglob("*.py")) if (problem := pyc_problem(source))]


def foreign_bytecode(folder: Path) -> list[str]:
    """Bytecode under `folder` that is not the runtime's of a module shipped beside it (this
    machine's caches, another version's, a removed module's): none may ship."""
    return [
        str(path)
        for path in sorted(folder.rglob("*"))
        if (path.suffix == ".pyc" or path.name == "__pycache__")
        and not (path.name == "__pycache__" and path.is_dir())
        and not (
            path.parent.name == "__pycache__"
            and path.name.endswith(f".{RUNTIME_TAG}.pyc")
            and (path.parent.parent / f"{path.name.split('.')[0]}.py").is_file()
        )
    ]
