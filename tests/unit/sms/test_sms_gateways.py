"""The gateways: End User Messaging's request (Stubber), no blind retries, and the HTTP gateway's contract."""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from botocore.stub import Stubber

from pipeline import aws, secrets
from pipeline.http import tls_context
from pipeline.sms.gateways import (
    EndUserMessagingGateway,
    GatewayOutcomeUnknown,
    GatewayRefused,
    HttpGateway,
    LookupStatus,
    OutgoingSms,
)
from pipeline.sms.journal import State
from tests.unit.sms.conftest import MASKED_PHONE, PHONE, SmsHarness, delivery_message, key_of, order_event

TOKEN = "sms-gw-token-Th4tMustN0tLeak"
SMS = OutgoingSms(key="k" * 64, phone=PHONE, body="Your order is ready.")
Outcome = tuple[str, GatewayRefused | GatewayOutcomeUnknown | None]


def send_outcome(gateway: EndUserMessagingGateway | HttpGateway) -> Outcome:
    """What a send came to, in the journal's terms, with the error that said so."""
    try:
        gateway.send(SMS)
    except GatewayRefused as refusal:
        if refusal.account is not None:
            return f"account refused ({refusal.account})", refusal
        return ("refused for now" if refusal.transient else "refused for good"), refusal
    except GatewayOutcomeUnknown as unknown:
        return "unknown", unknown
    return "accepted", None


def test_end_user_messaging_sends_the_right_request_with_the_key_in_context(
    sms: SmsHarness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SMS_GATEWAY", "end_user_messaging")
    monkeypatch.setenv("SMS_ORIGINATION_IDENTITY", "arn:aws:sms-voice:eu-central-1:123456789012:pool/pool-1")
    monkeypatch.setenv("SMS_CONFIGURATION_SET", "order-sms")
    sms.service.reset_runtime()
    event = order_event(order_id="ORD-5")
    client = aws.non_retrying_client("pinpoint-sms-voice-v2")
    with Stubber(client) as stubber:
        stubber.add_response(
            "send_text_message",
            {"MessageId": "4c9a8f0e-eum-message"},
            expected_params={
                "DestinationPhoneNumber": PHONE,
                "MessageBody": "Olga Ivanova, your order ORD-5 is ready for pickup.",
                "MessageType": "TRANSACTIONAL",
                "OriginationIdentity": "arn:aws:sms-voice:eu-central-1:123456789012:pool/pool-1",
                "ConfigurationSetName": "order-sms",
                "Context": {"notification_key": key_of(event)},
                # The maximum age left since the move (the SMS age setting's default, 2 h).
                "TimeToLive": 2 * 3600,
            },
        )
        sms.publish(event)
        sms.deliver()
        stubber.assert_no_pending_responses()
    record = sms.record(event)
    assert record.state is State.ACCEPTED and record.message_id == "4c9a8f0e-eum-message"
    # Its delivery events come back with that Context: they find the record by the key.
    sms.delivery_event(delivery_message(key_of(event), messageId="4c9a8f0e-eum-message"))
    assert sms.record(event).delivery_status == "delivered"


@pytest.mark.parametrize(
    ("code", "status", "reason", "outcome"),
    [
        ("ThrottlingException", 429, None, "refused for now"),
        ("ServiceQuotaExceededException", 402, "DAILY_DESTINATION_CALL_LIMIT", "refused for now"),
        (
            "ServiceQuotaExceededException",
            402,
            "MONTHLY_SPEND_LIMIT_REACHED_FOR_TEXT",
            "account refused (out_of_balance)",
        ),
        ("AccessDeniedException", 403, "ACCOUNT_DISABLED", "account refused (blocked)"),
        ("ValidationException", 400, None, "refused for good"),
        ("ConflictException", 400, "DESTINATION_PHONE_NUMBER_OPTED_OUT", "refused for good"),
        ("AccessDeniedException", 403, None, "account refused (unauthorized)"),
        ("InternalServerException", 500, None, "unknown"),
    ],
)
def test_end_user_messaging_errors_say_whether_the_sms_may_have_been_taken(
    aws_env: None, code: str, status: int, reason: str | None, outcome: str
) -> None:
    gateway = EndUserMessagingGateway()
    with Stubber(gateway.client) as stubber:
        stubber.add_client_error(
            "send_text_message",
            code,
            f"cannot send to {PHONE}",
            status,
            modeled_fields={"Reason": reason} if reason else None,
        )
        seen, error = send_outcome(gateway)
    assert error is not None and (error.code, seen) == (f"{code}:{reason}" if reason else code, outcome)
    assert PHONE not in str(error) and MASKED_PHONE in error.detail
    assert gateway.lookup(SMS.key, None).status is LookupStatus.UNKNOWN  # no lookup API


@dataclass
class AwsJsonServer:
    """Answers every AWS JSON request with a 500 InternalServerException, or hangs up; counts them."""

    hang_up: bool = False
    requests: int = 0

    def start(self) -> ThreadingHTTPServer:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                owner.requests += 1
                if owner.hang_up:
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                body = json.dumps({"__type": "InternalServerException", "message": "try later"}).encode()
                self.send_response(500)
                self.send_header("Content-Type", "application/x-amz-json-1.0")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        return server


@pytest.mark.parametrize("hang_up", [False, True], ids=["http-500", "connection-dropped"])
def test_end_user_messaging_never_repeats_a_send_by_itself(
    aws_env: None, monkeypatch: pytest.MonkeyPatch, hang_up: bool
) -> None:
    fake = AwsJsonServer(hang_up=hang_up)
    server = fake.start()
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{server.server_address[1]}")
    aws.reset_clients()
    try:
        with pytest.raises(GatewayOutcomeUnknown):
            EndUserMessagingGateway().send(SMS)
        assert fake.requests == 1  # botocore's standard retries would have made it 4 SMS
    finally:
        server.shutdown()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_end_user_messaging_unreachable_is_a_refusal(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_closed_port()}")
    aws.reset_clients()
    with pytest.raises(GatewayRefused) as raised:
        EndUserMessagingGateway().send(SMS)
    assert raised.value.transient and raised.value.code == "EndpointConnectionError"


# -- the HTTP gateway ------------------------------------------------------------------------------
@dataclass
class Reply:
    status: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    keeps: bool = False  # the gateway stores the message (whatever it answers)


@dataclass
class SmsGatewayFake:
    """A real HTTP server playing an SMS gateway that deduplicates on client_reference."""

    replies: deque[Reply] = field(default_factory=deque)
    posts: list[dict[str, Any]] = field(default_factory=list)
    stored: dict[str, str] = field(default_factory=dict)
    url: str = ""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, reply: Reply) -> None:
                time.sleep(reply.delay)
                body = json.dumps(reply.body).encode() if reply.body is not None else b""
                try:
                    self.send_response(reply.status)
                    for name, value in {"Content-Type": "application/json", **reply.headers}.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the client gave up waiting

            def do_POST(self) -> None:
                payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                fake.posts.append({"path": self.path, "headers": dict(self.headers), "json": payload})
                reply = fake.replies.popleft() if fake.replies else Reply(202, keeps=True)
                if reply.keeps:
                    fake.stored.setdefault(payload["client_reference"], f"gw-{len(fake.stored) + 1}")
                    reply.body = reply.body or {"message_id": fake.stored[payload["client_reference"]]}
                self._answer(reply)

            def do_GET(self) -> None:
                [reference] = parse_qs(urlsplit(self.path).query)["client_reference"]
                found = fake.stored.get(reference)
                self._answer(Reply(200, {"message_id": found, "status": "sent"}) if found else Reply(404))

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def gateway_server() -> Iterator[SmsGatewayFake]:
    fake = SmsGatewayFake()
    server = ThreadingHTTPServer(("127.0.0.1", 0), fake.handler())
    fake.url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield fake
    server.shutdown()


@pytest.fixture
def gateway_secret(moto_aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    secrets.clear_cache()
    secret_id = aws.client("secretsmanager").create_secret(
        Name="sms-gateway", SecretString=json.dumps({"token": TOKEN})
    )["ARN"]
    monkeypatch.setenv("SMS_GATEWAY_SECRET_ID", secret_id)
    yield secret_id
    secrets.clear_cache()


def test_the_http_gateway_posts_the_key_as_client_reference_with_the_token(
    gateway_server: SmsGatewayFake, gateway_secret: str
) -> None:
    accepted = HttpGateway(gateway_server.url).send(SMS)
    assert accepted.message_id == "gw-1"
    [post] = gateway_server.posts
    assert post["path"] == "/v1/messages"
    assert post["json"] == {"to": PHONE, "text": SMS.body, "client_reference": SMS.key}
    assert post["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert post["headers"]["Idempotency-Key"] == SMS.key


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (Reply(409, {"error": "duplicate client_reference", "message_id": "gw-9"}), "accepted"),
        (Reply(429, {"error": "slow down"}, {"Retry-After": "30"}), "refused for now"),
        (Reply(503), "refused for now"),
        (Reply(400, {"error": f"invalid number {PHONE}"}), "refused for good"),
        (Reply(402, {"error": "insufficient_balance"}), "account refused (out_of_balance)"),
        (Reply(401, {"error": "unauthorized"}), "account refused (unauthorized)"),
        (Reply(500), "unknown"),
        (Reply(202, keeps=True, delay=0.6), "unknown"),  # taken, but the answer came too late
    ],
)
def test_the_http_gateway_tells_refusals_from_unknown_outcomes(
    gateway_server: SmsGatewayFake, aws_env: None, reply: Reply, expected: str
) -> None:
    gateway_server.replies.append(reply)
    gateway = HttpGateway(gateway_server.url, timeout=0.3, secret=None)
    seen, error = send_outcome(gateway)
    assert seen == expected
    if reply.status == 429:
        assert isinstance(error, GatewayRefused) and error.retry_after == 30
    assert PHONE not in str(error)


def test_the_http_gateway_unreachable_is_a_refusal_and_lookups_say_what_they_know(
    gateway_server: SmsGatewayFake, aws_env: None
) -> None:
    with pytest.raises(GatewayRefused) as raised:
        HttpGateway(f"http://127.0.0.1:{_closed_port()}", secret=None).send(SMS)
    assert raised.value.transient
    gateway = HttpGateway(gateway_server.url, secret=None)
    assert gateway.lookup(SMS.key, None).status is LookupStatus.NOT_FOUND
    gateway.send(SMS)
    found = gateway.lookup(SMS.key, None)
    assert (found.status, found.message_id) == (LookupStatus.FOUND, "gw-1")
    assert HttpGateway(f"http://127.0.0.1:{_closed_port()}", secret=None).lookup(SMS.key, None).status is (
        LookupStatus.UNKNOWN
    )


def test_through_the_http_gateway_a_late_answer_is_reconciled_without_a_second_sms(
    sms: SmsHarness, gateway_server: SmsGatewayFake, gateway_secret: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SMS_GATEWAY", "http")
    monkeypatch.setenv("SMS_HTTP_BASE_URL", gateway_server.url)
    monkeypatch.setenv("SMS_HTTP_TIMEOUT_SECONDS", "0.3")
    sms.service.reset_runtime()
    gateway_server.replies.append(Reply(202, keeps=True, delay=0.6))
    event = order_event()
    sms.publish(event)
    sms.deliver()
    assert sms.record(event).state is State.UNKNOWN
    assert sms.reconcile()["accepted"] == 1
    record = sms.record(event)
    assert record.state is State.ACCEPTED and record.message_id == "gw-1"
    assert len(gateway_server.posts) == 1 and list(gateway_server.stored) == [key_of(event)]


def test_the_http_gateway_sends_with_a_rotated_token_at_once_and_refuses_a_revoked_one(
    gateway_secret: str,
) -> None:
    """The gateway's own stand-in (local/fakes/sms.py): a new token issued there and put in the
    secret works at the next send, though the old one is still cached; with none put, the 401
    stays a refusal (re-read once, not again within the minute)."""
    from local.fakes.sms import SmsGatewayFake as GatewayStandIn

    with GatewayStandIn(token=TOKEN) as stand_in:
        gateway = HttpGateway(stand_in.url)
        assert gateway.send(SMS).message_id == "sms-1"  # the token cached
        stand_in.account.rotate("sms-gw-rotated-T0ken")
        aws.client("secretsmanager").put_secret_value(
            SecretId=gateway_secret, SecretString=json.dumps({"token": "sms-gw-rotated-T0ken"})
        )

        second = OutgoingSms(key="m" * 64, phone=PHONE, body="Shipped.")
        assert gateway.send(second).message_id == "sms-2"

        stand_in.account.rotate("sms-gw-another-T0ken")  # revoked, nothing new in the secret
        with pytest.raises(GatewayRefused) as caught:
            gateway.send(OutgoingSms(key="n" * 64, phone=PHONE, body="Delivered."))
        assert caught.value.code == "HTTP 401" and not caught.value.transient
    assert [m["text"] for m in stand_in.messages()] == ["Your order is ready.", "Shipped."]


def test_every_https_send_shares_one_verifying_tls_context() -> None:
    """A connection made without a context makes its own, loading the CA store each time (about
    20 ms of CPU per SMS, several times that at a function's share of a vCPU): every send to an
    HTTPS gateway uses the process's one context, which still verifies the gateway's certificate
    and name."""
    gateway = HttpGateway("https://sms.example.org/api", timeout=5)

    first, second = gateway._connection(), gateway._connection()

    assert isinstance(first, http.client.HTTPSConnection) and first is not second
    assert first._context is second._context is tls_context()  # type: ignore[attr-defined]
    assert tls_context().verify_mode == ssl.CERT_REQUIRED and tls_context().check_hostname
