"""An upgrade over a running stack: what the previous release left in the tables, and the messages
it published that were still in a queue or a DLQ (SQS moves a message to the DLQ unchanged), run
through this release's consumers. Nothing is sent twice, nothing is lost, every key is still found.

The fixtures under `tests/fixtures/upgrade/<release>/` were captured from that release's own code
(`python -m ops release capture-fixtures --ref <commit>`: its demo through its local pipeline).
Their expirations are rebased to now, as if the deploy happened right after the capture.

Powertools v2 changed its idempotency key format: records not yet expired were missed after the
upgrade and the work ran again. Here that would be a second SMS, lead or reply per event in flight.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from pipeline import aws
from pipeline.envelope import Envelope
from pipeline.formats import format_of, key_of
from pipeline.registry import by_name, matches
from tests.unit.consumer_support import (
    BOT_STATE_TABLE,
    CONVERSATIONS_TABLE,
    JOURNAL_TABLE,
    Published,
)
from tests.unit.consumers.conftest import AUTH_HEADER, DeployedConsumer, FakeHttpServer, Scripted

UPGRADE_FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "upgrade"
RELEASES = sorted(path.name for path in UPGRADE_FIXTURES.iterdir() if (path / "capture.json").exists())
TABLES = {"journal": JOURNAL_TABLE, "conversations": CONVERSATIONS_TABLE, "bot_state": BOT_STATE_TABLE}
# The bot the captured demo ran (its local default).
DEMO_BOT = "bot.examples.lead_bot:build"


def captured(release: str, name: str) -> Any:
    return json.loads((UPGRADE_FIXTURES / release / name).read_text())


def rebased(release: str) -> dict[str, list[dict[str, Any]]]:
    """The release's items, their expirations moved by the time since the capture."""
    at = datetime.fromisoformat(captured(release, "capture.json")["captured_at"].replace("Z", "+00:00"))
    shift = int(datetime.now(at.tzinfo).timestamp() - at.timestamp())
    tables = captured(release, "tables.json")
    for items in tables.values():
        for item in items:
            if "N" in item.get("expiration", {}):
                item["expiration"] = {"N": str(int(item["expiration"]["N"]) + shift)}
            if "N" in item.get("in_progress_expiration", {}):
                ms = int(item["in_progress_expiration"]["N"]) + shift * 1000
                item["in_progress_expiration"] = {"N": str(ms)}
    return tables


def binaries_decoded(value: Any) -> Any:
    """DynamoDB JSON as saved (binary values base64 text) as boto3's client takes it (bytes)."""
    if isinstance(value, dict):
        return {
            kind: base64.b64decode(inner)
            if kind == "B"
            else [base64.b64decode(v) for v in inner]
            if kind == "BS"
            else binaries_decoded(inner)
            for kind, inner in value.items()
        }
    if isinstance(value, list):
        return [binaries_decoded(inner) for inner in value]
    return value


def restore(release: str, keep: Callable[[str, dict[str, Any]], bool] = lambda table, item: True) -> None:
    dynamodb = aws.client("dynamodb")
    for table, items in rebased(release).items():
        for item in items:
            if keep(table, item):
                dynamodb.put_item(TableName=TABLES[table], Item=binaries_decoded(item))


def in_flight(release: str, consumer: str) -> list[Published]:
    """The captured messages SNS would deliver to this release's `consumer` queue, and those its
    queue and DLQ still held at the capture's stop (`queues.json`; a DLQ holds them unchanged)."""
    policy = by_name(consumer).filter_policy
    found: dict[str, Published] = {}
    for message in captured(release, "messages.json"):
        attributes = {name: value["StringValue"] for name, value in message["attributes"].items()}
        if matches(policy, attributes):
            found.setdefault(message["body"], Published(Envelope.from_json(message["body"]), attributes))
    queues = captured(release, "queues.json") if (UPGRADE_FIXTURES / release / "queues.json").exists() else {}
    for message in queues.get(consumer, []) + queues.get(f"{consumer}-dlq", []):
        attributes = {name: value["StringValue"] for name, value in message["attributes"].items()}
        found.setdefault(message["body"], Published(Envelope.from_json(message["body"]), attributes))
    return list(found.values())


def idempotency_records(release: str) -> dict[str, int]:
    """Consumer -> how many Powertools records (`<consumer>#<hash>`, with a status) it left."""
    counts: dict[str, int] = {}
    for item in captured(release, "tables.json")["journal"]:
        if "status" in item and "S" in item["status"] and item["status"]["S"] in ("COMPLETED", "INPROGRESS"):
            prefix = item["id"]["S"].split("#", 1)[0]
            counts[prefix] = counts.get(prefix, 0) + 1
    return counts


def written_since(
    release: str, kept: Callable[[str, dict[str, Any]], bool] = lambda table, item: True
) -> list[str]:
    """Items this release's run wrote anew (keys the restored release did not leave) that are not
    at their format's current version, or of a kind no format claims: each should be neither."""
    left = {
        (table, key_of(table, item))
        for table, items in captured(release, "tables.json").items()
        for item in items
        if kept(table, item)
    }
    wrong = []
    for table, name in TABLES.items():
        for item in aws.client("dynamodb").scan(TableName=name)["Items"]:
            key = key_of(table, item)
            if (table, key) in left:
                continue
            fmt = format_of(table, item)
            if fmt is None or fmt.version_of(item) != fmt.version:
                wrong.append(f"{table} {key}: {fmt.name if fmt else 'no format'}")
    return wrong


CASES = [(release, consumer) for release in RELEASES for consumer in sorted(idempotency_records(release))]
# Run again, these read their vendor (the Bitrix24 portal's deal), which `deploy_as_captured` does
# not stand in for: their re-runs are the CRM sweep tests' (tests/unit/crm_sources).
READS_ITS_VENDOR_AGAIN = {"bitrix24", "amocrm"}


@pytest.fixture
def deploy_as_captured(
    run_consumer: Callable[[str], DeployedConsumer],
    deploy_bot: Callable[[str], DeployedConsumer],
    put_secret: Callable[[str, str], None],
    http_fake: FakeHttpServer,
    telegram: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> Callable[[str], DeployedConsumer]:
    """A consumer of this release, its vendors the stand-ins (each records every call)."""

    def deploy(name: str) -> DeployedConsumer:
        if name == "bot":
            return deploy_bot(DEMO_BOT)
        monkeypatch.setenv("TELEGRAM_API_BASE", telegram.url)
        consumer = run_consumer(name)
        if name == "crm":
            config = {"kind": "webhook", "url": f"{http_fake.base_url}/leads", "auth_header": AUTH_HEADER}
            put_secret("crm_api", json.dumps(config))
            http_fake.default = Scripted(201, {"id": "lead-new"})
        return consumer

    return deploy


def vendor_calls(http_fake: FakeHttpServer, telegram: Any) -> list[str]:
    sent = [f"{call['method']} {call['path']}" for call in telegram.calls() if "/_" not in call["path"]]
    return sent + [f"{request.method} {request.path}" for request in http_fake.requests]


@pytest.mark.parametrize(("release", "consumer"), CASES)
def test_every_message_in_flight_at_the_upgrade_is_a_duplicate_found_by_its_old_key(
    release: str,
    consumer: str,
    deploy_as_captured: Callable[[str], DeployedConsumer],
    http_fake: FakeHttpServer,
    telegram: Any,
) -> None:
    """The previous release processed these; this release finds each one's idempotency record
    (the key format did not change), returns its saved response and calls no vendor."""
    deployed = deploy_as_captured(consumer)
    restore(release)
    messages = in_flight(release, consumer)
    assert messages, f"{release} published nothing {consumer} takes: the capture is incomplete"
    worker = deployed.app.worker
    for published in messages:
        delivery = deployed.deliver(published)
        assert delivery.failed == [], f"{consumer} failed {published.envelope.event_id}"
    assert dict(worker.counts) == {"duplicate": len(messages)}
    assert vendor_calls(http_fake, telegram) == []
    assert written_since(release) == []


@pytest.mark.parametrize(
    ("release", "consumer"), [case for case in CASES if case[1] not in READS_ITS_VENDOR_AGAIN]
)
def test_with_the_idempotency_records_gone_the_old_items_still_keep_sends_single(
    release: str,
    consumer: str,
    deploy_as_captured: Callable[[str], DeployedConsumer],
    http_fake: FakeHttpServer,
    telegram: Any,
) -> None:
    """Past the idempotency TTL (or a record lost) the consumer runs again on the previous
    release's items: its own marks (the lead pushed, the Bot API call recorded, the SMS journal)
    are read, so no lead, reply or SMS goes out twice; and every message is read, none lost."""
    deployed = deploy_as_captured(consumer)

    def kept(table: str, item: dict[str, Any]) -> bool:
        return not item["id"]["S"].startswith(f"{consumer}#") if table == "journal" else True

    restore(release, keep=kept)
    messages = in_flight(release, consumer)
    worker = deployed.app.worker
    for published in messages:
        delivery = deployed.deliver(published)
        assert delivery.failed == [], f"{consumer} failed {published.envelope.event_id}"
    assert worker.counts["processed"] + worker.counts["duplicate"] == len(messages)
    sends = [call for call in vendor_calls(http_fake, telegram) if not call.endswith(("/getMe", "/getme"))]
    assert sends == []
    # What this run wrote (each message's new idempotency record, with its saved response; any
    # mark it made) is written at its format's current version.
    assert written_since(release, kept) == []
