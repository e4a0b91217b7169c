"""The reloader of `make local`: watches the code and restarts the functions a change affects.

`Reloader` polls `local.reload.ChangeDetector` and what the processes reported they imported
(`local.loaded_code`), and asks its `restart` callback (the runtime's `restart_functions`) to
replace each affected function's processes, announcing each reload.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from pathlib import Path

from local.loaded_code import LoadedCode
from local.reload import ChangeDetector, affected_functions
from local.settings import PROJECT_ROOT
from local.stack import LocalRuntimeError
from local.status import INIT_ERROR, MISSING, FunctionStatus

# How often the reloader looks at the code's files, and how long it lets an editor finish saving.
RELOAD_POLL_SECONDS = 1.0
RELOAD_SETTLE_SECONDS = 0.3


class Reloader:
    def __init__(
        self,
        functions_dir: Path,
        layer_dir: Path,
        *,
        functions: Callable[[], Mapping[str, FunctionStatus]],
        handlers: Callable[[], Mapping[str, str]],
        live_pids: Callable[[], set[int]],
        loaded: LoadedCode,
        restart: Callable[[str], object],
        announce: Callable[[str], None],
        stopping: threading.Event,
    ) -> None:
        self.functions_dir = functions_dir
        self.layer_dir = layer_dir
        self._functions = functions
        self._handlers = handlers
        self._live_pids = live_pids
        self._loaded = loaded
        self._restart = restart
        self._announce = announce
        self._stopping = stopping
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        """Start watching; the line to log."""
        detector = ChangeDetector((self.functions_dir, self.layer_dir))
        self._thread = threading.Thread(
            target=self._watch, args=(detector,), name="local-reloader", daemon=True
        )
        self._thread.start()
        return f"watching {self.shown(self.functions_dir)} and {self.shown(self.layer_dir)} for changes"

    def join(self, timeout: float) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _watch(self, detector: ChangeDetector) -> None:
        while not self._stopping.wait(RELOAD_POLL_SECONDS):
            # Also what a process reported it imported in a version already replaced on disk.
            changed = detector.changes() + self._loaded.take_stale()
            if not changed:
                continue
            # An editor may save in several writes (or several files at once): take them together.
            if self._stopping.wait(RELOAD_SETTLE_SECONDS):
                return
            self.reload_changed(sorted({*changed, *detector.changes()}))

    def reload_changed(self, changed: list[Path]) -> list[str]:
        """Restart the functions these changed files affect (`local.reload`); the names restarted."""
        functions = self._functions()
        packages = {
            name: handler.split(".", 1)[0] for name, handler in self._handlers().items() if name in functions
        }
        loaded = self._loaded.by_function(self._live_pids())
        plan = affected_functions(changed, self.functions_dir, self.layer_dir, packages, loaded)
        reloaded: list[str] = []
        for name, path in plan.items():
            if self._stopping.is_set():
                break
            try:
                self._restart(name)
            except LocalRuntimeError as error:
                self._announce(f"reload of {name} failed ({self.shown(path)} changed): {error}")
                continue
            status = self._functions()[name]
            problem = f"; {status.state}: {status.detail}" if status.state in (INIT_ERROR, MISSING) else ""
            self._announce(f"reloaded {name} ({self.shown(path)} changed){problem}")
            reloaded.append(name)
        return reloaded

    def shown(self, path: Path) -> str:
        """A path as a person reads it: relative to the project (or to the watched root's parent)."""
        for base in (PROJECT_ROOT, self.functions_dir.parent, self.layer_dir.parent):
            if path.is_relative_to(base):
                return str(path.relative_to(base))
        return str(path)
