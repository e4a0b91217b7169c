"""What a consumer writes carries its format's version, and what a newer release wrote is refused.

Through a real consumer (`store`) on moto: the Powertools idempotency record and its saved response
carry `schema_version` (`pipeline.idempotency_store`); an envelope or an idempotency record of a
version newer than this code's is refused with a reason naming it, never taken for a duplicate,
a fresh event, or a current-format message (a rollback past the release that wrote it).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from pipeline import aws
from pipeline.formats import by_name
from tests.unit.consumer_support import JOURNAL_TABLE, telegram_envelope, telegram_update
from tests.unit.consumers.conftest import DeployedConsumer

IDEMPOTENCY = by_name("idempotency_record")
ENVELOPE = by_name("envelope")


def journal_records(consumer: str) -> list[dict[str, Any]]:
    items = aws.client("dynamodb").scan(TableName=JOURNAL_TABLE)["Items"]
    return [
        item
        for item in items
        if IDEMPOTENCY.key.fullmatch(item["id"]["S"]) and item["id"]["S"].startswith(f"{consumer}#")
    ]


def conversation_count() -> int:
    from tests.unit.consumer_support import CONVERSATIONS_TABLE

    return len(aws.client("dynamodb").scan(TableName=CONVERSATIONS_TABLE)["Items"])


def test_the_idempotency_record_and_its_saved_response_carry_the_current_version(
    run_consumer: Callable[[str], DeployedConsumer],
) -> None:
    store = run_consumer("store")
    published = telegram_envelope(telegram_update("private_start"))
    assert json.loads(published.body)["schema_version"] == ENVELOPE.version
    assert store.deliver(published).failed == []
    [record] = journal_records("store")
    assert record["status"] == {"S": "COMPLETED"} and "data" in record
    assert record["schema_version"] == {"N": str(IDEMPOTENCY.version)}
    assert store.deliver(published).failed == []  # found again: a duplicate
    assert store.app.worker.counts["duplicate"] == 1


def test_an_idempotency_record_of_a_newer_version_is_refused_not_taken_for_a_duplicate(
    run_consumer: Callable[[str], DeployedConsumer],
) -> None:
    store = run_consumer("store")
    published = telegram_envelope(telegram_update("private_start"))
    assert store.deliver(published).failed == []
    [record] = journal_records("store")
    newer = IDEMPOTENCY.version + 1
    aws.client("dynamodb").put_item(
        TableName=JOURNAL_TABLE, Item={**record, "schema_version": {"N": str(newer)}}
    )
    store.app.worker.counts.clear()

    delivery = store.deliver(published)

    assert delivery.failed == delivery.message_ids  # retried: kept for the release that reads it
    assert store.app.worker.counts == {"retry": 1}
    outcome = store.app.worker.last_outcome
    assert outcome is not None and f"idempotency_record has schema_version {newer}" in str(outcome.reason)
    assert conversation_count() == 1  # the first delivery's item, nothing written again


def test_an_envelope_of_a_newer_version_is_dead_lettered_with_its_reason(
    run_consumer: Callable[[str], DeployedConsumer],
) -> None:
    store = run_consumer("store")
    published = telegram_envelope(telegram_update("private_start"))
    newer = ENVELOPE.version + 1
    body = json.dumps({**json.loads(published.body), "schema_version": newer})
    store.queues.send(body, published.attributes)
    event = store.queues.receive_event()
    response = store.app.lambda_handler(event, store.context)
    store.queues.acknowledge(event, response)

    [letter] = store.queues.dead_letters()
    assert letter["body"] == body  # kept as it was, to redrive once the newer release is back
    assert f"envelope has schema_version {newer}" in letter["attributes"]["dead_letter_reason"]
    assert conversation_count() == 0


def test_an_envelope_the_previous_release_published_is_read_as_version_0(
    run_consumer: Callable[[str], DeployedConsumer],
) -> None:
    store = run_consumer("store")
    published = telegram_envelope(telegram_update("private_start"))
    body = {key: value for key, value in json.loads(published.body).items() if key != "schema_version"}
    store.queues.send(json.dumps(body), published.attributes)
    event = store.queues.receive_event()
    response = store.app.lambda_handler(event, store.context)
    assert response["batchItemFailures"] == []
    assert conversation_count() == 1
