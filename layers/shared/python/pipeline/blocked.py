"""`blocked#<chat id>` in the journal table: a chat the bot can no longer write to.

Apart from `pipeline.bot_api` because its TTL comes from `pipeline.retention`, which imports the
registry, which imports `pipeline.bot_api`.
"""

from __future__ import annotations

import os
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit

from pipeline.bot_api_errors import ChatUnreachable
from pipeline.formats import SCHEMA_VERSION
from pipeline.formats import by_name as by_format
from pipeline.retention import REDELIVERY_BOUND

logger = Logger(child=True)
# The `blocked#<chat id>` item's format (`pipeline.formats`).
BLOCKED_FORMAT = by_format("chat_blocked")
metrics = Metrics()


def unreachable(error: ChatUnreachable, event_id: str, chat_id: int) -> dict[str, Any]:
    """Acknowledge an update whose own chat `chat_id` can no longer be written to (`Scope.CHAT`):
    noted in the journal table as `blocked#<chat id>`, counted (BotBlocked) and logged; never
    retried (retrying cannot help, and it is not a fault)."""
    from datetime import UTC, datetime

    from pipeline import aws

    aws.resource("dynamodb").Table(os.environ["JOURNAL_TABLE"]).put_item(
        Item={
            "id": f"blocked#{chat_id}",
            SCHEMA_VERSION: BLOCKED_FORMAT.version,
            "chat_id": chat_id,
            "description": error.description,
            "event_id": event_id,
            "blocked_at": datetime.now(UTC).isoformat(),
            # Personal data (the chat id): kept as long as the update could come back.
            "expiration": int(datetime.now(UTC).timestamp() + REDELIVERY_BOUND.total_seconds()),
        }
    )
    metrics.add_metric(name="BotBlocked", unit=MetricUnit.Count, value=1)
    logger.warning(
        "bot blocked in chat: recorded, not retried",
        extra={"chat_id": chat_id, "method": error.verdict.method, "description": error.description},
    )
    return {"chat_id": chat_id, "method": error.verdict.method}
