"""`pipeline.crm.sweep`: the catch-up sweep asks the CRM consumers to look at every order whose
history grew, from a cursor per CRM, so a webhook that never came still yields its SMS.

Scripted sources (the adapter protocol) play the CRMs; the events topic and the cursors are moto's.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from pipeline import aws
from pipeline.crm import sweep as crm_sweep
from pipeline.crm.sweep import Changed, Page, SweepCursor, SweepFailed, latest_changes, sweep
from pipeline.envelope import message_group
from tests.unit.consumer_support import JOURNAL_TABLE

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


@dataclass
class ScriptedHistory:
    """A CRM whose history is a list of (record number, order id), read in one page; the position
    is the last number read."""

    name: str = "bitrix24"
    noun: str = "deal"
    requests_per_second: float = 100.0
    records: list[tuple[int, int]] = field(default_factory=list)
    asked: list[Any] = field(default_factory=list)
    down: bool = False

    def sweep_start(self, since: datetime) -> dict[str, Any]:
        return {"after": 0, "since": since.isoformat()}

    def sweep_resume(self, cursor: str) -> dict[str, Any]:
        return {"after": int(cursor)}

    def sweep_page(self, position: Mapping[str, Any], now: datetime, overlap: timedelta) -> Page:
        self.asked.append(dict(position))
        if self.down:
            raise ConnectionError("portal unreachable")
        after = int(position["after"])
        fresh = [(ref, order) for ref, order in self.records if ref > after]
        changes = latest_changes((order, f"{self.name}:stagehistory:{ref}") for ref, order in fresh)
        return Page(changes, {"after": max([after, *(r for r, _ in fresh)])}, now, True)

    def look_payload(self, order_id: int) -> dict[str, Any]:
        if self.name == "amocrm":
            return {"lead": {"id": order_id}}
        return {"data": {"FIELDS": {"ID": str(order_id)}}}


def run(sources: dict[str, Any], now: datetime) -> dict[str, int]:
    swept = sweep(sources, cursors(), now, lambda: 120.0)
    return {name: result.looked for name, result in swept.items()}


@pytest.fixture
def topic(moto_aws: None, monkeypatch: pytest.MonkeyPatch) -> Callable[[], list[dict[str, Any]]]:
    sns, sqs = aws.client("sns"), aws.client("sqs")
    suffix = uuid.uuid4().hex[:8]
    arn = sns.create_topic(
        Name=f"events-{suffix}.fifo", Attributes={"FifoTopic": "true", "ContentBasedDeduplication": "false"}
    )["TopicArn"]
    url = sqs.create_queue(QueueName=f"seen-{suffix}.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(
        TopicArn=arn, Protocol="sqs", Endpoint=queue_arn, Attributes={"RawMessageDelivery": "false"}
    )
    monkeypatch.setenv("EVENTS_TOPIC_ARN", arn)

    def published() -> list[dict[str, Any]]:
        found = []
        while batch := sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["MessageGroupId"]
        ).get("Messages"):
            for message in batch:
                body = json.loads(message["Body"])
                found.append(
                    {
                        "envelope": json.loads(body["Message"]),
                        "group": message["Attributes"]["MessageGroupId"],
                    }
                )
                sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
        return found

    return published


def cursors() -> SweepCursor:
    return SweepCursor(JOURNAL_TABLE)


def test_a_first_sweep_starts_at_the_age_limit_and_asks_one_look_per_changed_order(
    topic: Callable[[], list[dict[str, Any]]],
) -> None:
    crm = ScriptedHistory(records=[(11, 42), (12, 7), (13, 42)])
    assert run({"bitrix24": lambda: crm}, NOW) == {"bitrix24": 2}
    assert crm.asked == [{"after": 0, "since": (NOW - timedelta(hours=2)).isoformat()}]
    looks = topic()
    assert [look["envelope"]["payload"]["data"]["FIELDS"]["ID"] for look in looks] == ["7", "42"]
    first = looks[1]["envelope"]
    assert (first["source"], first["type"]) == ("bitrix24", "history.sweep")
    assert first["event_id"].startswith("bitrix24:sweep:deal:42:bitrix24:stagehistory:13:")
    # The same FIFO group as the deal's webhooks: one deal's looks in order.
    assert looks[1]["group"].startswith("bitrix24:deal:42")


def test_the_next_sweep_reads_from_the_cursor_and_a_quiet_crm_publishes_nothing(
    topic: Callable[[], list[dict[str, Any]]],
) -> None:
    crm = ScriptedHistory(records=[(11, 42)])
    run({"bitrix24": lambda: crm}, NOW)
    topic()
    assert run({"bitrix24": lambda: crm}, NOW + timedelta(minutes=5)) == {"bitrix24": 0}
    crm.records.append((12, 9))
    run({"bitrix24": lambda: crm}, NOW + timedelta(minutes=10))
    assert [position["after"] for position in crm.asked] == [0, 11, 11]
    assert [look["envelope"]["payload"]["data"]["FIELDS"]["ID"] for look in topic()] == ["9"]


def test_one_crm_down_is_counted_and_fails_the_run_after_the_others_were_swept(
    topic: Callable[[], list[dict[str, Any]]],
) -> None:
    down = ScriptedHistory(down=True)
    amo = ScriptedHistory(name="amocrm", noun="lead", records=[(5, 3)])
    crm_sweep.metrics.clear_metrics()
    with pytest.raises(SweepFailed, match="bitrix24"):
        run({"bitrix24": lambda: down, "amocrm": lambda: amo}, NOW)
    assert [look["envelope"]["payload"] for look in topic()] == [
        {"lead": {"id": 3}, "sweep": {"newest_record": "amocrm:stagehistory:5"}}
    ]
    assert crm_sweep.metrics.metric_set[crm_sweep.FAILURES_METRIC]["Value"] == [1.0]
    crm_sweep.metrics.clear_metrics()
    # Its cursor did not move: the next run reads the same records.
    down.down = False
    down.records = [(1, 8)]
    run({"bitrix24": lambda: down}, NOW + timedelta(minutes=5))
    assert [position["after"] for position in down.asked] == [0, 0]


def test_a_wrong_secret_of_one_crm_does_not_stop_the_other(topic: Callable[[], list[dict[str, Any]]]) -> None:
    def broken() -> ScriptedHistory:
        raise ValueError("the bitrix24_api secret has no url")

    amo = ScriptedHistory(name="amocrm", noun="lead", records=[(5, 3)])
    with pytest.raises(SweepFailed):
        run({"bitrix24": broken, "amocrm": lambda: amo}, NOW)
    assert len(topic()) == 1


def test_a_run_repeated_after_a_crash_before_the_cursor_publishes_the_same_event_ids(
    topic: Callable[[], list[dict[str, Any]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """SNS drops the repeats within its window; the consumer's idempotency after it."""
    crm = ScriptedHistory(records=[(11, 42)])

    def crash(self: SweepCursor, *args: Any) -> None:
        raise RuntimeError("died before saving the cursor")

    saving = SweepCursor.save
    monkeypatch.setattr(SweepCursor, "save", crash)
    with pytest.raises(SweepFailed):
        run({"bitrix24": lambda: crm}, NOW)
    monkeypatch.setattr(SweepCursor, "save", saving)
    run({"bitrix24": lambda: crm}, NOW + timedelta(seconds=30))
    looks = topic()
    assert len(looks) == 1  # the FIFO topic deduplicated the second run's event
    assert looks[0]["envelope"]["event_id"].endswith(":bitrix24:stagehistory:11")


def test_the_look_event_is_routed_as_the_crms_webhook_event_is() -> None:
    crm = ScriptedHistory(name="amocrm", noun="lead")
    envelope = crm_sweep.look_envelope(crm, Changed(5, "amocrm:event:01abc"), NOW, "c")
    assert message_group(envelope) == "amocrm:lead:5"
