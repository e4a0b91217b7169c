"""The local runtime's processes: the moto server and each function's, supervised as Lambda does.

`Fleet` starts the processes (`local.child_process`), one per function or a queue consumer's
workers (`local.worker_pool`), keeps each function's `FunctionStatus` from its status messages,
restarts a process that dies or times out (a crash backs off, a timeout does not: Lambda discards
that environment and starts another), adds workers while messages wait, and replaces a function's
processes on request (`restart`). It knows nothing of the stack's resources: the runtime passes
what each process runs and how to count a queue's waiting messages.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from local import loaded_code
from local.child_process import ChildProcess
from local.lambda_host import EXIT_STOPPED, EXIT_TIMED_OUT
from local.stack import LocalRuntimeError
from local.status import INIT_ERROR, MISSING, READY, RESTARTING, STARTING, STOPPED, FunctionStatus
from local.worker_pool import WorkerPool, worker_name

MAX_RESTART_DELAY_SECONDS = 10.0
SUPERVISION_SECONDS = 0.2


class Fleet:
    """Every process of the runtime by name (`moto`, `webhook`, `bot`, `bot#2`, ...)."""

    def __init__(
        self,
        log_dir: Path,
        log: Callable[[str], None],
        *,
        visible_messages: Callable[[str], int],
        scale_on_demand: bool = True,
    ) -> None:
        self.log_dir = log_dir
        self.log = log
        self.visible_messages = visible_messages
        self.scale_on_demand = scale_on_demand
        self.functions: dict[str, FunctionStatus] = {}
        self.children: dict[str, ChildProcess] = {}
        # Each function's processes: a queue consumer's workers, one process for the others.
        self.pools: dict[str, WorkerPool] = {}
        self.failure: str | None = None
        self.moto_port = 0
        self.api_port = 0
        self.api_listening = False
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.stopping = threading.Event()
        # Held by each supervision pass, and by `restart` while it replaces processes.
        self.supervision = threading.Lock()
        self._supervisor: threading.Thread | None = None
        # The files of functions/ each function process has imported, as it reports them.
        self.loaded_code = loaded_code.LoadedCode()

    # -- moto ------------------------------------------------------------------------------------
    def start_moto(self, args: Callable[[], list[str]], env: dict[str, str], timeout: float) -> None:
        child = ChildProcess(
            name="moto",
            module="local.moto_process",
            args=args,
            env=env,
            log_path=self.log_dir / "moto.log",
            on_message=self._on_moto_message,
        )
        self.children["moto"] = child
        child.start()
        deadline = time.monotonic() + timeout
        with self.changed:
            while not self.moto_port:
                if child.exit_code is not None:
                    raise LocalRuntimeError(f"the moto server exited at start; see {child.log_path}")
                if time.monotonic() > deadline:
                    raise LocalRuntimeError(
                        f"the moto server did not start within {timeout:.0f}s; see {child.log_path}"
                    )
                self.changed.wait(0.1)

    def _on_moto_message(self, child: ChildProcess, message: dict[str, Any]) -> None:
        if message.get("event") == "listening":
            with self.changed:
                self.moto_port = int(message["port"])
                self.changed.notify_all()

    def moto_running(self) -> bool:
        moto = self.children.get("moto")
        return moto is not None and moto.exit_code is None

    # -- functions ----------------------------------------------------------------------------------
    def add_function(
        self,
        status: FunctionStatus,
        module: str,
        args: Callable[[], list[str]],
        env: dict[str, str],
        max_workers: int = 1,
    ) -> None:
        """Start a function's process (a queue consumer's first workers, `local.worker_pool`)."""
        self.functions[status.name] = status
        listeners: list[Callable[[dict[str, Any]], None]] = []

        def make_worker(index: int) -> ChildProcess:
            return ChildProcess(
                name=worker_name(status.name, index),
                function=status.name,
                module=module,
                args=args,
                env=env,
                # One log per process: workers writing one file would interleave their lines.
                log_path=self.log_dir / f"{worker_name(status.name, index)}.log",
                on_message=self.on_function_message,
                _listeners=listeners,
            )

        pool = WorkerPool(status.name, max_workers, make_worker, on_demand=self.scale_on_demand)
        self.pools[status.name] = pool
        status.max_workers = max_workers
        for worker in pool.start():
            self.children[worker.name] = worker
        status.workers = len(pool.workers)

    def on_status(self, name: str, listener: Callable[[dict[str, Any]], None]) -> None:
        """Call `listener` with each status message of function `name`'s processes (`Runtime.on_status`)."""
        self.children[name]._listeners.append(listener)  # shared by all of the function's workers

    def on_function_message(self, child: ChildProcess, message: dict[str, Any]) -> None:
        with self.changed:
            status = self.functions[child.function]
            if message.get("event") == "listening":
                self.api_port = int(message["port"])
                self.api_listening = True
            # The function's state is its first worker's (the others load the same handler).
            if message.get("event") != "state" or child.name == child.function:
                status.apply(message, worker=child.name)
            if message.get("event") == loaded_code.EVENT:
                self.loaded_code.record(child.function, message)
            if message.get("event") == "invocation":
                child.crashes_in_a_row = 0
            self.changed.notify_all()

    def live_pids(self) -> set[int]:
        return {c.process.pid for c in self.children.values() if c.process is not None}

    # -- supervision --------------------------------------------------------------------------------
    def start_supervisor(self) -> None:
        self._supervisor = threading.Thread(target=self._supervise, name="local-supervisor", daemon=True)
        self._supervisor.start()

    def _supervise(self) -> None:
        while not self.stopping.wait(SUPERVISION_SECONDS):
            with self.supervision:
                for child in list(self.children.values()):
                    self._check(child)
                for pool in list(self.pools.values()):
                    if len(pool.workers) < pool.maximum:
                        self._scale_up(pool)

    def _check(self, child: ChildProcess) -> None:
        code = child.exit_code
        if code is None or self.stopping.is_set():
            return
        if child.name == "moto":
            with self.changed:
                if self.failure is None:
                    self.failure = f"the moto server exited (code {code}); see {child.log_path}"
                    self.log(self.failure)
                self.changed.notify_all()
            return
        now = time.monotonic()
        if child.restart_at is None:
            # A timeout is Lambda discarding the environment: start a new one at once. A crash
            # backs off, so a handler that dies on import does not spin.
            if code == EXIT_TIMED_OUT:
                delay = 0.0
            else:
                child.crashes_in_a_row += 1
                delay = min(MAX_RESTART_DELAY_SECONDS, 0.5 * 2 ** (child.crashes_in_a_row - 1))
            child.restart_at = now + delay
            self.log(f"{child.name} exited with code {code}; starting a new one in {delay:.1f}s")
            with self.changed:
                status = self.functions[child.function]
                status.restarts += 1
                status.busy_workers.discard(child.name)
                if child.name == child.function:
                    status.state = RESTARTING
                if code not in (EXIT_STOPPED, EXIT_TIMED_OUT):
                    status.detail = f"exit code {code}; see {child.log_path}"
                    status.crashed(code)
                self.changed.notify_all()
            child.stop()
        if child.restart_at is not None and now >= child.restart_at:
            child.start()

    def _scale_up(self, pool: WorkerPool) -> None:
        """Another worker for a consumer whose workers are all busy while messages wait."""
        status = self.functions[pool.function]
        if status.state != READY or self.stopping.is_set():
            return
        with self.lock:
            busy = set(status.busy_workers)
        worker = pool.scale_up(busy, lambda: self.visible_messages(pool.function))
        if worker is None:
            return
        self.children[worker.name] = worker
        with self.lock:
            status.workers = len(pool.workers)
        self.log(f"{worker.name} started: every {pool.function} worker busy, messages waiting")

    def wait_started(self, timeout: float, log_dir: Path) -> None:
        """Until the API listens and every function has said whether its handler loaded."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                settled = all(
                    status.state in (READY, MISSING, INIT_ERROR) for status in self.functions.values()
                )
                if settled and self.api_listening:
                    return
                if self.failure:
                    raise LocalRuntimeError(self.failure)
                webhook = self.functions["webhook"]
                if webhook.state == INIT_ERROR and not self.api_listening:
                    raise LocalRuntimeError(f"the API could not start: {webhook.detail}")
                if time.monotonic() > deadline:
                    waiting = [
                        s.name for s in self.functions.values() if s.state not in (READY, MISSING, INIT_ERROR)
                    ]
                    raise LocalRuntimeError(f"not started within {timeout:.0f}s: {waiting}; see {log_dir}")
                self.changed.wait(0.2)

    def restart(self, names: Iterable[str], timeout: float) -> dict[str, float]:
        """Replace the named functions' processes in turn (`Runtime.restart_functions`)."""
        names = list(names)
        unknown = [name for name in names if name not in self.functions]
        if unknown:
            raise ValueError(f"no such function(s): {unknown}")
        init_seconds: dict[str, float] = {}
        for name in names:
            workers = self.pools[name].workers
            with self.supervision:
                if self.stopping.is_set():  # `stop()` ends them all; never start one behind it
                    break
                stop_together(workers)
                with self.changed:
                    status = self.functions[name]
                    status.state, status.detail = STARTING, None
                    status.busy_workers.clear()
                    if status.kind == "api":
                        self.api_listening = False
                started = time.monotonic()
                for worker in workers:
                    worker.start()
            self.log(f"{name} restarted on request ({len(workers)} process(es))")
            self.wait_started(timeout, self.log_dir)
            init_seconds[name] = time.monotonic() - started
        return init_seconds

    def restart_all(
        self, before_moto_stops: Callable[[], None], start_moto: Callable[[], None], after: Callable[[], None]
    ) -> None:
        """Every process stopped and started again (`Runtime.restart_pipeline`): the functions
        (each finishes its invocation), `before_moto_stops()`, moto; then `start_moto()`, `after()`,
        the functions' processes again. The supervisor waits meanwhile: moto being down is no failure."""
        with self.supervision:
            processes = [child for child in self.children.values() if child.name != "moto"]
            stop_together(processes)
            before_moto_stops()
            self.children["moto"].stop()
            with self.changed:
                self.moto_port, self.api_listening = 0, False
                for status in self.functions.values():
                    status.state, status.detail = STARTING, None
                    status.busy_workers.clear()
            start_moto()
            after()
            for child in processes:
                child.restart_at = None
                child.start()

    # -- stop -----------------------------------------------------------------------------------------
    def stop_functions(self) -> None:
        """Stop supervising, then every process but moto's (side by side)."""
        self.stopping.set()
        if self._supervisor is not None:
            self._supervisor.join(2)
        with self.supervision:
            pass  # a restart in progress (a reload's) has started its process: stopped below
        stop_together([child for child in list(self.children.values()) if child.name != "moto"])

    def stop_moto(self) -> None:
        if "moto" in self.children:
            self.children["moto"].stop()
        with self.lock:
            for status in self.functions.values():
                status.state = STOPPED
                status.busy_workers.clear()


def stop_together(children: list[ChildProcess]) -> None:
    """Stop these processes side by side (each may finish an invocation first)."""
    stoppers = [threading.Thread(target=child.stop) for child in children]
    for thread in stoppers:
        thread.start()
    for thread in stoppers:
        thread.join()
