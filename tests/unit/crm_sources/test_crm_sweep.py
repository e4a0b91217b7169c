"""`pipeline.crm.sweep`: the catch-up sweep asks the CRM consumers to look at every order whose
history grew, from a cursor per CRM, so a webhook that never came still yields its SMS.

Scripted sources (the adapter protocol) play the CRMs; the events topic and the cursors are moto's.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from amocrm import logic as amocrm_logic

from pipeline import aws
from pipeline.crm import sweep as crm_sweep
from pipeline.crm.amocrm import StatusEvent
from pipeline.crm.sweep import Changed, SweepCursor, SweepFailed, sweep
from pipeline.envelope import message_group
from pipeline.errors import PermanentError
from tests.unit.consumer_support import JOURNAL_TABLE

NOW = datetime(2026, 12, 2, 10, 0, tzinfo=UTC)


@dataclass
class ScriptedHistory:
    """A CRM whose history is a list of (record number, order id); the cursor is a number."""

    name: str = "bitrix24"
    noun: str = "deal"
    records: list[tuple[int, int]] = field(default_factory=list)
    asked: list[tuple[str | None, datetime]] = field(default_factory=list)
    down: bool = False

    def changed_since(
        self, cursor: str | None, since: datetime, now: datetime
    ) -> tuple[list[Changed], str | None]:
        self.asked.append((cursor, since))
        if self.down:
            raise ConnectionError("portal unreachable")
        after = int(cursor) if cursor else 0
        fresh = [(ref, order) for ref, order in self.records if ref > after]
        newest: dict[int, str] = {}
        for ref, order in fresh:
            newest.pop(order, None)
            newest[order] = f"{self.name}:stagehistory:{ref}"
        return [Changed(o, r) for o, r in newest.items()], str(max(r for r, _ in fresh)) if fresh else None

    def look_payload(self, order_id: int) -> dict[str, Any]:
        if self.name == "amocrm":
            return {"lead": {"id": order_id}}
        return {"data": {"FIELDS": {"ID": str(order_id)}}}


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
    assert sweep({"bitrix24": lambda: crm}, cursors(), NOW) == {"bitrix24": 2}
    assert crm.asked == [(None, NOW - timedelta(hours=2))]
    looks = topic()
    assert [look["envelope"]["payload"]["data"]["FIELDS"]["ID"] for look in looks] == ["7", "42"]
    first = looks[1]["envelope"]
    assert (first["source"], first["type"]) == ("bitrix24", "history.sweep")
    assert first["event_id"] == "bitrix24:sweep:deal:42:bitrix24:stagehistory:13"
    # The same FIFO group as the deal's webhooks: one deal's looks in order.
    assert looks[1]["group"].startswith("bitrix24:deal:42")


def test_the_next_sweep_reads_from_the_cursor_and_a_quiet_crm_publishes_nothing(
    topic: Callable[[], list[dict[str, Any]]],
) -> None:
    crm = ScriptedHistory(records=[(11, 42)])
    sweep({"bitrix24": lambda: crm}, cursors(), NOW)
    topic()
    assert sweep({"bitrix24": lambda: crm}, cursors(), NOW + timedelta(minutes=5)) == {"bitrix24": 0}
    crm.records.append((12, 9))
    sweep({"bitrix24": lambda: crm}, cursors(), NOW + timedelta(minutes=10))
    assert [cursor for cursor, _ in crm.asked] == [None, "11", "11"]
    assert [look["envelope"]["payload"]["data"]["FIELDS"]["ID"] for look in topic()] == ["9"]


def test_one_crm_down_is_counted_and_fails_the_run_after_the_others_were_swept(
    topic: Callable[[], list[dict[str, Any]]],
) -> None:
    down = ScriptedHistory(down=True)
    amo = ScriptedHistory(name="amocrm", noun="lead", records=[(5, 3)])
    crm_sweep.metrics.clear_metrics()
    with pytest.raises(SweepFailed, match="bitrix24"):
        sweep({"bitrix24": lambda: down, "amocrm": lambda: amo}, cursors(), NOW)
    assert [look["envelope"]["payload"] for look in topic()] == [
        {"lead": {"id": 3}, "sweep": {"newest_record": "amocrm:stagehistory:5"}}
    ]
    assert crm_sweep.metrics.metric_set[crm_sweep.FAILURES_METRIC]["Value"] == [1.0]
    crm_sweep.metrics.clear_metrics()
    # Its cursor did not move: the next run reads the same records.
    down.down = False
    down.records = [(1, 8)]
    sweep({"bitrix24": lambda: down}, cursors(), NOW + timedelta(minutes=5))
    assert [cursor for cursor, _ in down.asked] == [None, None]


def test_a_wrong_secret_of_one_crm_does_not_stop_the_other(topic: Callable[[], list[dict[str, Any]]]) -> None:
    def broken() -> ScriptedHistory:
        raise ValueError("the bitrix24_api secret has no url")

    amo = ScriptedHistory(name="amocrm", noun="lead", records=[(5, 3)])
    with pytest.raises(SweepFailed):
        sweep({"bitrix24": broken, "amocrm": lambda: amo}, cursors(), NOW)
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
        sweep({"bitrix24": lambda: crm}, cursors(), NOW)
    monkeypatch.setattr(SweepCursor, "save", saving)
    sweep({"bitrix24": lambda: crm}, cursors(), NOW + timedelta(seconds=30))
    looks = topic()
    assert len(looks) == 1  # the FIFO topic deduplicated the second run's event
    assert looks[0]["envelope"]["event_id"].endswith(":bitrix24:stagehistory:11")


def test_the_look_event_is_routed_as_the_crms_webhook_event_is() -> None:
    crm = ScriptedHistory(name="amocrm", noun="lead")
    envelope = crm_sweep.look_envelope(crm, Changed(5, "amocrm:event:01abc"), NOW, "c")
    assert message_group(envelope) == "amocrm:lead:5"


# -- the amoCRM adapter's reading of a busy account ---------------------------------------------------
@dataclass
class BusyAccount:
    """`GET /api/v4/events` of an account: `per_second` status events in each second, newest first."""

    first: int
    seconds: int
    per_second: int
    page_size: int = 3
    calls: list[tuple[int, int, int]] = field(default_factory=list)

    def status_events(self, query: dict[str, int], *, page: int = 1) -> tuple[list[Any], bool]:
        low, high = query["filter[created_at][from]"], query["filter[created_at][to]"]
        self.calls.append((low, high, page))
        events = [
            StatusEvent(
                id=f"01{second:010d}{n:04d}",
                type="lead_status_changed",
                entity_id=1000 + (second - self.first) * self.per_second + n,
                created_at=second,  # type: ignore[arg-type]  # unix seconds, as amoCRM writes them
                after=(7001, 70013),
            )
            for second in range(max(low, self.first), min(high, self.first + self.seconds - 1) + 1)
            for n in range(self.per_second)
        ][::-1]
        chunk = events[(page - 1) * self.page_size : page * self.page_size]
        return chunk, page * self.page_size < len(events)


def test_a_window_with_more_events_than_the_pages_read_is_split_not_cut(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """amoCRM lists newest first: a read capped at SWEEP_PAGES would miss a busy window's oldest
    moves, and the cursor would pass them for good."""
    monkeypatch.setattr(amocrm_logic, "SWEEP_PAGES", 2)  # 6 events a read
    start = int(NOW.timestamp()) - 300
    account = BusyAccount(first=start, seconds=10, per_second=2)
    source = amocrm_logic.AmoCrmSource(account)  # type: ignore[arg-type]

    changed, cursor = source.changed_since(str(start), NOW, NOW)

    assert sorted(one.order_id for one in changed) == list(range(1000, 1020))
    assert cursor == str(int(NOW.timestamp()) - amocrm_logic.SWEEP_OVERLAP_SECONDS)
    assert any(high - low < 299 for low, high, _ in account.calls)  # it did split


def test_a_second_with_more_events_than_the_pages_read_fails_the_sweep_loudly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(amocrm_logic, "SWEEP_PAGES", 2)
    start = int(NOW.timestamp()) - 60
    source = amocrm_logic.AmoCrmSource(BusyAccount(first=start, seconds=1, per_second=7))  # type: ignore[arg-type]

    with pytest.raises(PermanentError, match="within one second"):
        source.changed_since(str(start), NOW, NOW)
