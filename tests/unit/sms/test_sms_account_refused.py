"""The SMS gateway refusing the account (out of balance, spend limit, credential) pauses, never fails.

Through the gateways' stand-ins (local/fakes/sms.py, local/fakes/end_user_messaging.py), switched
over HTTP as an operator or the chaos campaign does (`/_account/block`, `/_account/unblock`): while
the account is refused, the order event's SMS is not sent, nothing is dead-lettered, the journal
record keeps its attempts (the gateway was never given the message) and the reconciler leaves it
to its paused message; once the account works, the next delivery texts the customer exactly once.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from moto.core.utils import unix_time_millis
from moto.sqs.models import sqs_backends

from local.fakes.end_user_messaging import EndUserMessagingFake
from local.fakes.sms import DEFAULT_TOKEN, SmsGatewayFake
from pipeline import aws, secrets
from pipeline.pause import PAUSE_SECONDS, PAUSED_METRIC
from pipeline.registry import by_name
from pipeline.sms.journal import State
from pipeline.sms.reconcile import redelivery_horizon
from tests.unit.consumer_support import Output, control
from tests.unit.sms.conftest import PHONE, SmsHarness, order_event

ACCOUNT_ID, REGION = "123456789012", "eu-central-1"
EUM_ENDPOINT = "AWS_ENDPOINT_URL_PINPOINT_SMS_VOICE_V2"


def _queue_messages(sms: SmsHarness) -> list[Any]:
    queue = sqs_backends[ACCOUNT_ID][REGION].get_queue(sms.queues.queue_url.rsplit("/", 1)[-1])
    return list(queue._messages)


def waiting(sms: SmsHarness) -> list[float]:
    """Seconds until each message of the sms queue can be received (moto's state)."""
    now = unix_time_millis()
    return [(max(m.delayed_until, m.visible_at, now) - now) / 1000 for m in _queue_messages(sms)]


def let_time_pass(sms: SmsHarness, seconds: float) -> None:
    """The SMS clock and SQS's clock move on: every delay of the queue has run out."""
    sms.clock.advance(seconds)
    for message in _queue_messages(sms):
        message.delayed_until = 0
        message.visible_at = 0


@pytest.fixture
def http_gateway(sms: SmsHarness, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Callable[[], int]]]:
    """The HTTP gateway's stand-in, its token in the `sms_gateway` secret (moto)."""
    secret = aws.client("secretsmanager").create_secret(
        Name="sms-gateway-account", SecretString=json.dumps({"token": DEFAULT_TOKEN})
    )["ARN"]
    secrets.clear_cache()
    with SmsGatewayFake() as stand_in:
        monkeypatch.setenv("SMS_GATEWAY", "http")
        monkeypatch.setenv("SMS_HTTP_BASE_URL", stand_in.url)
        monkeypatch.setenv("SMS_GATEWAY_SECRET_ID", secret)
        sms.service.reset_runtime()
        yield stand_in.url, lambda: len(stand_in.messages())
    secrets.clear_cache()


@pytest.fixture
def eum_gateway(sms: SmsHarness, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Callable[[], int]]]:
    """End User Messaging's stand-in, reached by the service's endpoint variable."""
    with EndUserMessagingFake() as stand_in:
        monkeypatch.setenv("SMS_GATEWAY", "end_user_messaging")
        monkeypatch.setenv(EUM_ENDPOINT, stand_in.url)
        aws.reset_clients()
        sms.service.reset_runtime()
        yield stand_in.url, lambda: len(stand_in.messages())
        aws.reset_clients()


CASES = [
    ("http_gateway", "out_of_balance"),
    ("eum_gateway", "out_of_balance"),
    ("eum_gateway", "blocked"),
    ("eum_gateway", "unauthorized"),
]


@pytest.mark.parametrize(("gateway", "cause"), CASES)
def test_a_refused_gateway_account_pauses_the_sms_and_the_next_delivery_after_it_texts_once(
    sms: SmsHarness,
    output: Callable[[Any], Output],
    request: pytest.FixtureRequest,
    gateway: str,
    cause: str,
) -> None:
    url, texts = request.getfixturevalue(gateway)
    log = output(sms.worker)
    control(url, "/_account/block", {"cause": cause})
    event = order_event()
    sms.publish(event)

    response = sms.deliver()

    assert response == {"batchItemFailures": []}  # re-sent delayed, the original acknowledged
    assert texts() == 0 and sms.queues.dead_letters() == []
    [wait] = waiting(sms)
    assert PAUSE_SECONDS - 5 < wait <= PAUSE_SECONDS
    [line] = log.emf(PAUSED_METRIC)
    assert (line["consumer"], line["cause"]) == ("sms", cause)
    record = sms.record(event)
    assert record.state is State.PENDING and record.attempt_count == 0 and record.attempts == ()
    assert record.paused_at is not None and record.failure_reason is None
    # The reconciler takes it for no orphan while its paused message is away.
    sms.clock.advance((redelivery_horizon(by_name("sms")) + timedelta(seconds=60)).total_seconds())
    report = sms.reconcile()
    assert (report["orphaned"], report["requested"], texts()) == (0, 0, 0)
    assert sms.record(event).state is State.PENDING

    control(url, "/_account/unblock")
    let_time_pass(sms, PAUSE_SECONDS)
    assert sms.deliver() == {"batchItemFailures": []}

    assert texts() == 1 and sms.queues.dead_letters() == [] and waiting(sms) == []
    record = sms.record(event)
    assert record.state is State.ACCEPTED and record.attempt_count == 1
    assert [attempt["outcome"] for attempt in record.attempts] == ["accepted"]
    let_time_pass(sms, 3600)
    sms.reconcile()
    assert texts() == 1
    lines = "\n".join(str(line) for line in log.read())
    assert PHONE not in lines


def test_an_http_gateway_token_refused_after_its_re_read_pauses_until_the_new_one_is_put(
    sms: SmsHarness,
    output: Callable[[Any], Output],
    http_gateway: tuple[str, Callable[[], int]],
) -> None:
    """The gateway issued a new token; the secret still holds the old one: the 401, re-read once,
    is the account refused (`unauthorized`). Once the operator puts the new token, it sends once."""
    url, texts = http_gateway
    log = output(sms.worker)
    control(url, "/_credential/rotate", {"value": "sms-gw-rotated-T0ken"})
    event = order_event()
    sms.publish(event)

    assert sms.deliver() == {"batchItemFailures": []}

    assert texts() == 0 and sms.queues.dead_letters() == []
    [line] = log.emf(PAUSED_METRIC)
    assert line["cause"] == "unauthorized"
    assert sms.record(event).attempt_count == 0
    secret = aws.client("secretsmanager").list_secrets()["SecretList"][0]["ARN"]
    aws.client("secretsmanager").put_secret_value(
        SecretId=secret, SecretString=json.dumps({"token": "sms-gw-rotated-T0ken"})
    )
    let_time_pass(sms, PAUSE_SECONDS)
    # 15 minutes on, the once-a-minute re-read is allowed again: forgetting the provider forgets
    # its last forced read (and its cache, which still holds the old token, re-read at the 401).
    secrets.clear_cache()
    assert sms.deliver() == {"batchItemFailures": []}
    assert texts() == 1 and sms.record(event).state is State.ACCEPTED
    assert "sms-gw-rotated-T0ken" not in "\n".join(str(line) for line in log.read())
