"""What every local stand-in for an outside service shares: recording, fault injection, downtime.

A fake is a small threaded HTTP server on loopback. Each service subclass answers its own API in
`answer()` and shapes its errors in `error_response()`; this base adds the control endpoints
users and tests rehearse failures with:

- `GET /_calls`: every call received (method, path with credentials masked, headers without
  authentication, body, the fault applied); `DELETE /_calls` forgets them.
- `POST /_faults`: `{"fail_next": N, "status": 500}`, `{"rate_limit_next": N, "retry_after": 7}`,
  `{"hang_next": N, "seconds": 40}`, `{"drop_answer_next": N}`, `{"down_for": 30}`, optionally
  with `"match": "<substring of the path>"` to aim at one API method; `GET /_faults` shows what
  is pending; `DELETE /_faults` clears everything.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
import urllib.parse
from collections import deque
from dataclasses import asdict, dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Literal

from local.http_handler import AnyMethodHandler

LOOPBACK = "127.0.0.1"
CONTROL_PREFIX = "/_"
# Headers that authenticate a caller never appear in `/_calls`.
AUTH_HEADERS = frozenset(
    {"authorization", "x-amz-security-token", "x-api-key", "cookie", "proxy-authorization"}
)
MAX_RECORDED_CALLS = 10_000
MAX_BODY_BYTES = 10 * 1024 * 1024

FaultKind = Literal["fail", "rate_limit", "hang", "drop_answer"]
# Request key -> (fault kind, its option key, the option's default).
FAULT_KEYS: dict[str, tuple[FaultKind, str | None, float]] = {
    "fail_next": ("fail", "status", 500),
    "rate_limit_next": ("rate_limit", "retry_after", 7),
    "hang_next": ("hang", "seconds", 40),
    "drop_answer_next": ("drop_answer", None, 0),
}
OPTION_KEYS = frozenset({"status", "retry_after", "seconds", "match"})


class FaultRequestError(ValueError):
    """A `POST /_faults` body this fake cannot follow; the message says why."""


@dataclass
class Fault:
    """One pending fault: applies to the next `remaining` calls whose path contains `match`."""

    kind: FaultKind
    remaining: int
    status: int = 500
    retry_after: int = 7
    seconds: float = 40.0
    match: str | None = None

    def applies_to(self, path: str) -> bool:
        return self.remaining > 0 and (self.match is None or self.match in path)


@dataclass(frozen=True)
class FakeRequest:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # names lowercased
    body: bytes
    # The query's fields in order, repeated names kept (`query` keeps the last of each).
    query_pairs: tuple[tuple[str, str], ...] = ()

    def json(self) -> Any:
        """The body as JSON, or None when it is empty or not JSON."""
        if not self.body:
            return None
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def field_pairs(self) -> list[tuple[str, str]]:
        """The query's fields, then a form-encoded body's, in order and with repeated names kept."""
        pairs = list(self.query_pairs)
        if "application/x-www-form-urlencoded" in self.headers.get("content-type", ""):
            pairs.extend(urllib.parse.parse_qsl(self.body.decode("utf-8", "replace"), keep_blank_values=True))
        return pairs

    def params(self) -> dict[str, Any]:
        """Query, form-encoded and JSON object parameters merged (later ones win), like most HTTP APIs."""
        params: dict[str, Any] = dict(self.query)
        content_type = self.headers.get("content-type", "")
        if "application/x-www-form-urlencoded" in content_type:
            params.update(
                urllib.parse.parse_qsl(self.body.decode("utf-8", "replace"), keep_blank_values=True)
            )
        else:
            document = self.json()
            if isinstance(document, dict):
                params.update(document)
        return params


@dataclass
class FakeResponse:
    status: int
    body: Any = None  # JSON-serialisable, or bytes sent as is
    headers: dict[str, str] = field(default_factory=dict)

    def encoded(self) -> tuple[bytes, dict[str, str]]:
        headers = dict(self.headers)
        if isinstance(self.body, bytes):
            return self.body, headers
        headers.setdefault("Content-Type", "application/json")
        return json.dumps(self.body).encode(), headers


def parse_fault_request(document: Any) -> tuple[list[Fault], float | None]:
    """The faults and the downtime a `POST /_faults` body asks for; raises `FaultRequestError`."""
    if not isinstance(document, dict) or not document:
        raise FaultRequestError('expected a JSON object such as {"fail_next": 1, "status": 500}')
    unknown = set(document) - set(FAULT_KEYS) - OPTION_KEYS - {"down_for"}
    if unknown:
        known = sorted([*FAULT_KEYS, "down_for", *OPTION_KEYS])
        raise FaultRequestError(f"unknown keys {sorted(unknown)}; known: {known}")
    match = document.get("match")
    if match is not None and (not isinstance(match, str) or not match):
        raise FaultRequestError("match must be a non-empty string (a substring of the request path)")
    faults: list[Fault] = []
    for key, (kind, option, default) in FAULT_KEYS.items():
        if key not in document:
            continue
        count = _number(document, key, minimum=1)
        fault = Fault(kind=kind, remaining=int(count), match=match)
        if option is not None:
            value = _number(document, option, minimum=0) if option in document else default
            setattr(fault, option, int(value) if option != "seconds" else float(value))
        if fault.kind == "fail" and not 400 <= fault.status <= 599:
            raise FaultRequestError("status must be an HTTP error status, 400..599")
        faults.append(fault)
    down_for = _number(document, "down_for", minimum=0) if "down_for" in document else None
    if not faults and down_for is None:
        raise FaultRequestError(
            "no fault given: use fail_next, rate_limit_next, hang_next, drop_answer_next or down_for"
        )
    return faults, down_for


def status_phrase(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return "Error"


def _number(document: dict[str, Any], key: str, minimum: float) -> float:
    value = document[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or value < minimum:
        raise FaultRequestError(f"{key} must be a number >= {minimum}")
    return float(value)


class FakeService:
    """Base of every stand-in; subclasses set `name` and implement `answer()`."""

    name: ClassVar[str] = "fake"

    def __init__(self, host: str = LOOPBACK, port: int = 0) -> None:
        self.host = host
        self._requested_port = port
        self.port = 0
        self._lock = threading.Lock()
        self._calls: deque[dict[str, Any]] = deque(maxlen=MAX_RECORDED_CALLS)
        self._faults: list[Fault] = []
        self._down_until: float | None = None
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._revive_timer: threading.Timer | None = None
        self._stopping = threading.Event()
        self._lifecycle = threading.RLock()

    # -- what subclasses provide -----------------------------------------------------------------
    def answer(self, request: FakeRequest) -> FakeResponse:
        raise NotImplementedError

    def error_response(self, status: int, retry_after: int | None = None) -> FakeResponse:
        """The service's own error shape for an injected failure (overridden per service)."""
        body: dict[str, Any] = {"error": status_phrase(status)}
        headers = {}
        if retry_after is not None:
            body["retry_after"] = retry_after
            headers["Retry-After"] = str(retry_after)
        return FakeResponse(status, body, headers)

    def redact_path(self, path: str) -> str:
        """The path as recorded; services with credentials in the URL mask them."""
        return path

    def throttled(self, request: FakeRequest) -> FakeResponse | None:
        """The service's refusal of an API call past its rate limit, if it enforces one."""
        return None

    def fault_target(self, request: FakeRequest) -> str:
        """What a fault's `match` is compared with: the path, unless the API names calls otherwise."""
        return request.path

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        if not self.port:
            raise RuntimeError(f"{self.name} fake is not started")
        return f"http://{self.host}:{self.port}"

    def start(self) -> FakeService:
        with self._lifecycle:
            self._stopping.clear()
            self._listen(self._requested_port)
        return self

    def stop(self) -> None:
        with self._lifecycle:
            self._stopping.set()
            if self._revive_timer is not None:
                self._revive_timer.cancel()
                self._revive_timer = None
            self._close_listener()

    def __enter__(self) -> FakeService:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def _listen(self, port: int) -> None:
        server = ThreadingHTTPServer((self.host, port), _handler_for(self))
        server.daemon_threads = True
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.1}, name=f"fake-{self.name}", daemon=True
        )
        self._thread.start()

    def _close_listener(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    # -- downtime --------------------------------------------------------------------------------
    def go_down(self, seconds: float) -> None:
        """Close the listening socket for `seconds`: callers get "connection refused"."""
        with self._lifecycle:
            if self._stopping.is_set():
                return
            self._down_until = time.monotonic() + seconds
            self._close_listener()
            if self._revive_timer is not None:
                self._revive_timer.cancel()
            self._revive_timer = threading.Timer(seconds, self.come_back)
            self._revive_timer.daemon = True
            self._revive_timer.start()

    def come_back(self) -> None:
        with self._lifecycle:
            if self._revive_timer is not None:
                self._revive_timer.cancel()
                self._revive_timer = None
            if self._server is None and not self._stopping.is_set():
                try:
                    self._listen(self.port)
                except OSError:
                    # Something else took the port meanwhile: stay down and try again shortly.
                    self._revive_timer = threading.Timer(1.0, self.come_back)
                    self._revive_timer.daemon = True
                    self._revive_timer.start()
                    return
            self._down_until = None

    @property
    def is_down(self) -> bool:
        return self._down_until is not None

    # -- recording and faults (also used in-process by the runtime and tests) ---------------------
    def calls(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._calls)

    def keep_every_call(self) -> None:
        """Record every call from now on, not the last MAX_RECORDED_CALLS (a long campaign's record)."""
        with self._lock:
            self._calls = deque(self._calls)

    def clear_calls(self) -> None:
        with self._lock:
            self._calls.clear()

    def add_faults(self, document: Any) -> dict[str, Any]:
        """Apply a `POST /_faults` body; returns the pending faults."""
        faults, down_for = parse_fault_request(document)
        with self._lock:
            self._faults.extend(faults)
        if down_for is not None:
            # After the answer has gone out: the caller must learn the fault was accepted.
            timer = threading.Timer(0.05, self.go_down, args=(down_for,))
            timer.daemon = True
            timer.start()
        return self.fault_state(down_for)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
        if self.is_down:
            self.come_back()

    def fault_state(self, down_for: float | None = None) -> dict[str, Any]:
        with self._lock:
            pending = [asdict(fault) for fault in self._faults if fault.remaining > 0]
        down = down_for if down_for is not None else self._down_remaining()
        return {"pending": pending, "down_for": down}

    def _down_remaining(self) -> float | None:
        until = self._down_until
        return None if until is None else max(0.0, round(until - time.monotonic(), 1))

    def take_fault(self, path: str) -> Fault | None:
        """The fault for this call, if any, counting it down."""
        with self._lock:
            for fault in self._faults:
                if fault.applies_to(path):
                    fault.remaining -= 1
                    taken = Fault(**asdict(fault))
                    break
            else:
                return None
            self._faults = [fault for fault in self._faults if fault.remaining > 0]
            return taken

    def record(self, request: FakeRequest, fault: Fault | None) -> dict[str, Any]:
        """Keep the call (`/_calls`); its `status` is set once it is answered (None: no answer
        was made, e.g. a hang cut short by a stop)."""
        document = request.json()
        if document is None and request.body:
            content_type = request.headers.get("content-type", "")
            if "application/x-www-form-urlencoded" in content_type:
                document = dict(urllib.parse.parse_qsl(request.body.decode("utf-8", "replace")))
            else:
                document = request.body.decode("utf-8", "replace")
        call = {
            "method": request.method,
            "path": self.redact_path(request.path),
            "query": request.query,
            "headers": {name: value for name, value in request.headers.items() if name not in AUTH_HEADERS},
            "body": document,
            "fault": fault.kind if fault else None,
            # How long a hang held the answer back: longer than its caller waits is an answer lost.
            "fault_seconds": fault.seconds if fault is not None and fault.kind == "hang" else None,
            "time": time.time(),
            "status": None,
        }
        with self._lock:
            self._calls.append(call)
        return call

    def wait_stopping(self, seconds: float) -> bool:
        """Sleep up to `seconds` (a hang); True if the fake is being stopped meanwhile."""
        return self._stopping.wait(seconds)

    # -- control endpoints ------------------------------------------------------------------------
    def control(self, request: FakeRequest) -> FakeResponse:
        route = (request.method, request.path)
        if route == ("GET", "/_calls"):
            return FakeResponse(200, self.calls())
        if route == ("DELETE", "/_calls"):
            self.clear_calls()
            return FakeResponse(200, {"cleared": True})
        if route == ("GET", "/_faults"):
            return FakeResponse(200, self.fault_state())
        if route == ("POST", "/_faults"):
            try:
                return FakeResponse(200, self.add_faults(request.json()), {"Connection": "close"})
            except FaultRequestError as error:
                return FakeResponse(400, {"error": str(error)})
        if route == ("DELETE", "/_faults"):
            self.clear_faults()
            return FakeResponse(200, self.fault_state())
        return FakeResponse(404, {"error": f"no control endpoint {request.method} {request.path}"})


def _handler_for(service: FakeService) -> type[BaseHTTPRequestHandler]:
    class Handler(_FakeRequestHandler):
        fake = service

    return Handler


class _FakeRequestHandler(AnyMethodHandler):
    """Reads a request, applies control routes or faults, and delegates the rest to the service."""

    fake: ClassVar[FakeService]
    server_version = "LocalFake/1.0"
    # HTTP/1.0: one request per connection, so downtime and dropped answers behave plainly.
    protocol_version = "HTTP/1.0"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: `/_calls` is the record of what arrived."""

    def _read_request(self) -> FakeRequest:
        parsed = urllib.parse.urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(length, MAX_BODY_BYTES)) if length > 0 else b""
        query_pairs = tuple(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True))
        return FakeRequest(
            method=self.command,
            path=parsed.path,
            query=dict(query_pairs),
            headers={name.lower(): value for name, value in self.headers.items()},
            body=body,
            query_pairs=query_pairs,
        )

    def _serve(self) -> None:
        fake = self.fake
        if fake.is_down:
            self._drop()
            return
        request = self._read_request()
        if request.path.startswith(CONTROL_PREFIX):
            self._send(fake.control(request))
            return
        fault = fake.take_fault(fake.fault_target(request))
        call = fake.record(request, fault)
        if fault is not None and fault.kind == "fail":
            self._send(fake.error_response(fault.status))
            return
        if fault is not None and fault.kind == "rate_limit":
            self._send(fake.error_response(429, fault.retry_after))
            return
        if fault is not None and fault.kind == "hang" and fake.wait_stopping(fault.seconds):
            self._drop()
            return
        refusal = fake.throttled(request)
        if refusal is not None:
            self._send(refusal)
            return
        response = fake.answer(request)
        # What the service answered, sent or (drop_answer) not: only a 2xx took effect.
        call["status"] = response.status
        if fault is not None and fault.kind == "drop_answer":
            self._drop()
            return
        self._send(response)

    def _send(self, response: FakeResponse) -> None:
        body, headers = response.encoded()
        self.send_response(response.status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        with contextlib.suppress(OSError):
            self.wfile.write(body)

    def _drop(self) -> None:
        """Close the connection without a word: the caller sees it end with no response."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)
