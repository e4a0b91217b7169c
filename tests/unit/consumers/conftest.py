"""Fixtures of the crm, autoreply and ai consumer tests, on top of `tests/unit/conftest.py`.

- `http_fake`: a real HTTP server on 127.0.0.1 (in a thread) that records each request (POST or
  GET) and answers with scripted responses: it plays Telegram's Bot API and the CRMs.
- `put_secret`: a Secrets Manager secret (moto) for a consumer's logical secret name, with
  Powertools' parameter providers and caches reset around the test.
- `run_consumer`: a consumer deployed as the stack does it (queues, environment), whose real
  `lambda_handler` is invoked with SQS events received from its moto queue.

Every test starts with fresh clients (`aws.reset_clients()`); their sessions share one loader of
the service models (`tests/conftest.py`).
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any

import pytest
from moto.core.utils import unix_time_millis
from moto.sqs.models import sqs_backends

from pipeline import aws, secrets
from pipeline.registry import secret_env_var
from tests.unit.consumer_support import (
    ACCOUNT_ID,
    REGION,
    ConsumerQueues,
    Deploy,
    FakeLambdaContext,
    Published,
    failed_ids,
)

# A token shaped like BotFather's; tests assert it never shows up in logs or reasons.
BOT_TOKEN = "7000000001:AAHt0k3n-S3cr3t_ValueThatMustNotLeak"
# The crm consumer's webhook credential and Bitrix24 webhook code (`webhook_crm`, `bitrix_crm`).
AUTH_HEADER = "Bearer crm-webhook-secret-7f3a"
BITRIX_CODE = "k3y7webhookcode"


@dataclass(frozen=True)
class Recorded:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True)
class Scripted:
    status: int = 200
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_seconds: float = 0.0
    raw: bytes | None = None  # sent as is instead of `body` as JSON


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (the timeout test) is expected; anything else is printed.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class FakeHttpServer:
    """Answers each POST, PATCH or GET with the next scripted response, then with `default`."""

    def __init__(self) -> None:
        self.requests: list[Recorded] = []
        self.default = Scripted(200, {"ok": True, "result": True})
        self._script: deque[Scripted] = deque()
        self._lock = threading.Lock()
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self._answer("POST")

            def do_GET(self) -> None:
                self._answer("GET")

            def do_PATCH(self) -> None:
                self._answer("PATCH")

            def _answer(self, method: str) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = raw
                headers = {name.lower(): value for name, value in self.headers.items()}
                scripted = fake._next(Recorded(method, self.path, headers, body))
                time.sleep(scripted.delay_seconds)
                payload = scripted.raw if scripted.raw is not None else b""
                if scripted.raw is None and scripted.body is not None:
                    payload = json.dumps(scripted.body).encode()
                self.send_response(scripted.status)
                for name, value in {"Content-Type": "application/json", **scripted.headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
                return

        self._server = _Server(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)
        self._thread.start()

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def respond(self, *responses: Scripted) -> None:
        with self._lock:
            self._script.extend(responses)

    def _next(self, request: Recorded) -> Scripted:
        with self._lock:
            self.requests.append(request)
            return self._script.popleft() if self._script else self.default

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@pytest.fixture
def http_fake() -> Iterator[FakeHttpServer]:
    server = FakeHttpServer()
    yield server
    server.close()


@pytest.fixture
def put_secret(moto_aws: None) -> Iterator[Callable[[str, str], None]]:
    """`put_secret("crm_api", value)`: create the secret the deployed consumer's env var names."""
    secrets.clear_cache()

    def put(name: str, value: str) -> None:
        aws.client("secretsmanager").create_secret(Name=os.environ[secret_env_var(name)], SecretString=value)

    yield put
    secrets.clear_cache()


@dataclass
class Delivery:
    event: dict[str, Any]
    response: dict[str, Any]

    @property
    def failed(self) -> list[str]:
        return failed_ids(self.response)

    @property
    def message_ids(self) -> list[str]:
        return [record["messageId"] for record in self.event["Records"]]


@dataclass
class DeployedConsumer:
    app: ModuleType
    queues: ConsumerQueues
    context: FakeLambdaContext

    def deliver(self, *published: Published) -> Delivery:
        """Send the envelopes, receive them as one batch, run the real handler, acknowledge."""
        for item in published:
            self.queues.send(item)
        event = self.queues.receive_event()
        assert len(event["Records"]) == len(published)
        response: dict[str, Any] = self.app.lambda_handler(event, self.context)
        self.queues.acknowledge(event, response)
        return Delivery(event, response)

    def dead_letter_reasons(self) -> list[str]:
        return [letter["attributes"]["dead_letter_reason"] for letter in self.queues.dead_letters()]

    def _moto_messages(self) -> list[Any]:
        return list(
            sqs_backends[ACCOUNT_ID][REGION].get_queue(self.queues.queue_url.rsplit("/", 1)[-1])._messages
        )

    def waiting(self) -> list[float]:
        """Seconds until each message of the queue can be received (its delay or its
        visibility, in moto's state), longest first."""
        now = unix_time_millis()
        return sorted((max(m.delayed_until, m.visible_at, now) - now) / 1000 for m in self._moto_messages())[
            ::-1
        ]

    def let_time_pass(self) -> None:
        """Every delay and visibility timeout of the queue has run out (SQS's clock, moved on)."""
        for message in self._moto_messages():
            message.delayed_until = 0
            message.visible_at = 0

    def seconds_until_visible(self, receipt_handle: str) -> float:
        """How long SQS (moto's state, not a spy) keeps the received message hidden from now."""
        queue = sqs_backends[ACCOUNT_ID][REGION].get_queue(self.queues.queue_url.rsplit("/", 1)[-1])
        [message] = [m for m in queue._messages if m.receipt_handle == receipt_handle]
        return float(message.visible_at - unix_time_millis()) / 1000


@pytest.fixture
def run_consumer(
    moto_aws: None,
    deploy: Deploy,
    import_app: Callable[[str], ModuleType],
    lambda_context: FakeLambdaContext,
) -> Callable[[str], DeployedConsumer]:
    """`run_consumer("crm")`: the consumer's app deployed on fresh moto queues."""

    def start(name: str) -> DeployedConsumer:
        app = import_app(name)
        queues = deploy(app.worker, name)
        return DeployedConsumer(app, queues, lambda_context)

    return start


@pytest.fixture
def webhook_crm(
    run_consumer: Callable[[str], DeployedConsumer],
    put_secret: Callable[[str, str], None],
    http_fake: FakeHttpServer,
) -> DeployedConsumer:
    crm = run_consumer("crm")
    config = {"kind": "webhook", "url": f"{http_fake.base_url}/leads", "auth_header": AUTH_HEADER}
    put_secret("crm_api", json.dumps(config))
    http_fake.default = Scripted(201, {"id": "lead-1"})
    return crm


@pytest.fixture
def bitrix_crm(
    run_consumer: Callable[[str], DeployedConsumer],
    put_secret: Callable[[str, str], None],
    http_fake: FakeHttpServer,
) -> DeployedConsumer:
    crm = run_consumer("crm")
    put_secret(
        "crm_api", json.dumps({"kind": "bitrix24", "url": f"{http_fake.base_url}/rest/1/{BITRIX_CODE}/"})
    )
    http_fake.default = Scripted(200, {"result": 3465, "time": {"start": 1705764932.99, "duration": 0.2}})
    return crm


@pytest.fixture
def telegram() -> Iterator[Any]:
    """The Telegram stand-in in strict mode: a call aiogram's model of its method refuses gets 400,
    as a call Telegram refuses would."""
    # Imported here: this conftest is what a scaffolded consumer's test needs, and a project copied
    # for one (tests/unit/ops/test_scaffold.py) has no local runtime.
    from local.fakes.telegram import TelegramFake

    fake = TelegramFake(token=BOT_TOKEN, strict=True)
    with fake:
        yield fake


@pytest.fixture
def autoreply(
    run_consumer: Callable[[str], Any],
    put_secret: Callable[[str, str], None],
    telegram: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> Any:
    """The autoreply consumer deployed on moto, its token in place, calling the Telegram stand-in
    (a test module may define its own `autoreply`, e.g. against a scripted HTTP server)."""
    consumer = run_consumer("autoreply")
    put_secret("telegram_bot_token", BOT_TOKEN)
    monkeypatch.setenv("TELEGRAM_API_BASE", telegram.url)
    return consumer


# sendMessage's answer from a scripted Bot API (`scripted_autoreply`).
SENT_MESSAGE = Scripted(200, {"ok": True, "result": {"message_id": 9, "date": 1767225601, "chat": {"id": 1}}})


@pytest.fixture
def scripted_autoreply(
    run_consumer: Callable[[str], DeployedConsumer],
    put_secret: Callable[[str, str], None],
    http_fake: FakeHttpServer,
    monkeypatch: pytest.MonkeyPatch,
) -> DeployedConsumer:
    """The autoreply consumer deployed on moto, calling a scripted HTTP server (`http_fake`) that
    answers every call `SENT_MESSAGE` unless a test scripts otherwise."""
    consumer = run_consumer("autoreply")
    put_secret("telegram_bot_token", BOT_TOKEN)
    monkeypatch.setenv("TELEGRAM_API_BASE", http_fake.base_url)
    http_fake.default = SENT_MESSAGE
    return consumer


@pytest.fixture
def deploy_bot(
    run_consumer: Callable[[str], DeployedConsumer],
    put_secret: Callable[[str, str], None],
    telegram: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[str], DeployedConsumer]:
    """`deploy_bot("module:build")`: the bot consumer running that Application against `telegram`,
    in a fresh execution environment (no Application built yet)."""

    def deploy(reference: str) -> DeployedConsumer:
        monkeypatch.setenv("BOT_APPLICATION", reference)
        monkeypatch.setenv("TELEGRAM_API_BASE", telegram.url)
        consumer = run_consumer("bot")
        consumer.app.runner.__init__()
        put_secret("telegram_bot_token", BOT_TOKEN)
        return consumer

    return deploy
