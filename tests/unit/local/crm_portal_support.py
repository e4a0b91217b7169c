"""Helpers for the CRM portal stand-ins' tests: a receiving handler, HTTP calls, a fixed clock.

The fixtures (`receiver`, `portal`, `amo`) are in this directory's conftest.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeVar

from local.fakes.amocrm import AmoCrmFake
from local.fakes.base import FakeService
from local.fakes.bitrix24 import Bitrix24PortalFake

T0 = 1_796_000_000  # 2026-12-01, a fixed clock: each change is one second after the previous one


# -- a receiving handler ---------------------------------------------------------------------------
@dataclass
class Post:
    path: str
    headers: dict[str, str]
    body: bytes

    def pairs(self) -> list[tuple[str, str]]:
        return urllib.parse.parse_qsl(self.body.decode(), keep_blank_values=True, strict_parsing=True)

    def form(self) -> dict[str, str]:
        return dict(self.pairs())


@dataclass
class Receiver:
    """Records every POST; answers `status` with `answer` (and may call `on_post` first)."""

    status: int = 200
    answer: Any = field(default_factory=lambda: {"ok": True})
    on_post: Callable[[Post], None] | None = None
    posts: list[Post] = field(default_factory=list)
    url: str = ""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                post = Post(self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                receiver.posts.append(post)
                if receiver.on_post is not None:
                    receiver.on_post(post)
                raw = json.dumps(receiver.answer).encode()
                self.send_response(receiver.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        return Handler

    def wait_for(self, count: int, timeout: float = 5.0) -> list[Post]:
        """The posts once there are at least `count` (AssertionError after `timeout` seconds)."""
        deadline = time.monotonic() + timeout
        while len(self.posts) < count:
            assert time.monotonic() < deadline, f"{len(self.posts)} posts, expected {count}"
            time.sleep(0.02)
        return list(self.posts)


Fake = TypeVar("Fake", bound=FakeService)


@contextmanager
def running(fake: Fake) -> Iterator[Fake]:
    """The fake started, and stopped afterwards (typed as itself, unlike `with fake`)."""
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


def http(
    url: str,
    method: str = "GET",
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, data=body, method=method, headers=headers or {})  # noqa: S310
    try:
        with urllib.request.urlopen(req, timeout=5) as response:  # noqa: S310 - a loopback fake
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, {k.lower(): v for k, v in error.headers.items()}, error.read()


def control(fake: FakeService, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    status, _, raw = http(f"{fake.url}{path}", method, data, {"Content-Type": "application/json"})
    return status, json.loads(raw or b"null")


def rest(
    portal: Bitrix24PortalFake, method: str, params: dict[str, Any], transport: str = "json"
) -> tuple[int, Any]:
    """A REST call through the inbound webhook, the parameters sent as `transport` says."""
    url = f"{portal.rest_url()}{method}.json"
    if transport == "query":
        status, _, raw = http(f"{url}?{urllib.parse.urlencode(params)}")
    elif transport == "form":
        form = urllib.parse.urlencode(params).encode()
        status, _, raw = http(url, "POST", form, {"Content-Type": "application/x-www-form-urlencoded"})
    else:
        status, _, raw = http(url, "POST", json.dumps(params).encode(), {"Content-Type": "application/json"})
    return status, json.loads(raw)


def rest_fields(
    portal: Bitrix24PortalFake, method: str, fields: list[tuple[str, str]], transport: str = "form"
) -> tuple[int, Any]:
    """A REST call with PHP-style fields (`filter[>ID]=5`, `select[]=ID`) as a form body or a query."""
    url, encoded = f"{portal.rest_url()}{method}.json", urllib.parse.urlencode(fields)
    if transport == "query":
        status, _, raw = http(f"{url}?{encoded}")
    else:
        form = {"Content-Type": "application/x-www-form-urlencoded"}
        status, _, raw = http(url, "POST", encoded.encode(), form)
    return status, json.loads(raw)


AMO_TOKEN = object()  # amo_get's default: the fake's own token


def amo_get(amo: AmoCrmFake, path: str, token: object = AMO_TOKEN) -> tuple[int, dict[str, str], bytes]:
    """An API call with `Authorization: Bearer <token>` (none when token is None)."""
    bearer = amo.token if token is AMO_TOKEN else token
    return http(
        f"{amo.base_url}{path}", headers={} if bearer is None else {"Authorization": f"Bearer {bearer}"}
    )


def fixed_clock() -> float:
    return T0


@contextmanager
def serving(receiver: Receiver) -> Iterator[Receiver]:
    """The receiver listening on loopback (its `url` set), until the block ends."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), receiver.handler())
    server.daemon_threads = True
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/crm/events/token"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
