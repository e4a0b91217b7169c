"""SNS filter policies from the registry: each consumer's queue gets its source's events only.

Runs over every registry consumer (gated ones included), so a new consumer is covered as
soon as it is declared. moto applies the filter policies on the message attributes.
"""

from __future__ import annotations

import json
from typing import get_args

import pytest

from local.resources import EVENTS_TOPIC_ATTRIBUTES
from pipeline import aws
from pipeline.broadcast import page_envelope
from pipeline.envelope import Envelope, Source, publish_request, sns_attributes
from pipeline.registry import CONSUMERS, Consumer, matches
from tests.unit.consumer_support import (
    TELEGRAM_FIXTURE_NAMES,
    Published,
    amocrm_envelope,
    bitrix24_envelope,
    create_queues,
    crm_envelope,
    crm_event,
    telegram_envelope,
    telegram_update,
)

CRM_FIXTURE_NAMES = ("order_status_changed", "order_created_first_status")


def published_events() -> list[Published]:
    telegram = [telegram_envelope(telegram_update(name)) for name in TELEGRAM_FIXTURE_NAMES]
    crm = [crm_envelope(crm_event(name)) for name in CRM_FIXTURE_NAMES]
    # The CRMs' own webhooks, as the webhook publishes them.
    crm_sources = [
        bitrix24_envelope(759),
        bitrix24_envelope(760, "ONCRMDEALADD"),
        amocrm_envelope(1, 2, 3, 4),
    ]
    # A broadcast's page, as `ops broadcast create` publishes it.
    envelope, attributes = page_envelope("bc-20261206010000-a1b2c3", 0, [1001, 1002])
    return telegram + crm + crm_sources + [Published(envelope, attributes)]


@pytest.mark.usefixtures("moto_aws")
@pytest.mark.parametrize("consumer", CONSUMERS, ids=lambda c: c.name)
def test_each_queue_receives_exactly_the_events_its_filter_policy_selects(consumer: Consumer) -> None:
    sns, sqs = aws.client("sns"), aws.client("sqs")
    topic_arn = sns.create_topic(Name="events.fifo", Attributes=EVENTS_TOPIC_ATTRIBUTES)["TopicArn"]
    queues = {c.name: create_queues(c) for c in CONSUMERS}
    for c in CONSUMERS:
        sns.subscribe(
            TopicArn=topic_arn,
            Protocol="sqs",
            Endpoint=queues[c.name].queue_arn,
            Attributes={"RawMessageDelivery": "true", "FilterPolicy": json.dumps(c.filter_policy)},
        )
    events = published_events()
    # Every source the webhook publishes (pipeline.envelope.Source) is among the events.
    assert {p.envelope.source for p in events} == set(get_args(Source))
    for event in events:
        sns.publish(**publish_request(topic_arn, event.envelope, sns_attributes(event.attributes)))

    received: list[dict] = []
    url = queues[consumer.name].queue_url
    while batch := sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, MessageAttributeNames=["All"]
    ).get("Messages", []):
        received.extend(batch)
        # Deleted as a worker would: a FIFO queue holds a chat's next message while one is in flight.
        for message in batch:
            sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])

    by_id = {p.envelope.event_id: p for p in events}
    envelopes = [Envelope.from_json(m["Body"]) for m in received]
    expected = {p.envelope.event_id for p in events if matches(consumer.filter_policy, p.attributes)}
    assert expected, f"no fixture is routed to {consumer.name}: add one it takes"
    assert sorted(e.event_id for e in envelopes) == sorted(expected)
    if consumer.source is not None:
        assert {e.source for e in envelopes} == {consumer.source}  # never the other source's events
    for message, envelope in zip(received, envelopes, strict=True):
        # Raw delivery: the body is the envelope itself and the routing attributes come along.
        assert message["Body"] == by_id[envelope.event_id].body
        attributes = {n: a["StringValue"] for n, a in message.get("MessageAttributes", {}).items()}
        assert attributes == by_id[envelope.event_id].attributes
