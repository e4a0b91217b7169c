"""Which files under `functions/` each function process has actually imported, for the reloader.

A function's code is more than its handler's package: the bot consumer imports the user's
Application module (`bot_application`, e.g. functions/mybot/main.py) at its first update, and a
package may import another's (the example bot imports `crm.logic`). No static rule knows all of
that; the process itself does. So each function process (`local.lambda_host.FunctionHost`) sends
the runtime, over its status channel, the files of `functions/` among its `sys.modules` after its
handler loads and after each invocation that imported more (`{"event": "code", "files": ...}`),
each with the (mtime, size) its import read, and the reloader (`local.reload`) restarts every
function whose process loaded a file that changed.

The (mtime, size) is the import's own (recorded from the source loader's `path_stats`, which the
import calls to validate its bytecode), not a later stat: a file saved while an invocation was
importing it is reported with the version the process runs, which the runtime then finds stale
(`LoadedCode.record`) and restarts, though the change was seen before the report arrived.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import threading
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from typing import Any

# The root whose files a function process reports (the runtime's functions/); unset: no report.
ENV_VAR = "LOCAL_CODE_ROOT"
EVENT = "code"

Stat = tuple[float, int]  # (st_mtime, st_size), what importlib's path_stats gives


class ImportedFiles:
    """In a function process: the files under `root` its modules come from, each with the stat its
    import saw. `install()` before the handler's import; `changed()` after it and each invocation."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip(os.sep)
        self._real_root = os.path.realpath(self.root)
        self._seen_at_import: dict[str, Stat] = {}
        self._reported: dict[str, Stat] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> ImportedFiles | None:
        root = environ.get(ENV_VAR)
        if not root:
            return None
        tracker = cls(root)
        tracker.install()
        return tracker

    def _ours(self, path: str) -> str | None:
        """`path` as the runtime names it (under the root as given), or None when outside it."""
        for root in (self.root, self._real_root):
            if path.startswith(root + os.sep):
                return self.root + path[len(root) :]
        return None

    def install(self) -> None:
        """Record the (mtime, size) each source import under the root validates against."""
        loader = importlib.machinery.SourceFileLoader
        original: Callable[[Any, str], Mapping[str, Any]] = loader.path_stats
        if getattr(original, "_records_for", None) is not None:
            return  # one recorder per process is enough
        seen = self._seen_at_import

        def path_stats(self_: Any, path: str) -> Mapping[str, Any]:
            stats = original(self_, path)
            ours = self._ours(path)
            if ours is not None:
                seen[ours] = (float(stats["mtime"]), int(stats.get("size", -1)))
            return stats

        path_stats._records_for = self.root  # type: ignore[attr-defined]
        loader.path_stats = path_stats  # type: ignore[method-assign,assignment]

    def current(self) -> dict[str, Stat]:
        """Every module file under the root now in `sys.modules`, with its import's stat."""
        found: dict[str, Stat] = {}
        for module in list(sys.modules.values()):
            path = getattr(module, "__file__", None)
            if not isinstance(path, str):
                continue
            ours = self._ours(path)
            if ours is None:
                continue
            stat = self._seen_at_import.get(ours)
            if stat is None:  # imported without a bytecode check (no cache tag): a stat now
                try:
                    result = os.stat(ours)
                except OSError:
                    continue
                stat = (result.st_mtime, result.st_size)
            found[ours] = stat
        return found

    def changed(self) -> dict[str, Stat] | None:
        """The whole current set when it differs from the last one returned, else None."""
        with self._lock:
            current = self.current()
            if current == self._reported:
                return None
            self._reported = current
            return current


def stale(files: Mapping[str, Collection[float | int]]) -> list[Path]:
    """Reported files whose version on disk is no longer the one the process imported."""
    changed = []
    for name, (mtime, size) in ((name, tuple(stat)) for name, stat in files.items()):
        try:
            result = os.stat(name)
        except OSError:
            changed.append(Path(name))
            continue
        if result.st_mtime != mtime or result.st_size != size:
            changed.append(Path(name))
    return changed


class LoadedCode:
    """In the runtime: each function process's last report, by function and process id."""

    def __init__(self) -> None:
        self._files: dict[str, dict[int, frozenset[Path]]] = {}
        self._stale: set[Path] = set()
        self._lock = threading.Lock()

    def record(self, function: str, message: Mapping[str, Any]) -> None:
        """A process's report; a file it imported that has changed since waits in `take_stale()`."""
        files = message.get("files")
        pid = message.get("pid")
        if not isinstance(files, dict) or not isinstance(pid, int):
            return
        outdated = stale(files)
        with self._lock:
            self._files.setdefault(function, {})[pid] = frozenset(Path(name) for name in files)
            self._stale.update(outdated)

    def take_stale(self) -> list[Path]:
        with self._lock:
            taken, self._stale = sorted(self._stale), set()
            return taken

    def by_function(self, live_pids: Collection[int]) -> dict[str, frozenset[Path]]:
        """The files each function's running processes have loaded (those of ended ones forgotten)."""
        with self._lock:
            loaded: dict[str, frozenset[Path]] = {}
            for function, processes in self._files.items():
                for pid in [pid for pid in processes if pid not in live_pids]:
                    del processes[pid]
                loaded[function] = frozenset().union(*processes.values())
            return loaded
