"""A CRM stand-in, the catch-up sweep and the CRM's consumer on one simulated clock, in moto.

What `bench/crm_sweep.py` replays outages with and the sweep's tests drive: the stand-in
(`local.fakes`) dates its history by the clock and enforces the vendor's documented rate limit
by it (`enforce_rate_limit`); the sweep (`pipeline.crm.sweep.sweep`, as its handler calls it)
paces its requests by sleeping on it and gets the function's timeout as its remaining time; the
consumer's sync (`pipeline.crm.sync.sync_order` with the CRM's real adapter) reads every look
the sweep published, through the same HTTP API, retried after a short sleep when the CRM refuses
it for the rate (the consumer's retry). Nothing waits: a week is simulated in seconds.

Use inside moto (`mock_aws`) with the journal table created: the stand makes the events topic
and hears what is published to it.
"""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from local.fakes.amocrm import AmoCrmFake
from local.fakes.bitrix24 import Bitrix24PortalFake
from local.overlay import LOCAL_AMOCRM_PIPELINE, LOCAL_AMOCRM_STATUSES, LOCAL_BITRIX24_STAGES
from pipeline import aws
from pipeline.crm.sources import metrics as sources_metrics
from pipeline.crm.sweep import (
    OVERLAP_ENV,
    PERIOD_ENV,
    SweepCursor,
    SweepFailed,
    Swept,
    sweep,
)
from pipeline.crm.sweep import metrics as sweep_metrics
from pipeline.crm.sync import HistoryMarks, sync_order
from pipeline.envelope import Envelope
from pipeline.errors import TransientError
from pipeline.sms.rules import MAX_AGE_ENV

PHONE = "+375291234567"
AMO_TOKEN = "amoSweepStandToken0123456789abcdef"
# The amoCRM demo pipeline's statuses (local.overlay): created in the first, then moved along.
AMO_NEW, AMO_MOVES = 70011, (70012, 70013, 70014)
BITRIX_MOVES = ("PREPARATION", "PREPAYMENT_INVOICE", "EXECUTING")
METRICS = (sources_metrics, sweep_metrics)
RETRY_SECONDS = 5.0  # the consumer retries a refused read this much later (its base delay)


class SimClock:
    """Simulated unix seconds: `sleep` advances it, nothing waits."""

    def __init__(self, start: float) -> None:
        self.now = float(start)

    def time(self) -> float:
        return self.now

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += max(0.0, seconds)

    def at(self, when: float) -> None:
        """Move to `when` (never back)."""
        self.now = max(self.now, float(when))

    def datetime(self) -> datetime:
        return datetime.fromtimestamp(self.now, UTC)


@dataclass
class Run:
    """One sweep run: when it started, its outcome, and where the cursor stood after it."""

    started: float
    swept: Swept
    failed: bool
    looks: int
    position: dict[str, Any] | None
    read_to: datetime | None


@dataclass
class Stand:
    """One CRM (`bitrix24` or `amocrm`) with its sweep and consumer; see the module docstring."""

    crm: str
    clock: SimClock
    timeout_seconds: float
    fake: Any = None
    table: str = "journal"
    runs: list[Run] = field(default_factory=list)
    looks: dict[str, dict[str, Any]] = field(default_factory=dict)  # distinct look ids -> envelope
    look_copies: Counter[str] = field(default_factory=Counter)
    order_events: dict[str, str] = field(default_factory=dict)  # event id -> transition id
    too_old: int = 0
    consumer_calls_refused: int = 0
    moves: dict[str, float] = field(default_factory=dict)  # history ref -> when it was written
    order_of: dict[str, int] = field(default_factory=dict)  # history ref -> its order
    _published: list[dict[str, Any]] = field(default_factory=list)
    _known: int = 0

    def start(self, *, max_age_seconds: int, overlap_seconds: int = 60, period_seconds: int = 300) -> Stand:
        os.environ[MAX_AGE_ENV] = str(max_age_seconds)
        os.environ[OVERLAP_ENV] = str(overlap_seconds)
        os.environ[PERIOD_ENV] = str(period_seconds)
        os.environ["JOURNAL_TABLE"] = self.table
        os.environ["PHONE_DEFAULT_REGION"] = ""
        os.environ["BITRIX24_STAGES"] = json.dumps(LOCAL_BITRIX24_STAGES)
        os.environ["AMOCRM_STATUSES"] = json.dumps(LOCAL_AMOCRM_STATUSES)
        if self.crm == "bitrix24":
            self.fake = Bitrix24PortalFake(clock=self.clock.time, handler_url="http://127.0.0.1:9/")
        else:
            self.fake = AmoCrmFake(token=AMO_TOKEN, clock=self.clock.time, handler_url="http://127.0.0.1:9/")
        self.fake.webhook_faults.add({"lose_next_webhooks": 10**9})  # the outage: no webhook arrives
        self.fake.start()
        self.fake.enforce_rate_limit(self.clock.time)
        self._topic()
        for metrics in METRICS:
            metrics.namespace = metrics.namespace or "CrmSweepStand"
        return self

    def stop(self) -> None:
        if self.fake is not None:
            self.fake.stop()

    def _topic(self) -> None:
        """The events topic, and what is published to it heard as it leaves (a botocore hook on
        the shared SNS client: moto's queues would cost far more than the code measured)."""
        sns = aws.client("sns")
        arn = sns.create_topic(
            Name=f"events-{uuid.uuid4().hex[:8]}.fifo",
            Attributes={"FifoTopic": "true", "ContentBasedDeduplication": "false"},
        )["TopicArn"]
        os.environ["EVENTS_TOPIC_ARN"] = arn
        sns.meta.events.register("provide-client-params.sns.Publish", self._heard)

    def _heard(self, params: dict[str, Any], **_: Any) -> None:
        self._published.append(json.loads(params["Message"]))

    # -- the CRM's side --------------------------------------------------------------------------------
    def new_order(self) -> int:
        """A new deal or lead (its contact has a phone), written at the clock's time."""
        if self.crm == "bitrix24":
            contact = self.fake.create_contact("Ann", PHONE)
            deal_id = int(self.fake.create_deal("Order", contact_id=contact, emit=False).deal_id)
            self._written(deal_id)
            return deal_id
        contact = self.fake.create_contact("Ann Smith", PHONE)
        return int(self.fake.create_lead("Order", LOCAL_AMOCRM_PIPELINE, AMO_NEW, contact))

    def move(self, order_id: int, step: int = 0) -> None:
        """The order's `step`-th move along the pipeline (no webhook arrives: the outage)."""
        if self.crm == "bitrix24":
            self.fake.move_deal(order_id, BITRIX_MOVES[step % len(BITRIX_MOVES)])
        else:
            self.fake.change_statuses([(order_id, AMO_MOVES[step % len(AMO_MOVES)])])
        self._written(order_id)

    def history(self) -> Any:
        """The stand-in's history object (`LateRows`: hide_new, reveal, delete, after_query)."""
        return self.fake.stage_history if self.crm == "bitrix24" else self.fake.events

    def _written(self, order_id: int) -> None:
        """Remember the order's history rows (transitions) written since last time, and when."""
        prefix = "bitrix24:stagehistory:" if self.crm == "bitrix24" else "amocrm:event:"
        written = self.history().written
        for row in written[self._known :]:
            self.moves[f"{prefix}{row}"] = self.clock.time()
            self.order_of[f"{prefix}{row}"] = order_id
        self._known = len(written)

    def forget(self, ref: str) -> None:
        """A move deleted from the history: nobody need text it."""
        self.moves.pop(ref, None)

    # -- the pipeline's side ---------------------------------------------------------------------------
    def source(self) -> Any:
        if self.crm == "bitrix24":
            from bitrix24.logic import Bitrix24Source

            from pipeline.crm.bitrix24 import Bitrix24Rest

            return Bitrix24Source(Bitrix24Rest(self.fake.rest_url()))
        from amocrm.logic import AmoCrmSource

        from pipeline.crm.amocrm import AmoCrmApi

        return AmoCrmSource(AmoCrmApi(self.fake.base_url, AMO_TOKEN))

    def run_sweep(self, timeout_seconds: float | None = None) -> Run:
        """One scheduled run, given the function's timeout as its remaining time; then the
        consumer reads every look it published."""
        started = self.clock.monotonic()
        timeout = timeout_seconds if timeout_seconds is not None else self.timeout_seconds
        swept = Swept()
        failed = False
        try:
            results = sweep(
                {self.crm: self.source},
                SweepCursor(self.table),
                self.clock.datetime(),
                lambda: timeout - (self.clock.monotonic() - started),
                self.clock,
            )
            swept = results[self.crm]
        except SweepFailed:
            failed = True
        for metrics in METRICS:
            metrics.clear_metrics()
        cursor = SweepCursor(self.table).read(self.crm)
        looks = self.consume()
        run = Run(
            started,
            swept,
            failed,
            looks,
            cursor.position if cursor else None,
            cursor.read_to if cursor else None,
        )
        self.runs.append(run)
        return run

    def consume(self) -> int:
        """The consumer's part: sync the order of every new look (a repeated event id is dropped,
        as SNS and the consumer's idempotency drop it); the number of new looks."""
        fresh: list[dict[str, Any]] = []
        while self._published:
            envelope = self._published.pop(0)
            if envelope["type"] != "history.sweep":
                self.order_events[envelope["event_id"]] = envelope["payload"]["order"]["transition_id"]
                continue
            self.look_copies[envelope["event_id"]] += 1
            if envelope["event_id"] not in self.looks:
                self.looks[envelope["event_id"]] = envelope
                fresh.append(envelope)
        for envelope in fresh:
            self._sync(Envelope.parse(envelope))
        self.consume_order_events()
        return len(fresh)

    def consume_order_events(self) -> None:
        for envelope in self._published:
            self.order_events[envelope["event_id"]] = envelope["payload"]["order"]["transition_id"]
        self._published.clear()

    def _sync(self, envelope: Envelope) -> None:
        payload = envelope.payload
        order_id = (
            int(payload["data"]["FIELDS"]["ID"]) if self.crm == "bitrix24" else int(payload["lead"]["id"])
        )
        while True:
            try:
                outcome = sync_order(self.source(), order_id, envelope)
            except TransientError as error:
                if os.environ.get("SWEEP_STAND_DEBUG"):
                    print("retry", error)
                self.consumer_calls_refused += 1
                self.clock.sleep(RETRY_SECONDS)
                continue
            self.too_old += int(outcome.get("too_old", 0))
            for metrics in METRICS:  # what the functions would print at the end of an invocation
                metrics.clear_metrics()
            return

    def catch_up(
        self, period_seconds: float, max_runs: int, until: Callable[[Stand], bool] | None = None
    ) -> float:
        """Scheduled runs every `period_seconds` (or as soon as the last one's looks are read)
        until a run catches up with nothing new (or `until`); the simulated seconds it took."""
        began = self.clock.time()
        for _ in range(max_runs):
            scheduled = self.clock.time() + period_seconds
            run = self.run_sweep()
            if run.swept.caught_up and run.looks == 0 and (until is None or until(self)):
                return self.clock.time() - began
            self.clock.at(scheduled)
        raise RuntimeError(f"the {self.crm} sweep did not catch up within {max_runs} runs")

    # -- what the checks read --------------------------------------------------------------------------
    def looked_refs(self) -> set[str]:
        return {envelope["payload"]["sweep"]["newest_record"] for envelope in self.looks.values()}

    def unhandled(self) -> list[str]:
        """The moves (not deleted) the consumer has not handled: not in their order's marks."""
        marks = HistoryMarks(self.table)
        handled: dict[int, frozenset[str]] = {}
        for ref in self.moves:
            order = self.order_of[ref]
            if order not in handled:
                handled[order] = marks.handled(f"{self.crm}:{order}")
        return [ref for ref in self.moves if ref not in handled[self.order_of[ref]]]

    def texted(self) -> Counter[str]:
        """Order events published per transition (history record)."""
        return Counter(self.order_events.values())
