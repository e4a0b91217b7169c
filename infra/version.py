"""This checkout's release: `pyproject.toml`'s `version`, the one place it is written.

The stack exports it (`OutputKey.VERSION`), so `ops doctor` can tell the deployed release from the
checkout's and point at CHANGELOG.md's upgrade notes when they differ.
"""

from __future__ import annotations

import re
import tomllib
from functools import cache

from infra.paths import PROJECT_ROOT

PYPROJECT = PROJECT_ROOT / "pyproject.toml"
CHANGELOG = PROJECT_ROOT / "CHANGELOG.md"
SEMVER = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)")


@cache
def release_version() -> str:
    """The semantic version in `pyproject.toml` ([project] version)."""
    with PYPROJECT.open("rb") as file:
        version = str(tomllib.load(file)["project"]["version"])
    if not SEMVER.fullmatch(version):
        raise ValueError(f"{PYPROJECT.name}: version {version!r} is not MAJOR.MINOR.PATCH")
    return version


def version_key(version: str) -> tuple[int, ...]:
    """(major, minor, patch) to compare versions; a string that is not one sorts first."""
    return tuple(int(p) for p in version.split(".")) if SEMVER.fullmatch(version) else (-1,)
