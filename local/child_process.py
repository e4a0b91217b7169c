"""A supervised subprocess of the local runtime (the moto server, a function's process)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from local.settings import PROJECT_ROOT

STOP_GRACE_SECONDS = 5.0


@dataclass
class ChildProcess:
    """One supervised subprocess: `python -m <module> ...`, logs to a file, status over a pipe.

    A function may run in several (a queue consumer's workers, `local.worker_pool`): `name` is the
    process's (`bot`, `bot#2`), `function` the function's (`bot`).
    """

    name: str
    module: str
    args: Callable[[], list[str]]  # re-evaluated on each start (the API's port is learned once)
    env: dict[str, str]
    log_path: Path
    on_message: Callable[[ChildProcess, dict[str, Any]], None]
    process: subprocess.Popen[bytes] | None = None
    crashes_in_a_row: int = 0
    restart_at: float | None = None
    started_at: float = 0.0
    _log: IO[bytes] | None = None
    _reader: threading.Thread | None = None
    function: str = ""
    # Who hears each status message; a function's workers share one list (`Runtime.on_status`).
    _listeners: list[Callable[[dict[str, Any]], None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.function = self.function or self.name

    def start(self) -> None:
        read_fd, write_fd = os.pipe()
        # A fresh log per run; a restarted process appends to its predecessor's.
        self._log = self.log_path.open("ab" if self.process is not None else "wb")
        try:
            self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                [sys.executable, "-m", self.module, *self.args(), "--status-fd", str(write_fd)],
                env=self.env,
                cwd=PROJECT_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                pass_fds=(write_fd,),
                # Its own process group: Ctrl-C reaches only the parent, which stops children in order.
                start_new_session=True,
            )
        finally:
            os.close(write_fd)
        self.started_at = time.monotonic()
        self.restart_at = None
        self._reader = threading.Thread(
            target=self._read, args=(read_fd,), name=f"status-{self.name}", daemon=True
        )
        self._reader.start()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as stream:
            for line in stream:
                try:
                    message = json.loads(line)
                except ValueError:
                    continue
                if isinstance(message, dict):
                    self.on_message(self, message)
                    # Which worker said it, and whose: a function runs in several (`bot`, `bot#2`).
                    heard = {**message, "worker": self.name, "function": self.function}
                    for listener in list(self._listeners):
                        listener(heard)

    @property
    def exit_code(self) -> int | None:
        return None if self.process is None else self.process.poll()

    def stop(self) -> None:
        process = self.process
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
            try:
                process.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._reader is not None:
            self._reader.join(1)
        if self._log is not None:
            self._log.close()
            self._log = None
