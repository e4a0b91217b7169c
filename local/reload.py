"""Code changes picked up without a restart: which files changed, and which functions that affects.

The local runtime polls the modification times of the files under `functions/` and the shared
layer (`layers/shared/python/`) about once a second (no dependency, no OS-specific watcher) and
restarts the affected function processes: a change to a file of `functions/` that a function's
process has imported (as it reports, `local.loaded_code`: the bot's Application module, another
package's module) restarts that function; so does any change under its handler's own package
(files it reads without importing them, modules it has not imported yet), and a change in the
shared layer (or directly in `functions/`) restarts them all. A module no process has imported
yet needs no restart: the first import reads it as it is.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Mapping
from pathlib import Path

# Not code: bytecode caches, and the temporary files editors write beside the one they save.
IGNORED_DIRECTORIES = frozenset({"__pycache__", ".mypy_cache", ".pytest_cache", ".ruff_cache"})
IGNORED_SUFFIXES = (".pyc", ".pyo", ".swp", ".swx", ".tmp", "~")


class ChangeDetector:
    """Remembers each watched file's (mtime, size); `changes()` says which ones differ since the last call."""

    def __init__(self, roots: Iterable[Path]) -> None:
        self.roots = tuple(roots)
        self._seen = self.scan()

    def scan(self) -> dict[Path, tuple[int, int]]:
        found: dict[Path, tuple[int, int]] = {}
        for root in self.roots:
            for directory, subdirectories, files in os.walk(root):
                subdirectories[:] = [d for d in subdirectories if d not in IGNORED_DIRECTORIES]
                for name in files:
                    if name.startswith(".") or name.endswith(IGNORED_SUFFIXES):
                        continue
                    path = Path(directory, name)
                    try:
                        stat = path.stat()
                    except FileNotFoundError:  # removed while walking: the next scan sees it gone
                        continue
                    found[path] = (stat.st_mtime_ns, stat.st_size)
        return found

    def changes(self) -> list[Path]:
        """Files added, changed or removed since the previous call (or since the detector was made)."""
        current = self.scan()
        changed = sorted(
            path for path in current.keys() | self._seen.keys() if current.get(path) != self._seen.get(path)
        )
        self._seen = current
        return changed


def affected_functions(
    changed: Iterable[Path],
    functions_dir: Path,
    layer_dir: Path,
    packages: Mapping[str, str],
    loaded: Mapping[str, Collection[Path]] | None = None,
) -> dict[str, Path]:
    """Function name -> the first changed file that makes it restart.

    `packages` maps each running function to its handler's package (`crm` for `crm.app.lambda_handler`);
    `loaded` each to the files of functions/ its processes have imported (`local.loaded_code`).
    """
    loaded = loaded or {}
    affected: dict[str, Path] = {}
    for path in changed:
        if path.is_relative_to(layer_dir):
            names = list(packages)
        elif path.is_relative_to(functions_dir):
            parts = path.relative_to(functions_dir).parts
            if len(parts) == 1:  # a file directly in functions/: on every function's path
                names = list(packages)
            else:
                names = [
                    name
                    for name, package in packages.items()
                    if package == parts[0] or path in loaded.get(name, ())
                ]
        else:
            continue
        for name in names:
            affected.setdefault(name, path)
    return affected
