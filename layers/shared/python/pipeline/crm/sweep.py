"""The catch-up sweep: a CRM transition whose webhook never came still gets its SMS.

A portal outage, our 5xx past the CRM's retries, a webhook misconfigured or switched off: the
move is in the CRM's history all the same. On a schedule (`crm_sweep_minutes`, EventBridge), for
each connected CRM, the sweep reads the history written since its cursor (one journal item per
CRM) and, for every order with new records, publishes the same "look at order N" event a webhook
would (source `bitrix24`/`amocrm`, type `history.sweep`) to the events topic. The CRM's consumer
then does what it does for a webhook (`pipeline.crm.sync`): a move the webhook already brought is
handled, so webhook plus sweep is one SMS.

The event id names the order and its newest record seen (`bitrix24:sweep:deal:42:<ref>`): a
sweep run repeated after a crash publishes the same ids, which SNS and the consumer drop. The
cursor moves only after every event of the run is published. On a CRM's first run the sweep
starts `SMS_MAX_AGE_SECONDS` back: anything older could not be texted anyway.

One CRM failing (its API down, its secret wrong) is logged and counted (`CrmSweepFailures`) and
fails the run once the other CRMs are swept (the function's Errors alarm); the next run retries
from the same cursor.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import BotoCoreError, ClientError

from pipeline import aws
from pipeline.crm.look import LOOK_EVENT_TYPE
from pipeline.crm.order_events import TOPIC_ENV
from pipeline.crm.sync import max_age
from pipeline.envelope import Envelope, publish_request, sns_attributes
from pipeline.errors import TransientError

logger = Logger(child=True)
metrics = Metrics()

SWEEP_EVENT_TYPE = LOOK_EVENT_TYPE
CURSOR_PREFIX = "crm-sweep-cursor#"
SOURCES_ENV = "CRM_SWEEP_SOURCES"
ORDERS_METRIC = "CrmSweepOrders"
FAILURES_METRIC = "CrmSweepFailures"


@dataclass(frozen=True)
class Changed:
    """One order with history records after the cursor: its id and its newest record's ref."""

    order_id: int
    newest_ref: str


def latest_changes(records: Iterable[tuple[int, str]]) -> list[Changed]:
    """Each order of `(order id, record ref)` pairs, oldest first, with its newest record, the
    orders in the order of their last change."""
    newest: dict[int, str] = {}
    for order_id, ref in records:
        newest.pop(order_id, None)
        newest[order_id] = ref
    return [Changed(order_id, ref) for order_id, ref in newest.items()]


class SweepSource(Protocol):
    name: str  # "bitrix24"
    noun: str  # "deal"

    def changed_since(
        self, cursor: str | None, since: datetime, now: datetime
    ) -> tuple[list[Changed], str | None]:
        """Orders whose history grew after `cursor` (or, with none, since `since`), oldest change
        first, and the cursor after them (None: leave it)."""
        ...

    def look_payload(self, order_id: int) -> dict[str, Any]:
        """The payload a webhook of this CRM publishes for the order (what its consumer reads)."""
        ...


class SweepCursor:
    """Where each CRM's sweep has read its history to, one journal item per CRM."""

    def __init__(self, table: str) -> None:
        self.table = table

    def read(self, source: str) -> str | None:
        try:
            answer = aws.client("dynamodb").get_item(
                TableName=self.table, Key={"id": {"S": CURSOR_PREFIX + source}}, ConsistentRead=True
            )
        except (ClientError, BotoCoreError) as error:
            raise TransientError(
                f"reading the {source} sweep cursor failed ({type(error).__name__})"
            ) from None
        value = answer.get("Item", {}).get("cursor", {}).get("S")
        return str(value) if value else None

    def save(self, source: str, cursor: str, now: datetime) -> None:
        try:
            aws.client("dynamodb").put_item(
                TableName=self.table,
                Item={
                    "id": {"S": CURSOR_PREFIX + source},
                    "cursor": {"S": cursor},
                    "swept_at": {"S": now.isoformat()},
                },
            )
        except (ClientError, BotoCoreError) as error:
            raise TransientError(
                f"saving the {source} sweep cursor failed ({type(error).__name__})"
            ) from None


def look_envelope(
    source: SweepSource, changed: Changed, received_at: datetime, correlation_id: str
) -> Envelope:
    return Envelope(
        event_id=f"{source.name}:sweep:{source.noun}:{changed.order_id}:{changed.newest_ref}"[:256],
        source=source.name,  # type: ignore[arg-type]
        type=SWEEP_EVENT_TYPE,
        correlation_id=correlation_id,
        received_at=received_at,
        payload={**source.look_payload(changed.order_id), "sweep": {"newest_record": changed.newest_ref}},
    )


def sweep_source(source: SweepSource, cursor_store: SweepCursor, now: datetime, correlation_id: str) -> int:
    """One CRM's sweep: the number of orders it asked the consumer to look at."""
    cursor = cursor_store.read(source.name)
    changed, following = source.changed_since(cursor, now - max_age(), now)
    topic = os.environ[TOPIC_ENV]
    sns = aws.client("sns")
    for one in changed:
        envelope = look_envelope(source, one, now, correlation_id)
        try:
            sns.publish(
                **publish_request(
                    topic, envelope, sns_attributes({"source": source.name, "type": SWEEP_EVENT_TYPE})
                )
            )
        except (ClientError, BotoCoreError) as error:
            raise TransientError(f"publishing a sweep event failed ({type(error).__name__})") from None
    if following is not None and following != cursor:
        cursor_store.save(source.name, following, now)
    metrics.add_metric(name=ORDERS_METRIC, unit=MetricUnit.Count, value=len(changed))
    logger.info(
        "CRM history swept",
        extra={"crm": source.name, "orders": len(changed), "cursor": following or cursor},
    )
    return len(changed)


class SweepFailed(RuntimeError):
    """At least one CRM could not be swept (each is logged with its reason)."""


def sweep(
    sources: Mapping[str, Callable[[], SweepSource]], cursor_store: SweepCursor, now: datetime
) -> dict[str, int]:
    """Sweep every connected CRM (each adapter built inside its own try: a wrong secret of one
    stops only that one); SweepFailed after all were tried if one failed."""
    correlation_id = f"sweep-{uuid.uuid4().hex}"
    looked: dict[str, int] = {}
    failed: list[str] = []
    for name, build in sources.items():
        try:
            looked[name] = sweep_source(build(), cursor_store, now, correlation_id)
        except Exception as error:  # one CRM down must not stop the others: counted, logged, raised below
            failed.append(name)
            metrics.add_metric(name=FAILURES_METRIC, unit=MetricUnit.Count, value=1)
            logger.error(
                "CRM history sweep failed",
                extra={"crm": name, "error": type(error).__name__, "reason": str(error)[:300]},
            )
    if failed:
        raise SweepFailed(
            f"the sweep of {', '.join(failed)} failed; the next run retries from the same cursor"
        )
    return looked
