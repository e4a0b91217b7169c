"""One local Lambda execution environment: load a handler, invoke it with a context and a timeout.

Runs inside a function's own subprocess (the webhook's API server, a consumer's SQS poller, the
reconciler's scheduler), whose environment is exactly the function's Lambda environment. As in
Lambda, invocations in one environment never overlap, and a handler that outlives its timeout is
not waited for: the environment reports "timed out" and the process exits, so the parent starts
a fresh one (Lambda discards the execution environment the same way).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import re
import signal
import sys
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any
from urllib.parse import urlsplit

from local import aws_calls
from local.loaded_code import EVENT as CODE_EVENT
from local.loaded_code import ImportedFiles
from pipeline import snapstart

ACCOUNT_ID = "123456789012"
# Process exit codes the parent's supervisor reads.
EXIT_STOPPED = 0
EXIT_TIMED_OUT = 5
# How often a process without a loadable handler tries again (a handler being written appears).
RELOAD_SECONDS = 5.0

Handler = Callable[[dict[str, Any], Any], Any]
# A SnapStart function's "ready" state detail (`load`): its init was followed by its runtime hooks.
RESTORED = "restored from a SnapStart snapshot"


def run_snapshot_hooks() -> int:
    """What Lambda does between a SnapStart version's init and its first invocation: the
    before-snapshot hooks in the reverse order of their registration, then (in the environment
    resumed from the snapshot) the after-restore hooks in that order (`snapshot_restore_py`, which
    Lambda's Python runtimes include). An exception fails the init, as it fails the publish or the
    restore there. How many hooks ran."""
    import snapshot_restore_py

    for hook, args, kwargs in reversed(snapshot_restore_py.get_before_snapshot()):
        hook(*args, **kwargs)
    for hook, args, kwargs in snapshot_restore_py.get_after_restore():
        hook(*args, **kwargs)
    return len(snapshot_restore_py.get_before_snapshot()) + len(snapshot_restore_py.get_after_restore())


class LocalLambdaContext:
    """The context object Lambda passes to a Python handler (the attributes Powertools reads)."""

    def __init__(self, function_name: str, memory_mb: int, timeout_seconds: float, region: str) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:{region}:{ACCOUNT_ID}:function:{function_name}"
        self.memory_limit_in_mb = memory_mb
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = f"{time.strftime('%Y/%m/%d')}/[$LATEST]{uuid.uuid4().hex}"
        self.identity = None
        self.client_context = None
        self.tenant_id = None
        self._deadline = time.monotonic() + timeout_seconds

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


@dataclass
class Invocation:
    """How one invocation ended."""

    result: Any = None
    error: str | None = None
    timed_out: bool = False
    duration_ms: int = 0
    request_id: str = ""
    # What the handler's thread did besides its work: CPU time (Lambda runs an invocation at the
    # memory's share of a vCPU: `bench latency` scales it), botocore clients built and modules
    # imported. A function's init makes both ready (`pipeline.aws.prepare`): a first invocation
    # that builds or imports one pays for it at that share.
    cpu_ms: float = 0.0
    clients_built: int = 0
    imported: list[str] = field(default_factory=list)
    # The CPU ms the handler's thread had spent when each kind of call first left (`CallMarks`).
    cpu_ms_at: dict[str, float] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None and not self.timed_out

    def work(self) -> dict[str, Any]:
        """What an invocation report says of the handler's own work besides its outcome."""
        return {
            "cpu_ms": self.cpu_ms,
            "clients_built": self.clients_built,
            "imported": self.imported,
            "cpu_ms_at": self.cpu_ms_at,
        }


class _BotocoreWatch:
    """What a host watches through botocore's built-in handlers (every session made afterwards
    emits to them), installed once per process (its one execution environment)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._installed = False

    def install(self) -> None:
        with self._lock:
            if self._installed:
                return
            self._installed = True
        from botocore.handlers import BUILTIN_HANDLERS

        self._register(BUILTIN_HANDLERS)

    def _register(self, handlers: list[tuple[Any, ...]]) -> None:
        raise NotImplementedError


class ClientBuilds(_BotocoreWatch):
    """The botocore clients built, by thread (botocore's `creating-client-class` event)."""

    def __init__(self) -> None:
        super().__init__()
        self._by_thread: dict[int, int] = {}

    def _register(self, handlers: list[tuple[Any, ...]]) -> None:
        handlers.append(("creating-client-class", self.on_build))

    def on_build(self, **_: Any) -> None:
        with self._lock:
            thread = threading.get_ident()
            self._by_thread[thread] = self._by_thread.get(thread, 0) + 1

    def of_thread(self, thread: int) -> int:
        with self._lock:
            return self._by_thread.get(thread, 0)


CLIENT_BUILDS = ClientBuilds()

# A Bot API method, as the last segment of its request's path (the token is the one before it).
_BOT_API_METHOD = re.compile(rb"[A-Za-z]{1,64}")


class CallMarks(_BotocoreWatch):
    """When each kind of outgoing call first left during an invocation, in the handler's thread's
    CPU time: an AWS operation as botocore sends it (its `before-send` event: "sns.Publish") and a
    Bot API method sent to the Telegram API the function is configured with (`TELEGRAM_API_BASE`,
    Python's `http.client.send` audit event: "telegram.sendMessage"; the method only, never the
    path's token). `bench latency` stretches to Lambda's CPU share what a reply's path spent
    before its call left, not what the invocation did after it (the journal's completion, the
    log line): that runs while the reply is already on its way."""

    def __init__(self) -> None:
        super().__init__()
        self._by_thread: dict[int, dict[str, float]] = {}

    def _register(self, handlers: list[tuple[Any, ...]]) -> None:
        handlers.append(("before-send", self.on_aws_send))
        sys.addaudithook(self.on_audit)

    @contextlib.contextmanager
    def recording(self, marks: dict[str, float]) -> Iterator[None]:
        """Record into `marks` what the calling thread sends while the block runs."""
        thread = threading.get_ident()
        with self._lock:
            self._by_thread[thread] = marks
        try:
            yield
        finally:
            with self._lock:
                self._by_thread.pop(thread, None)

    def _mark(self, name: str) -> None:
        marks = self._by_thread.get(threading.get_ident())
        if marks is not None and name not in marks:
            marks[name] = time.thread_time()

    def on_aws_send(self, event_name: str = "", **_: Any) -> None:
        """botocore's `before-send.<service>.<Operation>`; returns None (a value would be the answer)."""
        parts = event_name.split(".")
        if len(parts) >= 3:
            self._mark(f"{parts[1]}.{parts[2]}")

    def on_audit(self, event: str, args: tuple[Any, ...]) -> None:
        if event != "http.client.send" or threading.get_ident() not in self._by_thread:
            return
        try:  # an audit hook's exception would fail the send itself
            connection, data = args
            telegram = _address(os.environ.get("TELEGRAM_API_BASE", ""))
            if telegram is None or (connection.host, connection.port) != telegram:
                return
            request_line = bytes(data).split(b"\r\n", 1)[0].split(b" ")
            if len(request_line) != 3 or not request_line[2].startswith(b"HTTP/"):
                return  # a body, not a request's head
            method = request_line[1].split(b"?", 1)[0].rstrip(b"/").rsplit(b"/", 1)[-1]
            if _BOT_API_METHOD.fullmatch(method):
                self._mark(f"telegram.{method.decode()}")
        except Exception:  # noqa: S110 - a mark missed is a figure missing (`bench latency` fails then)
            pass


CALL_MARKS = CallMarks()


@functools.lru_cache(maxsize=8)
def _address(base_url: str) -> tuple[str, int] | None:
    """(host, port) an `http.client` connection to `base_url` has; parsed once per URL, as the
    audit hook sees every request the handler's thread sends (and its CPU is the invocation's)."""
    url = urlsplit(base_url)
    if not url.hostname:
        return None
    return url.hostname, url.port or (443 if url.scheme == "https" else 80)


@dataclass
class FunctionHost:
    """Imports `handler` ("<package>.app.lambda_handler") once and invokes it one event at a time."""

    handler_path: str
    function_name: str
    timeout_seconds: float
    memory_mb: int
    region: str = field(default_factory=lambda: os.environ.get("AWS_REGION", "eu-central-1"))
    handler: Handler | None = None
    module: Any = None
    # Where it tells the runtime which files of functions/ it imported (`local.loaded_code`).
    status: StatusChannel | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _imported: ImportedFiles | None = field(default_factory=ImportedFiles.from_environment)
    _client_builds: ClientBuilds = CLIENT_BUILDS

    def report_code(self) -> None:
        """Send the files of functions/ this process has imported, when they changed since the last report."""
        if self._imported is None or self.status is None:
            return
        files = self._imported.changed()
        if files is not None:
            self.status.send(CODE_EVENT, pid=os.getpid(), files=files)

    def load(self) -> tuple[str, str | None]:
        """("ready", None), ("missing handler", detail) or ("init error", detail)."""
        # Before the handler's modules load: their boto3 sessions are then recorded (local.aws_calls).
        aws_calls.install_from_environment(ACCOUNT_ID)
        self._client_builds.install()
        CALL_MARKS.install()
        module_name, _, attribute = self.handler_path.rpartition(".")
        package = module_name.split(".", 1)[0]
        try:
            try:
                self.module = importlib.import_module(module_name)
            finally:
                self.report_code()  # also what a failed import loaded: a fix to it must restart it
        except ModuleNotFoundError as error:
            if error.name is not None and (
                error.name == module_name or module_name.startswith(f"{error.name}.")
            ):
                return "missing handler", f"no module {module_name} (functions/{package}/)"
            traceback.print_exc()
            return "init error", f"{type(error).__name__}: {error}"
        except Exception as error:
            traceback.print_exc()
            return "init error", f"{type(error).__name__}: {error}"
        handler = getattr(self.module, attribute, None)
        if not callable(handler):
            return "missing handler", f"{module_name} has no callable {attribute}"
        restored = None
        if os.environ.get(snapstart.INIT_TYPE_ENV) == snapstart.SNAPSHOT_INIT:
            try:
                hooks = run_snapshot_hooks()
            except Exception as error:
                traceback.print_exc()
                return "init error", f"a SnapStart runtime hook failed: {type(error).__name__}: {error}"
            restored = f"{RESTORED}: {hooks} runtime hook{'' if hooks == 1 else 's'} ran"
        self.handler = handler
        return "ready", restored

    def invoke(self, event: dict[str, Any]) -> Invocation:
        """Run the handler on `event`; a timeout leaves the handler's thread behind (the caller exits)."""
        if self.handler is None:
            raise RuntimeError("load() the handler first")
        handler = self.handler
        with self._lock:
            context = LocalLambdaContext(
                self.function_name, self.memory_mb, self.timeout_seconds, self.region
            )
            outcome = Invocation(request_id=context.aws_request_id)
            started = time.monotonic()

            def run() -> None:
                modules, cpu = set(sys.modules), time.thread_time()
                built = self._client_builds.of_thread(threading.get_ident())
                marks: dict[str, float] = {}
                try:
                    with CALL_MARKS.recording(marks):
                        # Lambda serialises the result to JSON: a handler returning something
                        # that cannot be serialised fails there, so it fails here too.
                        outcome.result = json.loads(json.dumps(handler(event, context)))
                except Exception as error:
                    outcome.error = f"{type(error).__name__}: {error}"
                    traceback.print_exc()
                finally:
                    outcome.cpu_ms = round((time.thread_time() - cpu) * 1000, 3)
                    outcome.cpu_ms_at = {name: round((at - cpu) * 1000, 3) for name, at in marks.items()}
                    outcome.clients_built = self._client_builds.of_thread(threading.get_ident()) - built
                    outcome.imported = sorted(set(sys.modules) - modules)

            thread = threading.Thread(target=run, name=f"invoke-{context.aws_request_id}", daemon=True)
            thread.start()
            thread.join(self.timeout_seconds)
            outcome.duration_ms = int((time.monotonic() - started) * 1000)
            if not thread.is_alive():
                self.report_code()  # what the invocation imported (the bot's Application at its first)
            if thread.is_alive():
                outcome.timed_out = True
                print(
                    f"{context.aws_request_id} Task timed out after {self.timeout_seconds:.2f} seconds",
                    file=sys.stderr,
                    flush=True,
                )
            return outcome

    def discover_counts(self) -> dict[str, int] | None:
        """Outcome counts of the module's `ConsumerWorker` (processed, duplicate, retry, dead_lettered)."""
        try:
            from pipeline.worker import ConsumerWorker
        except ImportError:
            return None
        for value in vars(self.module).values() if self.module is not None else ():
            if isinstance(value, ConsumerWorker):
                return dict(value.counts)
        return None

    def discover_last_failure(self) -> str | None:
        """The reason of the module's `ConsumerWorker`'s last outcome: a retry, a dead letter or a pause."""
        try:
            from pipeline.worker import ConsumerWorker
        except ImportError:
            return None
        for value in vars(self.module).values() if self.module is not None else ():
            if isinstance(value, ConsumerWorker):
                outcome = value.last_outcome
                if outcome is not None and outcome.status in ("retry", "dead_lettered", "paused"):
                    return outcome.reason
        return None


class StatusChannel:
    """JSON lines to the parent over an inherited pipe (stdout and stderr are the function's logs)."""

    def __init__(self, fd: int | None) -> None:
        self._stream: IO[str] | None = os.fdopen(fd, "w", buffering=1) if fd is not None else None
        self._lock = threading.Lock()

    def send(self, event: str, **fields: Any) -> None:
        if self._stream is None:
            return
        with self._lock, contextlib.suppress(OSError, ValueError):
            self._stream.write(json.dumps({"event": event, "time": time.time(), **fields}) + "\n")


class Stopper:
    """SIGTERM/SIGINT ask the process to finish its current invocation and exit quietly."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._parent = os.getppid()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.event.set()

    @property
    def stopping(self) -> bool:
        # A parent that died without stopping us (kill -9) must not leave orphans polling.
        if os.getppid() != self._parent:
            self.event.set()
        return self.event.is_set()

    def wait(self, seconds: float) -> bool:
        return self.event.wait(seconds) or self.stopping


def exit_now(code: int) -> None:
    """Leave without waiting for a handler thread that timed out (as Lambda discards it)."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@contextlib.contextmanager
def quiet_interrupts() -> Iterator[None]:
    """No traceback when the process is interrupted while it winds down."""
    try:
        yield
    except KeyboardInterrupt:
        exit_now(EXIT_STOPPED)


def wait_for_handler(host: FunctionHost, status: StatusChannel, stopper: Stopper) -> bool:
    """Load the handler, retrying while it is missing or fails to initialise; False when stopped.

    Lambda retries a failed init on the next invocation; locally the process keeps its queue
    untouched meanwhile, so no message is burnt on a handler that does not exist yet.
    """
    last: tuple[str, str | None] | None = None
    while True:
        state = host.load()
        if state != last:
            status.send("state", state=state[0], detail=state[1])
            last = state
        if state[0] == "ready":
            return True
        if stopper.wait(RELOAD_SECONDS):
            return False
