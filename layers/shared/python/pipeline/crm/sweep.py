"""The catch-up sweep: a CRM transition whose webhook never came still gets its SMS.

A portal outage, our 5xx past the CRM's retries, a webhook misconfigured or switched off: the
move is in the CRM's history all the same. On a schedule (`crm_sweep_minutes`, EventBridge), for
each connected CRM, the sweep reads the history written since its cursor (one journal item per
CRM) and, for every order with new records, publishes the same "look at order N" event a webhook
would (source `bitrix24`/`amocrm`, type `history.sweep`) to the events topic. The CRM's consumer
then does what it does for a webhook (`pipeline.crm.sync`): a move the webhook already brought is
handled, and one older than `SMS_MAX_AGE_SECONDS` when the look is published is counted
(`CrmTransitionsTooOld`) and never texted: one age rule, the consumer's.

Catch-up always converges. The history is read one page (one API request) at a time, in a keyset
order the adapter owns (`SweepSource.sweep_page`; never an offset, so a record deleted or
written while the sweep pages shifts nothing). After each page its looks are published, then the
cursor saved: a run cut short by its time (the Lambda's remaining time less SAFETY_MARGIN_SECONDS,
shared fairly between the CRMs left) or by an API failure loses nothing, and the next run goes on
from that page. Requests are paced at the CRM's documented rate (`pipeline.crm.limits`), and a
run publishes no more looks than the consumer can read before the next run (`looks_per_run`). So every
run moves the cursor forward however long the outage was; `CrmSweepLagSeconds` (the oldest
history not yet known read, in seconds) shows how far behind it is, and an alarm fires when it
stays above the SMS age limit.

Each CRM re-reads the last `CRM_SWEEP_OVERLAP_SECONDS` (the `crm_sweep_overlap_seconds` setting)
of what it had read, for records that became visible late (committed after a later read); a
repeat look publishes the same event id (order and its newest record seen), which SNS and the
consumer drop, and the consumer's marks make any other repeat a no-op.

The cursor item carries `schema_version` (1: `position`, the adapter's JSON, and `read_to`); an
item without one is version 0, the old plain `cursor` string, which the adapter resumes from.
On a CRM's first run the sweep starts `SMS_MAX_AGE_SECONDS` back: anything older could not be
texted anyway.

A CRM refusing the sweep's credential (401) makes it re-read that CRM's secret once past the
cache and sweep again if it changed (`pipeline.secrets.with_refreshed_secret`, the consumers'
rule), so a rotated token is used by the next run, not after the cache expires.

One CRM failing (its API down, its secret wrong) is logged and counted (`CrmSweepFailures`) and
fails the run once the other CRMs are swept (the function's Errors alarm); the next run goes on
from the last page saved.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import BotoCoreError, ClientError

from pipeline import aws
from pipeline.crm.look import LOOK_EVENT_TYPE
from pipeline.crm.order_events import TOPIC_ENV
from pipeline.envelope import Envelope, publish_request, sns_attributes
from pipeline.errors import TransientError
from pipeline.formats import by_name as by_format
from pipeline.http import DEFAULT_TIMEOUT_SECONDS
from pipeline.secrets import with_refreshed_secret
from pipeline.sms.rules import max_age

logger = Logger(child=True)
metrics = Metrics()

SWEEP_EVENT_TYPE = LOOK_EVENT_TYPE
CURSOR_PREFIX = "crm-sweep-cursor#"
# The cursor item's format (`pipeline.formats`, the one source of its version).
CURSOR_FORMAT = by_format("crm_sweep_cursor")
SOURCES_ENV = "CRM_SWEEP_SOURCES"
OVERLAP_ENV = "CRM_SWEEP_OVERLAP_SECONDS"
DEFAULT_OVERLAP = timedelta(seconds=60)
PERIOD_ENV = "CRM_SWEEP_PERIOD_SECONDS"
DEFAULT_PERIOD_SECONDS = 300
# The share of a CRM's rate limit the looks of one run may cost its consumer until the next run
# (the rest: live webhooks, the sweep's own reads). A look costs the consumer CALLS_PER_LOOK
# requests (the order's history, the order, its contact).
CONSUMER_SHARE = 0.5
CALLS_PER_LOOK = 3
ORDERS_METRIC = "CrmSweepOrders"
FAILURES_METRIC = "CrmSweepFailures"
LAG_METRIC = "CrmSweepLagSeconds"
# What a run keeps of its time: one request that takes its whole timeout, then publishing the
# page's looks and saving the cursor.
SAFETY_MARGIN_SECONDS = DEFAULT_TIMEOUT_SECONDS + 5.0
# A page the CRM refuses for its rate (or a 5xx) is asked again this much later, this many times.
REFUSAL_WAIT_SECONDS = 2.0
MAX_REFUSALS = 5


@dataclass(frozen=True)
class Changed:
    """One order with history records on a page: its id, its newest record's ref, and (several
    records) a digest of them all: a record that became visible late, older than the newest,
    makes a look with another id, not a repeat the consumer would drop."""

    order_id: int
    newest_ref: str
    digest: str = ""


def latest_changes(records: Iterable[tuple[int, str]]) -> list[Changed]:
    """Each order of `(order id, record ref)` pairs, oldest first, with its newest record, the
    orders in the order of their last change."""
    refs: dict[int, list[str]] = {}
    for order_id, ref in records:
        refs[order_id] = [*refs.pop(order_id, []), ref]
    return [
        Changed(order_id, seen[-1], hashlib.sha256("\n".join(sorted(seen)).encode()).hexdigest()[:12])
        if len(seen) > 1
        else Changed(order_id, seen[-1])
        for order_id, seen in refs.items()
    ]


@dataclass(frozen=True)
class Page:
    """One page of a CRM's history: its orders, where the next page starts, and up to when the
    history is now known read (`read_to`, None: no further than before). `caught_up`: the
    history is read up to this run's start; the run leaves this CRM."""

    changes: list[Changed]
    position: dict[str, Any]
    read_to: datetime | None
    caught_up: bool


class SweepSource(Protocol):
    name: str  # "bitrix24"
    noun: str  # "deal"
    requests_per_second: float  # the CRM's documented limit (pipeline.crm.limits)

    def sweep_start(self, since: datetime) -> dict[str, Any]:
        """The position of a first sweep, reading history created from `since`."""
        ...

    def sweep_resume(self, cursor: str) -> dict[str, Any]:
        """The position a version 0 cursor (a plain string) stood for."""
        ...

    def sweep_page(self, position: Mapping[str, Any], now: datetime, overlap: timedelta) -> Page:
        """One page from `position` (one API request): see the adapter's docstring for its order."""
        ...

    def look_payload(self, order_id: int) -> dict[str, Any]:
        """The payload a webhook of this CRM publishes for the order (what its consumer reads)."""
        ...


def overlap() -> timedelta:
    value = os.environ.get(OVERLAP_ENV, "").strip()
    return timedelta(seconds=int(value)) if value else DEFAULT_OVERLAP


def looks_per_run(requests_per_second: float) -> int:
    """How many looks one run may publish for a CRM: what its consumer can read at
    CONSUMER_SHARE of the CRM's rate limit until the next run (`CRM_SWEEP_PERIOD_SECONDS`), so
    a long catch-up never floods the consumer into QUERY_LIMIT_EXCEEDED/429 and its DLQ. At
    least one page's worth is always read."""
    value = os.environ.get(PERIOD_ENV, "").strip()
    period = int(value) if value else DEFAULT_PERIOD_SECONDS
    return max(1, int(requests_per_second * CONSUMER_SHARE * period / CALLS_PER_LOOK))


@dataclass(frozen=True)
class Cursor:
    """Where a CRM's sweep stands: the adapter's position, and up to when its history is read."""

    position: dict[str, Any] | None
    read_to: datetime | None
    legacy: str | None = None  # a version 0 item's plain cursor


def cursor_of(item: Mapping[str, Any]) -> Cursor | None:
    """A stored sweep cursor (None: none yet). Version 0 is `{"cursor": "<the adapter's string>"}`;
    1 holds `position` (the adapter's JSON) and `read_to`; a newer one is refused (FormatTooNew)."""
    if not item:
        return None
    if CURSOR_FORMAT.version_of(item) == 0:
        legacy = item.get("cursor", {}).get("S")
        return Cursor(None, None, str(legacy)) if legacy else None
    read_to = item.get("read_to", {}).get("S")
    return Cursor(json.loads(item["position"]["S"]), datetime.fromisoformat(read_to) if read_to else None)


class SweepCursor:
    """Where each CRM's sweep has read its history to, one journal item per CRM."""

    def __init__(self, table: str) -> None:
        self.table = table

    def read(self, source: str) -> Cursor | None:
        try:
            answer = aws.client("dynamodb").get_item(
                TableName=self.table, Key={"id": {"S": CURSOR_PREFIX + source}}, ConsistentRead=True
            )
        except (ClientError, BotoCoreError) as error:
            raise TransientError(
                f"reading the {source} sweep cursor failed ({type(error).__name__})"
            ) from None
        return cursor_of(answer.get("Item") or {})

    def save(self, source: str, cursor: Cursor, now: datetime) -> None:
        item = {
            "id": {"S": CURSOR_PREFIX + source},
            **CURSOR_FORMAT.written(),
            "position": {"S": json.dumps(cursor.position, sort_keys=True)},
            "swept_at": {"S": now.isoformat()},
        }
        if cursor.read_to is not None:
            item["read_to"] = {"S": cursor.read_to.isoformat()}
        try:
            aws.client("dynamodb").put_item(TableName=self.table, Item=item)
        except (ClientError, BotoCoreError) as error:
            raise TransientError(
                f"saving the {source} sweep cursor failed ({type(error).__name__})"
            ) from None


class Clock(Protocol):
    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class SystemClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


@dataclass
class Budget:
    """What one CRM's sweep may still spend: time until `deadline` (the clock's monotonic
    seconds) and requests no closer than `interval` seconds apart."""

    clock: Clock
    deadline: float
    interval: float
    last_request: float | None = field(default=None)

    def take_request(self) -> bool:
        """Wait for the next request's turn; False (no wait) when the time is used up."""
        now = self.clock.monotonic()
        turn = now if self.last_request is None else max(now, self.last_request + self.interval)
        if turn >= self.deadline:
            return False
        if turn > now:
            self.clock.sleep(turn - now)
        self.last_request = self.clock.monotonic()
        return True

    def hold(self, seconds: float) -> None:
        """No request for `seconds` (the CRM asked us to wait)."""
        self.last_request = self.clock.monotonic() + seconds - self.interval


def look_envelope(
    source: SweepSource, changed: Changed, received_at: datetime, correlation_id: str
) -> Envelope:
    return Envelope(
        event_id=f"{source.name}:sweep:{source.noun}:{changed.order_id}:{changed.newest_ref}"
        + (f":{changed.digest}" if changed.digest else ""),
        source=source.name,  # type: ignore[arg-type]
        type=SWEEP_EVENT_TYPE,
        correlation_id=correlation_id,
        received_at=received_at,
        payload={**source.look_payload(changed.order_id), "sweep": {"newest_record": changed.newest_ref}},
    )


def publish_looks(
    source: SweepSource, changes: Iterable[Changed], received_at: datetime, correlation_id: str
) -> None:
    topic = os.environ[TOPIC_ENV]
    sns = aws.client("sns")
    for one in changes:
        envelope = look_envelope(source, one, received_at, correlation_id)
        try:
            sns.publish(
                **publish_request(
                    topic, envelope, sns_attributes({"source": source.name, "type": SWEEP_EVENT_TYPE})
                )
            )
        except (ClientError, BotoCoreError) as error:
            raise TransientError(f"publishing a sweep event failed ({type(error).__name__})") from None


def starting_cursor(source: SweepSource, stored: Cursor | None, now: datetime) -> Cursor:
    if stored is None:
        since = now - max_age()
        return Cursor(source.sweep_start(since), since)
    if stored.position is None:  # version 0
        return Cursor(source.sweep_resume(stored.legacy or ""), now - max_age())
    return stored


@dataclass
class Swept:
    """One CRM's run: orders looked at, pages read, whether it caught up, where it stands."""

    looked: int = 0
    pages: int = 0
    caught_up: bool = False
    read_to: datetime | None = None


def sweep_source(
    source: SweepSource,
    cursor_store: SweepCursor,
    now: datetime,
    correlation_id: str,
    budget: Budget,
    swept: Swept | None = None,
) -> Swept:
    """One CRM's sweep, page by page until it has caught up or its budget is spent (see the
    module docstring); `swept` (given) is kept up to date page by page."""
    swept = swept if swept is not None else Swept()
    cursor = starting_cursor(source, cursor_store.read(source.name), now)
    swept.read_to = cursor.read_to
    reach = overlap()
    allowed = looks_per_run(source.requests_per_second)
    refusals = 0
    while swept.looked < allowed and budget.take_request():
        try:
            page = source.sweep_page(cursor.position or {}, now, reach)
        except TransientError as error:
            # The CRM's limit is shared with its consumer: a refusal waits its turn (a few
            # times, within the budget), then fails the run for the next to go on.
            refusals += 1
            if refusals > MAX_REFUSALS:
                raise
            budget.hold(error.retry_after or REFUSAL_WAIT_SECONDS)
            continue
        swept.pages += 1
        publish_looks(source, page.changes, now, correlation_id)
        read_to = cursor.read_to
        if page.read_to is not None and (read_to is None or page.read_to > read_to):
            read_to = page.read_to
        following = Cursor(page.position, read_to)
        if following != cursor:
            cursor_store.save(source.name, following, now)
        cursor = following
        swept.looked += len(page.changes)
        swept.read_to = read_to
        if page.caught_up:
            swept.caught_up = True
            break
    metrics.add_metric(name=ORDERS_METRIC, unit=MetricUnit.Count, value=swept.looked)
    logger.info(
        "CRM history swept" if swept.caught_up else "CRM history sweep continues next run",
        extra={
            "crm": source.name,
            "orders": swept.looked,
            "pages": swept.pages,
            "caught_up": swept.caught_up,
            "read_to": read_to_text(swept.read_to),
        },
    )
    return swept


def read_to_text(read_to: datetime | None) -> str | None:
    return read_to.isoformat() if read_to else None


class SweepFailed(RuntimeError):
    """At least one CRM could not be swept (each is logged with its reason)."""


def sweep(
    sources: Mapping[str, Callable[[], SweepSource]],
    cursor_store: SweepCursor,
    now: datetime,
    remaining_seconds: Callable[[], float],
    clock: Clock | None = None,
    secrets: Mapping[str, str] | None = None,
) -> dict[str, Swept]:
    """Sweep every connected CRM within the run's time (`remaining_seconds`: the Lambda
    context's, less SAFETY_MARGIN_SECONDS; each CRM gets its share of what is left), each
    adapter built inside its own try: a wrong secret of one stops only that one; `secrets`: the
    secret each CRM's adapter reads its credential from, re-read once after a 401 (module
    docstring). Emits the lag; SweepFailed after all were tried if one failed."""

    clock = clock or SystemClock()
    started = clock.monotonic()
    end = started + remaining_seconds() - SAFETY_MARGIN_SECONDS
    correlation_id = f"sweep-{uuid.uuid4().hex}"
    results: dict[str, Swept] = {}
    failed: list[str] = []
    names = list(sources)
    for index, name in enumerate(names):
        swept = results.setdefault(name, Swept())
        left = len(names) - index

        def one(name: str = name, swept: Swept = swept, left: int = left) -> Swept:
            source = sources[name]()
            share = (end - clock.monotonic()) / left
            budget = Budget(clock, clock.monotonic() + share, 1.0 / source.requests_per_second)
            return sweep_source(source, cursor_store, now, correlation_id, budget, swept)

        try:
            secret = (secrets or {}).get(name)
            with_refreshed_secret(secret, one) if secret else one()
        except Exception as error:  # one CRM down must not stop the others: counted, logged, raised below
            failed.append(name)
            metrics.add_metric(name=FAILURES_METRIC, unit=MetricUnit.Count, value=1)
            logger.error(
                "CRM history sweep failed",
                extra={"crm": name, "error": type(error).__name__, "reason": str(error)[:300]},
            )
    finished = now + timedelta(seconds=clock.monotonic() - started)
    lags = [lag_seconds(swept.read_to, finished) for swept in results.values() if swept.read_to]
    if lags:
        metrics.add_metric(name=LAG_METRIC, unit=MetricUnit.Seconds, value=max(lags))
    if failed:
        raise SweepFailed(f"the sweep of {', '.join(failed)} failed; the next run goes on from its last page")
    return results


def lag_seconds(read_to: datetime, at: datetime) -> float:
    """How far behind a CRM's sweep is: the history from `read_to` to `at` is not known read."""
    return max(0.0, (at - read_to.astimezone(UTC)).total_seconds())
