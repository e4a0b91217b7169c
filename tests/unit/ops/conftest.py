"""Fixtures for the ops CLI; the helpers they use live in `support`."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from moto import mock_aws

from ops.cli import main
from pipeline import aws
from tests.unit.ops.support import (
    ENV_TO_CLEAR,
    Deployed,
    FakeTelegram,
    Result,
    create_resources,
    create_stack,
)


@pytest.fixture(autouse=True)
def aws_environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ENV_TO_CLEAR:
        # setenv first so that monkeypatch restores the variable's original state afterwards,
        # even when the CLI itself sets it (--local, --region).
        monkeypatch.setenv(name, "placeholder")
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-central-1")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "testing")
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    aws.reset_clients()
    yield
    aws.reset_clients()


@pytest.fixture
def deployed() -> Iterator[Deployed]:
    with mock_aws():
        resources = create_resources()
        create_stack(resources)
        yield resources


@pytest.fixture
def telegram(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeTelegram]:
    fake = FakeTelegram()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            params = json.loads(self.rfile.read(length) or b"{}")
            status, body = fake.answer(self.path, params)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the request line holds the bot token."""

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("TELEGRAM_API_BASE", fake.url)
    yield fake
    server.shutdown()
    server.server_close()
    assert not fake.invalid, "Bot API calls refused by aiogram's method models"


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    def run_cli(*argv: str) -> Result:
        code = main(list(argv))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run_cli
