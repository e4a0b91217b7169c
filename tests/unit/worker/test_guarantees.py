"""Issue 3's cross-consumer guarantee: one business event, one side effect per consumer.

The same Telegram update reaches the `store` and `analytics` queues three times each (three
SQS message ids per queue, as SNS redeliveries or Telegram resends produce them), through the
real handlers. Each consumer's `process` runs once; the journal holds one record per consumer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from pipeline.envelope import Envelope
from tests.unit.consumer_support import (
    ConsumerQueues,
    Deploy,
    FakeLambdaContext,
    Output,
    conversation_items,
    journal_items,
    telegram_envelope,
    telegram_update,
)

CONSUMER_NAMES = ("store", "analytics")


@pytest.mark.usefixtures("moto_aws")
@pytest.mark.parametrize("batch_size", [1, 10], ids=["one-per-invocation", "all-in-one-batch"])
def test_the_same_update_three_times_through_two_consumers_has_each_side_effect_once(
    deploy: Deploy,
    import_app: Callable[[str], ModuleType],
    output: Callable[[Any], Output],
    lambda_context: FakeLambdaContext,
    monkeypatch: pytest.MonkeyPatch,
    batch_size: int,
) -> None:
    executions: Counter[str] = Counter()
    deployed: list[tuple[ModuleType, ConsumerQueues]] = []
    for name in CONSUMER_NAMES:
        app = import_app(name)
        deployed.append((app, deploy(app.worker, name)))

        def counted(envelope: Envelope, name: str = name, real: Any = app.worker.process) -> Any:
            executions[name] += 1
            return real(envelope)

        monkeypatch.setattr(app.worker, "process", counted)
    printed = output(deployed[1][0].worker)
    item = telegram_envelope(telegram_update("private_start"))

    for app, queues in deployed:
        message_ids = {queues.send(item) for _ in range(3)}
        assert len(message_ids) == 3
        while (event := queues.receive_event(max_messages=batch_size))["Records"]:
            response = app.lambda_handler(event, lambda_context)
            assert response == {"batchItemFailures": []}
            queues.acknowledge(event, response)
        assert queues.approximate_counts() == (0, 0)
        assert app.worker.counts == {"processed": 1, "duplicate": 2}

    assert executions == {"store": 1, "analytics": 1}
    assert [i["event_id"] for i in conversation_items()] == [item.envelope.event_id]
    assert len(printed.emf("TelegramUpdates")) == 1
    assert len(printed.logs("analytics")) == 1
    records = journal_items()
    assert sorted(r["id"]["S"].split("#")[0] for r in records) == sorted(CONSUMER_NAMES)
    assert {r["status"]["S"] for r in records} == {"COMPLETED"}
