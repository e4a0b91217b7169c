"""A working copy of this repository in a temporary folder, and small wheels to install there:
for tests that change the project the way a team does (a new folder) and look at the result."""

from __future__ import annotations

import base64
import hashlib
import os
import shutil
import subprocess
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def tracked_copy(destination: Path) -> Path:
    """The working tree's files (tracked or not, minus ignored ones) in a fresh git repository."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT, capture_output=True, check=True,
    ).stdout.decode().split("\0")  # fmt: skip
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (destination / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, destination / name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]
    subprocess.run([*git, "init", "-q"], cwd=destination, check=True)
    subprocess.run([*git, "add", "-A"], cwd=destination, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "copy"], cwd=destination, check=True)
    return destination


def changed(copy: Path) -> list[str]:
    """`git status --porcelain` of the copy, one line per changed or new file."""
    return subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=all"],
        cwd=copy, capture_output=True, text=True, check=True,
    ).stdout.splitlines()  # fmt: skip


def tiny_wheel(folder: Path, name: str = "tinydep", version: str = "1.0") -> Path:
    """A pure-Python wheel (`py3-none-any`) of one module, `<name>.VALUE == version`: a dependency
    no index has, which pip installs from `folder` with PIP_NO_INDEX=1 PIP_FIND_LINKS=folder."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}/__init__.py": f"VALUE = {version!r}\n",
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n",
        f"{dist_info}/WHEEL": (
            "Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }

    def digest(text: str) -> str:
        raw = hashlib.sha256(text.encode()).digest()
        return "sha256=" + base64.urlsafe_b64encode(raw).decode().rstrip("=")

    record = "".join(f"{path},{digest(text)},{len(text.encode())}\n" for path, text in files.items())
    files[f"{dist_info}/RECORD"] = record + f"{dist_info}/RECORD,,\n"
    folder.mkdir(parents=True, exist_ok=True)
    wheel = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for path, text in files.items():
            archive.writestr(path, text)
    return wheel


def offline_pip(wheels: Path) -> dict[str, str]:
    """The environment in which pip installs only the wheels in `wheels` (no index, no network)."""
    return {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(wheels)}
