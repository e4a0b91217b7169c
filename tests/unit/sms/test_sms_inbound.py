"""A customer of an HTTP gateway replies STOP (issue 43): the gateway's stand-in calls the
pipeline's inbound route back (`POST /sms/inbound/<token>`, the webhook behind a local API
Gateway), which puts the number on the suppression list; every later order SMS ends
`suppressed`, never sent nor dead-lettered; START brings the customer back. A wrong token is 401
and writes nothing; a malformed body is a clear 4xx. Through the deployed pieces on moto."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infra.environment import SMS_INBOUND_PATH
from local.apigw import http_api_event, http_response, route_match
from pipeline import aws
from pipeline.sms import suppression
from pipeline.sms.journal import State
from tests.unit.consumer_support import CurrentStdout, FakeLambdaContext, Output, control
from tests.unit.sms.conftest import JOURNAL_TABLE, PHONE, SmsHarness, order_event
from tests.unit.sms.test_sms_account_refused import http_gateway  # noqa: F401 - fixture

TOKEN = "smsInboundToken0123456789abcdef"
ROUTES = (f"POST {SMS_INBOUND_PATH}",)


class _Api(BaseHTTPRequestHandler):
    """API Gateway in front of the webhook function, in this process (moto is in-process)."""

    server: Any

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        parsed = urllib.parse.urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        matched = route_match("POST", parsed.path, ROUTES)
        assert matched is not None
        route_key, parameters = matched
        event = http_api_event(
            method="POST",
            raw_path=parsed.path,
            raw_query=parsed.query,
            headers=self.headers.items(),
            body=body,
            route_key=route_key,
            path_parameters=parameters,
        )
        result = self.server.webhook.lambda_handler(event, FakeLambdaContext("webhook"))
        status, _, payload = http_response(result)
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


@pytest.fixture
def inbound(
    sms: SmsHarness,
    http_gateway: tuple[str, Callable[[], int]],  # noqa: F811 - fixture
    monkeypatch: pytest.MonkeyPatch,
    import_app: Callable[[str], ModuleType],
) -> Iterator[tuple[str, str, ModuleType]]:
    """The stand-in's URL, the webhook's inbound URL (the console's callback, token in the
    path), and the webhook module; the stand-in calls the webhook back."""
    secret = aws.client("secretsmanager").create_secret(Name="sms-inbound-token", SecretString=TOKEN)["ARN"]
    monkeypatch.setenv("SMS_INBOUND_TOKEN_SECRET_ID", secret)
    monkeypatch.setenv("JOURNAL_TABLE", JOURNAL_TABLE)
    monkeypatch.setenv("SECRET_ROTATION_GRACE_SECONDS", "3600")
    webhook = import_app("webhook")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    server.webhook = webhook  # type: ignore[attr-defined]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    api = f"http://127.0.0.1:{server.server_address[1]}"
    url = f"{api}{SMS_INBOUND_PATH.replace('{token}', TOKEN)}"
    gateway_url, _ = http_gateway
    try:
        yield gateway_url, url, webhook
    finally:
        server.shutdown()
        server.server_close()


def _reply(gateway_url: str, text: str, sender: str = PHONE) -> dict[str, Any]:
    """The customer's reply reaches the gateway, which posts it to the inbound URL."""
    answer: dict[str, Any] = control(gateway_url, "/_inbound", {"from": sender, "text": text})
    return answer


def _listed(phone: str = PHONE) -> dict[str, Any] | None:
    table = aws.resource("dynamodb").Table(JOURNAL_TABLE)
    item: dict[str, Any] | None = table.get_item(Key={"id": suppression.suppression_id(phone)}).get("Item")
    return item


def _follow(webhook: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(webhook.logger.registered_handler, "stream", CurrentStdout())


def test_a_customer_who_texts_stop_gets_no_later_order_sms_and_start_brings_them_back(
    sms: SmsHarness,
    inbound: tuple[str, str, ModuleType],
    http_gateway: tuple[str, Callable[[], int]],  # noqa: F811 - fixture
    output: Callable[[Any], Output],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gateway_url, url, webhook = inbound
    _, texts = http_gateway
    _follow(webhook, monkeypatch)
    stand_in_url = gateway_url
    _configure(stand_in_url, url)

    answer = _reply(stand_in_url, " stop ")

    assert answer["status"] == 200 and answer["body"]["action"] == "opt_out"
    item = _listed()
    assert item is not None and item["schema_version"] == 1 and item["by"] == "inbound_sms"
    assert PHONE not in json.dumps(item, default=str)
    printed = capsys.readouterr().out
    assert PHONE not in printed and '"SmsInbound"' in printed

    log = output(sms.worker)
    first, second = order_event(), order_event("shipped", "paid")
    for event in (first, second):
        sms.publish(event)
        assert sms.deliver() == {"batchItemFailures": []}
    assert texts() == 0 and sms.queues.dead_letters() == []
    assert [sms.record(event).state for event in (first, second)] == [State.SUPPRESSED] * 2
    assert len(log.emf("SmsSuppressed")) == 2

    assert _reply(stand_in_url, "START")["body"]["action"] == "opt_in"
    assert _listed() is None
    sms.publish(order_event())
    assert sms.deliver() == {"batchItemFailures": []}
    assert texts() == 1


def _configure(gateway_url: str, url: str) -> None:
    """Paste the inbound URL into the stand-in's console (its control endpoint)."""
    control(gateway_url, "/_inbound_url", {"url": url})


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({"from": PHONE, "text": "STOP"}, 401, "unauthorized"),
        ("not json", 400, "invalid"),
        ({"from": "375291234567", "text": "STOP"}, 422, "invalid"),
        ({"from": PHONE}, 422, "invalid"),
        (["STOP"], 422, "invalid"),
    ],
    ids=["wrong token", "not JSON", "not E.164", "no text", "not an object"],
)
def test_a_wrong_token_or_a_malformed_body_is_refused_and_writes_nothing(
    inbound: tuple[str, str, ModuleType],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    body: Any,
    status: int,
    error: str,
) -> None:
    _, url, webhook = inbound
    _follow(webhook, monkeypatch)
    if status == 401:
        url = url.replace(TOKEN, "wrong" + TOKEN[5:])
    data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
    request = urllib.request.Request(  # noqa: S310 - loopback
        url, data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:  # noqa: S310 - loopback
            got, document = answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as refused:
        got, document = refused.code, json.loads(refused.read())

    assert (got, document["error"]) == (status, error)
    assert document["message"] and _listed() is None
    printed = capsys.readouterr().out
    assert PHONE not in printed and TOKEN not in printed and '"EventsRejected"' in printed


def test_a_text_that_is_no_keyword_is_acknowledged_counted_and_changes_nothing(
    inbound: tuple[str, str, ModuleType], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    gateway_url, url, webhook = inbound
    _follow(webhook, monkeypatch)
    _configure(gateway_url, url)

    answer = _reply(gateway_url, "Thanks, I'll come at 5")

    assert answer["status"] == 200 and answer["body"]["action"] == "ignored" and _listed() is None
    assert '"ignored"' in capsys.readouterr().out


_senders = st.from_regex(r"\+[1-9][0-9]{6,14}", fullmatch=True) | st.text(max_size=16) | st.integers()
_texts = (
    st.sampled_from(["STOP", " stop ", "Unsubscribe", "START", "unstop", "yes", "hello", ""])
    | st.text(max_size=24)
    | st.none()
    | st.integers()
)
_bodies = (
    st.fixed_dictionaries({}, optional={"from": _senders, "text": _texts, "to": st.text(max_size=8)})
    | st.lists(st.text(max_size=4), max_size=2)
    | st.text(max_size=12)
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=_bodies, raw=st.booleans())
def test_any_body_is_answered_200_or_a_clear_4xx_and_only_a_keyword_from_a_number_changes_the_list(
    inbound: tuple[str, str, ModuleType], body: Any, raw: bool
) -> None:
    """Generated inbound bodies (JSON of any shape, or not JSON): never a 5xx; 400 for what is not
    JSON, 422 naming the field for a sender that is not E.164 or a text that is not a string; a
    200 says what it did, and the list holds the sender exactly when the text was a STOP word."""
    _, url, webhook = inbound
    path = urllib.parse.urlsplit(url).path
    data = (
        (body if isinstance(body, str) else json.dumps(body)).encode() if raw else json.dumps(body).encode()
    )
    route, parameters = route_match("POST", path, ROUTES) or ("", {})
    event = http_api_event(
        method="POST",
        raw_path=path,
        raw_query="",
        headers=[("Content-Type", "application/json")],
        body=data,
        route_key=route,
        path_parameters=parameters,
    )
    answer = webhook.lambda_handler(event, FakeLambdaContext("webhook"))
    status, document = answer["statusCode"], json.loads(answer["body"])
    sender = body.get("from") if isinstance(body, dict) else None
    try:
        if status != 200:
            assert status in (400, 422) and document["message"], (status, document)
            if status == 422 and document.get("errors"):
                assert {tuple(e["loc"]) for e in document["errors"]} <= {("from",), ("text",)}
            assert sender is None or not isinstance(sender, str) or _listed(sender.strip()) is None
            return
        assert isinstance(sender, str) and isinstance(body.get("text"), str)
        keyword = suppression.inbound_keyword(body["text"])
        expected = {"stop": "opt_out", "start": "opt_in", None: "ignored"}[keyword]
        assert document["action"] == expected
        assert (_listed(sender.strip()) is not None) is (keyword == "stop")
    finally:
        if isinstance(sender, str):
            aws.resource("dynamodb").Table(JOURNAL_TABLE).delete_item(
                Key={"id": suppression.suppression_id(sender.strip())}
            )
