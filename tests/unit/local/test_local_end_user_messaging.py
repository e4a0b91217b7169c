"""The End User Messaging stand-in speaks `pinpoint-sms-voice-v2` as botocore reads it.

The oracle is the project's own client: `EndUserMessagingGateway` on a real boto3 client, pointed
at the stand-in by the same service-specific endpoint variable the local runtime sets. Its
answers and faults must be classified exactly as End User Messaging's would be, and its delivery
events must be read by `pipeline.sms.delivery` as the documented ones are.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from local.fakes.end_user_messaging import EndUserMessagingFake
from pipeline import aws
from pipeline.sms.delivery import DeliveryEvent
from pipeline.sms.gateways import (
    CONTEXT_KEY,
    EndUserMessagingGateway,
    GatewayOutcomeUnknown,
    GatewayRefused,
    OutgoingSms,
)

CONFIGURATION_SET = "local-pipeline-sms"
TOPIC_ARN = "arn:aws:sns:eu-central-1:123456789012:local-pipeline-sms-delivery-events"
PHONE = "+4915771234567"
# The service-specific endpoint variable, as botocore derives it from the service id.
END_USER_MESSAGING_ENDPOINT = "AWS_ENDPOINT_URL_PINPOINT_SMS_VOICE_V2"
FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "crm" / "sms_eum_text_delivered.json"


class Published:
    """What the stand-in published to SNS: (topic ARN, parsed message), waitable."""

    def __init__(self) -> None:
        self.items: list[tuple[str, dict[str, Any]]] = []
        self.changed = threading.Condition()

    def __call__(self, topic_arn: str, message: str) -> None:
        with self.changed:
            self.items.append((topic_arn, json.loads(message)))
            self.changed.notify_all()

    def wait_for(self, count: int, timeout: float = 5) -> list[tuple[str, dict[str, Any]]]:
        with self.changed:
            self.changed.wait_for(lambda: len(self.items) >= count, timeout)
            return list(self.items)


@pytest.fixture
def published() -> Published:
    return Published()


@pytest.fixture
def eum(published: Published, monkeypatch: pytest.MonkeyPatch) -> Iterator[EndUserMessagingFake]:
    fake = EndUserMessagingFake(publish=published, successful_after=0.05, delivered_after=0.1)
    fake.add_configuration_set(CONFIGURATION_SET, TOPIC_ARN)
    with fake:
        for name, value in {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_SESSION_TOKEN": "testing",
            "AWS_DEFAULT_REGION": "eu-central-1",
            END_USER_MESSAGING_ENDPOINT: fake.url,
        }.items():
            monkeypatch.setenv(name, value)
        monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
        # The gateway's client as deployed, but giving up on an answer after 1 s, not 10.
        monkeypatch.setattr(aws, "_CONFIG", aws._CONFIG.merge(Config(read_timeout=1, connect_timeout=1)))
        aws.reset_clients()
        yield fake
        aws.reset_clients()


def gateway(configuration_set: str | None = CONFIGURATION_SET) -> EndUserMessagingGateway:
    return EndUserMessagingGateway(origination_identity="MyShop", configuration_set=configuration_set)


def sms(key: str = "key-1", phone: str = PHONE, body: str = "Your order A-1 has shipped.") -> OutgoingSms:
    return OutgoingSms(key=key, phone=phone, body=body)


def test_botocore_derives_the_endpoint_variable_the_overlay_sets(eum: EndUserMessagingFake) -> None:
    client = boto3.session.Session().client("pinpoint-sms-voice-v2")

    assert client.meta.endpoint_url == eum.url
    assert boto3.session.Session().client("sns").meta.endpoint_url != eum.url


def test_a_send_is_accepted_with_a_message_id_and_recorded_as_sent(eum: EndUserMessagingFake) -> None:
    accepted = gateway().send(sms())

    assert accepted.message_id is not None and len(accepted.message_id) == 36
    [call] = eum.calls()
    assert call["headers"]["x-amz-target"] == "PinpointSMSVoiceV2.SendTextMessage"
    assert "authorization" not in call["headers"]
    assert call["body"] == {
        "DestinationPhoneNumber": PHONE,
        "MessageBody": "Your order A-1 has shipped.",
        "MessageType": "TRANSACTIONAL",
        "Context": {CONTEXT_KEY: "key-1"},
        "OriginationIdentity": "MyShop",
        "ConfigurationSetName": CONFIGURATION_SET,
    }
    [message] = eum.messages()
    assert (message["message_id"], message["to"], message["context"]) == (
        accepted.message_id,
        PHONE,
        {CONTEXT_KEY: "key-1"},
    )


def test_an_accepted_send_publishes_its_delivery_events_as_documented(
    eum: EndUserMessagingFake, published: Published
) -> None:
    accepted = gateway().send(sms())

    events = published.wait_for(2)
    assert [topic for topic, _ in events] == [TOPIC_ARN, TOPIC_ARN]
    documented = set(json.loads(FIXTURE.read_text())) - {"mcc", "mnc"}  # carrier codes: no carrier here
    for _, event in events:
        assert set(event) == documented
        parsed = DeliveryEvent.parse(event)
        assert (parsed.message_id, parsed.context) == (accepted.message_id, {CONTEXT_KEY: "key-1"})
        assert event["destinationPhoneNumber"] == PHONE
    successful, delivered = (DeliveryEvent.parse(event) for _, event in events)
    assert (successful.event_type, successful.is_final) == ("TEXT_SUCCESSFUL", False)
    assert (delivered.event_type, delivered.is_final) == ("TEXT_DELIVERED", True)
    assert successful.event_timestamp < delivered.event_timestamp
    assert [e["event_type"] for e in eum.events()] == ["TEXT_SUCCESSFUL", "TEXT_DELIVERED"]


def test_a_send_without_a_configuration_set_has_no_delivery_events(
    eum: EndUserMessagingFake, published: Published
) -> None:
    gateway(configuration_set=None).send(sms())

    time.sleep(0.3)
    assert published.items == []
    assert len(eum.messages()) == 1


@pytest.mark.parametrize(
    ("outgoing", "configuration_set", "code"),
    [
        (sms(phone="4915771234567"), CONFIGURATION_SET, "ValidationException:FIELD_VALIDATION_FAILED"),
        (sms(body="   "), CONFIGURATION_SET, "ValidationException:FIELD_VALIDATION_FAILED"),
        (sms(body="x" * 1601), CONFIGURATION_SET, "ValidationException:FIELD_VALIDATION_FAILED"),
        (sms(key=" padded "), CONFIGURATION_SET, "ValidationException:FIELD_VALIDATION_FAILED"),
        (sms(), "no-such-set", "ResourceNotFoundException"),
        (
            sms(),
            f"arn:aws:sms-voice:eu-central-1:123456789012:configuration-set/{CONFIGURATION_SET}x",
            "ResourceNotFoundException",
        ),
    ],
)
def test_what_a_real_send_would_refuse_is_refused_for_good_and_sends_nothing(
    eum: EndUserMessagingFake, outgoing: OutgoingSms, configuration_set: str, code: str
) -> None:
    with pytest.raises(GatewayRefused) as refused:
        gateway(configuration_set).send(outgoing)

    assert (refused.value.code, refused.value.transient) == (code, False)
    assert PHONE not in str(refused.value)
    assert eum.messages() == []


def test_a_configuration_set_may_be_named_by_its_arn(eum: EndUserMessagingFake, published: Published) -> None:
    arn = f"arn:aws:sms-voice:eu-central-1:123456789012:configuration-set/{CONFIGURATION_SET}"

    gateway(arn).send(sms())

    assert len(published.wait_for(2)) == 2


@pytest.mark.parametrize(
    ("fault", "error", "code", "transient"),
    [
        ({"fail_next": 1, "status": 500}, GatewayOutcomeUnknown, "InternalServerException", None),
        ({"fail_next": 1, "status": 503}, GatewayOutcomeUnknown, "InternalServerException", None),
        ({"rate_limit_next": 1}, GatewayRefused, "ThrottlingException", True),
        (
            {"fail_next": 1, "status": 402},
            GatewayRefused,
            "ServiceQuotaExceededException:MONTHLY_SPEND_LIMIT_REACHED_FOR_TEXT",
            True,
        ),
        (
            {"fail_next": 1, "status": 409},
            GatewayRefused,
            "ConflictException:DESTINATION_PHONE_NUMBER_OPTED_OUT",
            False,
        ),
        ({"fail_next": 1, "status": 400}, GatewayRefused, "ValidationException:INVALID_PARAMETER", False),
        ({"fail_next": 1, "status": 403}, GatewayRefused, "AccessDeniedException", False),
        ({"fail_next": 1, "status": 404}, GatewayRefused, "ResourceNotFoundException", False),
        ({"hang_next": 1, "seconds": 3}, GatewayOutcomeUnknown, "ReadTimeoutError", None),
        ({"drop_answer_next": 1}, GatewayOutcomeUnknown, None, None),
    ],
)
def test_faults_are_the_errors_end_user_messaging_returns(
    eum: EndUserMessagingFake,
    fault: dict[str, Any],
    error: type[Exception],
    code: str | None,
    transient: bool | None,
) -> None:
    eum.add_faults({**fault, "match": "SendTextMessage"})

    with pytest.raises(error) as raised:
        gateway().send(sms())

    if code is not None:
        assert raised.value.code == code  # type: ignore[attr-defined]
    if transient is not None:
        assert raised.value.transient is transient  # type: ignore[attr-defined]
    kind = next(key for key in fault if key.endswith("_next")).removesuffix("_next")
    assert [call["fault"] for call in eum.calls()] == [kind]
    assert gateway().send(sms(key="key-2")).message_id, "only the next call was affected"


def test_a_dropped_answer_still_sends_and_publishes_the_delivery_events(
    eum: EndUserMessagingFake, published: Published
) -> None:
    eum.add_faults({"drop_answer_next": 1})

    with pytest.raises(GatewayOutcomeUnknown):
        gateway().send(sms())

    [message] = eum.messages()
    events = published.wait_for(2)
    assert {event["messageId"] for _, event in events} == {message["message_id"]}
    assert {event["context"][CONTEXT_KEY] for _, event in events} == {"key-1"}


def test_a_hang_sends_the_message_after_the_client_gave_up(
    eum: EndUserMessagingFake, published: Published
) -> None:
    eum.add_faults({"hang_next": 1, "seconds": 1.5})

    with pytest.raises(GatewayOutcomeUnknown):
        gateway().send(sms())

    assert eum.messages() == []
    assert len(published.wait_for(2, timeout=5)) == 2
    assert len(eum.messages()) == 1


def test_downtime_is_a_refusal_that_may_be_retried(eum: EndUserMessagingFake) -> None:
    eum.go_down(5)
    try:
        with pytest.raises(GatewayRefused) as refused:
            gateway().send(sms())
    finally:
        eum.come_back()

    assert (refused.value.code, refused.value.transient) == ("EndpointConnectionError", True)


def test_delivery_events_can_be_dropped_or_delayed(eum: EndUserMessagingFake, published: Published) -> None:
    state = eum.add_faults({"drop_events_next": 1, "delay_events_next": 1, "events_after": 0.5})
    assert [(f["kind"], f["remaining"]) for f in state["events"]] == [("drop", 1), ("delay", 1)]

    dropped = gateway().send(sms(key="dropped"))
    delayed_at = time.monotonic()
    delayed = gateway().send(sms(key="delayed"))
    events = published.wait_for(2)

    assert {event["messageId"] for _, event in events} == {delayed.message_id}
    assert time.monotonic() - delayed_at >= 0.5
    assert [e.get("dropped") for e in eum.events() if e["message_id"] == dropped.message_id] == [True]
    assert eum.fault_state()["events"] == []


@pytest.mark.parametrize(
    "document",
    [{"events_after": 3}, {"drop_events_next": 0}, {"delay_events_next": True}, {"match": "SendTextMessage"}],
)
def test_an_event_fault_it_cannot_follow_is_refused(
    eum: EndUserMessagingFake, document: dict[str, Any]
) -> None:
    body = json.dumps(document).encode()
    req = urllib.request.Request(f"{eum.url}/_faults", data=body, method="POST")  # noqa: S310 - loopback
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(req, timeout=5)  # noqa: S310 - loopback
    assert refused.value.code == 400
    assert eum.fault_state()["events"] == []


def test_only_send_text_message_is_served_and_only_to_signed_requests(eum: EndUserMessagingFake) -> None:
    client = boto3.session.Session().client("pinpoint-sms-voice-v2")
    with pytest.raises(ClientError) as unknown:
        client.describe_configuration_sets()
    assert unknown.value.response["Error"]["Code"] == "UnknownOperationException"

    req = urllib.request.Request(  # noqa: S310 - loopback
        f"{eum.url}/",
        data=json.dumps({"DestinationPhoneNumber": PHONE, "MessageBody": "hi"}).encode(),
        method="POST",
        headers={
            "X-Amz-Target": "PinpointSMSVoiceV2.SendTextMessage",
            "Content-Type": "application/x-amz-json-1.0",
        },
    )
    with pytest.raises(urllib.error.HTTPError) as unsigned:
        urllib.request.urlopen(req, timeout=5)  # noqa: S310 - loopback
    assert unsigned.value.code == 403
    assert json.loads(unsigned.value.read())["__type"] == "MissingAuthenticationTokenException"
    assert eum.messages() == []


def test_max_price_is_sent_and_a_part_priced_above_it_is_refused_for_good_sending_nothing(
    eum: EndUserMessagingFake,
) -> None:
    capped = EndUserMessagingGateway(configuration_set=CONFIGURATION_SET, max_price="0.05")
    eum.price_per_part = 0.04
    capped.send(sms(key="cheap"))
    assert eum.calls()[-1]["body"]["MaxPrice"] == "0.05"

    eum.price_per_part = 0.06
    with pytest.raises(GatewayRefused) as refused:
        capped.send(sms(key="dear"))
    assert (refused.value.code, refused.value.transient) == (
        "ValidationException:PRICE_OVER_THRESHOLD",
        False,
    )
    assert [m["context"][CONTEXT_KEY] for m in eum.messages()] == ["cheap"]


@pytest.mark.parametrize("max_price", ["100.0", "0.123456", "1.", "abc"])
def test_a_max_price_end_user_messaging_would_not_parse_is_refused(
    eum: EndUserMessagingFake, max_price: str
) -> None:
    with pytest.raises(GatewayRefused) as refused:
        EndUserMessagingGateway(max_price=max_price).send(sms())
    assert refused.value.code == "ValidationException:FIELD_VALIDATION_FAILED"
    assert eum.messages() == []


def test_parts_are_counted_as_billed_an_extension_character_two_septets(
    eum: EndUserMessagingFake, published: Published
) -> None:
    eum.price_per_part = 0.01
    # 150 GSM characters and 6 of the extension table: 162 septets, two parts, though 156 characters.
    gateway().send(sms(body="a" * 150 + "€" * 6))
    [message] = eum.messages()
    assert message["parts"] == 2
    events = published.wait_for(2)
    assert {(e["messageEncoding"], e["totalMessageParts"], e["totalMessagePrice"]) for _, e in events} == {
        ("GSM", 2, 0.02)
    }
