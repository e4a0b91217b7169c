"""A simulated shop around the real SMS code on moto: the ground truth the SMS rules are checked against.

A CRM moves orders through statuses (sometimes twice in one second, sometimes from a node whose
clock runs an hour or decades fast), re-saves them, fixes a customer's phone; its webhooks reach
the `sms` worker late, twice, out of order, under new delivery ids; the worker dies between any
two of its AWS calls, DynamoDB throttles or loses an answer (botocore then sends the request
again), the gateway accepts, refuses, times out or takes the SMS and loses the answer; delivery
receipts arrive; the reconciler runs; an operator resolves what is left to a person (sometimes
wrongly, before a late receipt); DynamoDB's TTL deletes what has expired. Every step runs the
production code (`pipeline.sms.service.send_notification`, `pipeline.sms.reconcile.reconcile`,
`pipeline.sms.delivery.apply_delivery_event`, the journal's operator calls) on in-process moto.

The shop knows the truth: each *run* (a stretch of an order in one status, begun by a real move)
has a marker in the customer name, so every SMS names the run it is for. `violations()` checks:

- never two SMS for one run, never an SMS for a status without a rule (the rules hold that);
- a run that is *due* gets exactly one SMS or a record a person must decide on (unknown, failed,
  abandoned), or a record that ended it unsent (superseded by the order's next move, expired past
  its rule's maximum age: `pipeline.sms.endstates`); a run is due when a move of it was
  processed before the order's next move happened and after every earlier run was first
  processed (what any CRM without transition ids can promise: a run whose move arrives after
  the next one happened may be stale, and then nothing, or once, is right);
- once the faults stop and everything drains, no record is left `pending` or `sending`.

`tests/unit/sms/test_sms_model.py` drives it with Hypothesis's rule-based state machine;
`python -m bench sms-model` runs a long campaign of the same machine.
"""

from __future__ import annotations

import importlib
import math
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import botocore.client
from botocore.exceptions import ClientError
from moto import mock_aws

from pipeline import aws
from pipeline.crm.contract import ORDER_STATUS_CHANGED
from pipeline.envelope import Envelope, crm_event_id
from pipeline.errors import AccountRefused, PermanentError, TransientError
from pipeline.pause import PAUSE_SECONDS
from pipeline.sms import gateways
from pipeline.sms.clock import CLOCK, iso
from pipeline.sms.gateways import FakeBehaviour, SimulatedCrash
from pipeline.sms.journal import KEY_PREFIX, State, notification_key
from pipeline.sms.orders import CLOCK_SKEW_TOLERANCE

STATUSES = ("paid", "assembling", "ready_for_pickup", "shipped", "delivered")
RULED = frozenset({"ready_for_pickup", "shipped"})
# What a due run may end in without an SMS: a person's decision, or an end of its own (expired;
# superseded only when the order has a later run).
OUTCOME_STATES = frozenset({State.UNKNOWN.value, State.FAILED.value, State.EXPIRED.value})
PHONES = ("+375291234567", "+375297654321", "+375331112233")
AWS_FAULTS = ("crash_before", "crash_after", "lost_answer", "throttled")
GATEWAY_FAULTS = tuple(FakeBehaviour)
VISIBILITY_SECONDS = 60
START = datetime(2026, 12, 1, 9, 0, 0, 250_000, tzinfo=UTC)
ENVIRONMENT = {
    "AWS_DEFAULT_REGION": "eu-central-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "POWERTOOLS_TRACE_DISABLED": "1",
    "POWERTOOLS_METRICS_NAMESPACE": "TelegramCrmPipeline",
    "POWERTOOLS_SERVICE_NAME": "sms",
    "POWERTOOLS_LOG_LEVEL": "CRITICAL",
    "POWERTOOLS_METRICS_DISABLED": "true",
    "JOURNAL_TABLE": "journal",
    "SMS_GATEWAY": "fake",
    "SMS_MAX_ATTEMPTS": "3",
    "SMS_RETRY_BASE_SECONDS": "10",
    "SMS_RETRY_MAX_SECONDS": "60",
    "SMS_LEASE_SECONDS": "120",
    "SMS_LOOKUP_SETTLE_SECONDS": "120",
    "SMS_RECONCILE_BATCH_SIZE": "3",
}


# -- faults at the AWS SDK's edge -------------------------------------------------------------------
class _AwsFaults:
    """Faults on the Nth DynamoDB call of the current step, as the process would meet them."""

    def __init__(self) -> None:
        self.plan: dict[int, str] = {}
        self.calls = 0
        self.injected: Counter[str] = Counter()
        self.original = botocore.client.BaseClient._make_api_call

    def arm(self, at_call: int, kind: str) -> None:
        self.plan, self.calls = {at_call: kind}, 0

    def disarm(self) -> None:
        self.plan, self.calls = {}, 0

    def call(self, client: Any, operation: str, params: dict[str, Any]) -> Any:
        if client.meta.service_model.service_name != "dynamodb" or not self.plan:
            return self.original(client, operation, params)
        self.calls += 1
        kind = self.plan.pop(self.calls, None)
        if kind is None:
            return self.original(client, operation, params)
        self.injected[kind] += 1
        if kind == "crash_before":
            raise SimulatedCrash(f"worker died before {operation}")
        if kind == "throttled":
            error = {"Code": "ProvisionedThroughputExceededException", "Message": "throttled"}
            raise ClientError({"Error": error}, operation)
        result = self.original(client, operation, params)
        if kind == "crash_after":
            raise SimulatedCrash(f"worker died after {operation}")
        # lost_answer: applied, the answer lost; botocore sends the same request again.
        try:
            return self.original(client, operation, params)
        except ClientError:
            if operation in ("GetItem", "Query", "Scan"):
                return result
            raise


# -- the truth --------------------------------------------------------------------------------------
@dataclass
class Run:
    order: str
    index: int
    status: str
    entered_from: str
    created_step: int
    first_processed_step: int | None = None
    # A move of an earlier run was processed, before this run's first, with a stamp from a fast
    # clock that had already come when it arrived: no receiver can tell it from a true one.
    misled: bool = False
    ref: str | None = None  # the CRM's history record id of the move that began the run
    # What names each move of the run in the rules (`Move.identity`): a notification of the run's
    # entry is named after one of them, whichever copy the pipeline saw first.
    identities: set[str] = field(default_factory=set)
    # A CRM with a history: the run's record as first read (its stamp as sent, whether from a fast
    # clock, when it was written); re-reading it later reads the same record.
    record: tuple[datetime, bool, datetime] | None = None

    @property
    def marker(self) -> str:
        return f"{self.order}r{self.index}"


@dataclass
class Order:
    order_id: str
    source: str | None  # None: a templated sender; "bitrix24" / "amocrm": that CRM's consumer
    phone: str
    runs: list[Run] = field(default_factory=list)
    last_stamp: datetime | None = None
    misleading_stamps: bool = False  # an undetectably skewed move was processed
    # The second of the latest second press (a templated sender reports it with its origin).
    pressed_in: datetime | None = None
    identities: set[tuple[datetime, str, str]] = field(default_factory=set)

    @property
    def label(self) -> str:
        """Unique across CRMs (the same order number in two CRMs is two orders)."""
        return f"{self.source or 'crm'}-{self.order_id}"

    @property
    def key(self) -> str:
        """The order as the pipeline names it (`pipeline.envelope.crm_order_key`)."""
        return f"{self.source or 'crm'}:{self.order_id}"

    @property
    def status(self) -> str:
        return self.runs[-1].status if self.runs else "new"


@dataclass
class Copy:
    """One delivery of an event waiting for (or between) its worker invocations."""

    event: dict[str, Any]
    run: Run
    is_move: bool
    visible_at: datetime
    created_at: datetime
    skewed: bool = False  # stamped by a CRM node whose clock runs fast


class Shop:
    """The simulated shop; use inside `Shop.running()`."""

    def __init__(self) -> None:
        self.abandoned: set[str] = set()  # notification keys a person abandoned
        self.orders: list[Order] = []
        self.queue: list[Copy] = []
        self.dead_letters: list[tuple[Copy, str]] = []
        self.step = 0
        self.faults: Counter[str] = Counter()
        self.steps = 0
        self.mistaken_resends: set[str] = set()
        self.aws = _AwsFaults()
        self.gateway = gateways.fake_gateway()

    # -- lifecycle ---------------------------------------------------------------------------------
    @classmethod
    @contextmanager
    def running(cls) -> Iterator[Shop]:
        saved = {name: os.environ.get(name) for name in ENVIRONMENT}
        os.environ.update(ENVIRONMENT)
        os.environ.pop("AWS_ENDPOINT_URL", None)
        aws.reset_clients()
        gateways.reset_fake_gateway()
        # Stopped: the same sequence replays the same stamps, seconds and backoffs (Hypothesis
        # shrinks only what replays); time moves by `advance` alone.
        CLOCK.reset()
        CLOCK.stop(START)
        with mock_aws():
            _create_journal()
            service = importlib.import_module("pipeline.sms.service")
            service.reset_runtime()
            shop = cls()
            botocore.client.BaseClient._make_api_call = lambda client, op, params: shop.aws.call(  # type: ignore[method-assign]
                client, op, params
            )
            try:
                yield shop
            finally:
                botocore.client.BaseClient._make_api_call = shop.aws.original  # type: ignore[method-assign]
                service.reset_runtime()
        gateways.reset_fake_gateway()
        CLOCK.reset()
        aws.reset_clients()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    @property
    def service(self) -> Any:
        return importlib.import_module("pipeline.sms.service")

    @property
    def journal(self) -> Any:
        return self.service.runtime().journal

    def now(self) -> datetime:
        return CLOCK.now()

    def tick(self) -> int:
        self.step += 1
        return self.step

    def forget_metrics(self) -> None:
        """The metrics a Lambda would flush at the end of each invocation (disabled here)."""
        self.service.metrics.clear_metrics()

    # -- the CRM ----------------------------------------------------------------------------------
    def add_order(self, order_id: str, source: str | None) -> Order:
        order = Order(order_id, source, PHONES[len(self.orders) % len(PHONES)])
        self.orders.append(order)
        return order

    def _event(self, order: Order, run: Run, status: str, previous: str, stamp: datetime) -> dict[str, Any]:
        event: dict[str, Any] = {
            "event_id": f"evt-{uuid.uuid4().hex[:12]}",
            "type": "order.status_changed",
            "occurred_at": stamp.isoformat(),
            "order": {"id": order.order_id, "status": status, "previous_status": previous},
            "customer": {"phone": order.phone, "name": run.marker},
        }
        if order.source is not None:
            event["source"] = {"crm": order.source}
        return event

    def _second(self, order: Order, same_second: bool) -> datetime:
        """The CRM's stamp of a move: the second of the order's last move, or a later one."""
        if same_second and order.last_stamp is not None:
            return order.last_stamp
        if order.last_stamp is not None and self.now().replace(microsecond=0) <= order.last_stamp:
            self.advance(1)  # a move takes time: the next second
        return self.now().replace(microsecond=0)

    def move(self, order: Order, status: str, *, same_second: bool, skew: timedelta) -> None:
        """A real move of the order into `status` (a new run when the status changes).

        Bitrix24's and amoCRM's orders name each move by its history record (`transition_id`,
        increasing; a second press writes no record, and the next read re-reads the same record:
        its stamp, and as old as it is, so never published once past the age the CRM's consumer
        publishes at, `pipeline.crm.sync`); a templated sender's have none, and it cannot make the
        same move (statuses and stamp) twice in one second: the contract README states for a CRM
        without transition ids.
        """
        if status == order.status and order.runs and order.runs[-1].record is not None:
            run = order.runs[-1]
            assert run.record is not None
            stamp_sent, skewed, written = run.record
            event = self._event(order, run, status, run.entered_from, stamp_sent)
            event["order"]["transition_id"] = run.ref
            self.queue.append(Copy(event, run, True, self.now(), written, skewed=skewed))
            return
        stamp = self._second(order, same_second)
        second_press = status == order.status
        if second_press and order.source is None:
            # Reported with its origin and stamped by a fast clock (clamped: "before its receipt"),
            # a second press arriving after the order's next move reads, by the chain of statuses,
            # as the return that move makes possible: README's contract for a CRM without
            # `transition_id` (it must send one, or keep its clocks right).
            skew = timedelta(0)
        if second_press:  # the same run, reported with its origin
            run = order.runs[-1]
            previous = run.entered_from
        else:
            run = Run(order.label, len(order.runs), status, order.status, self.tick())
            previous = order.status
            if order.source is not None:
                run.ref = str(len(order.runs) + 1)
            order.runs.append(run)
        if order.source is None and (
            (stamp + skew, status, previous) in order.identities
            or (not second_press and order.pressed_in == stamp)
        ):
            # Without transition ids a CRM cannot make the same move twice in one second, nor a move
            # in the second of a second press (reported with its origin, it reads as the return
            # the move makes possible): README's contract for a CRM without `transition_id`.
            self.advance(1)
            stamp = self.now().replace(microsecond=0)
        if second_press and order.source is None:
            order.pressed_in = stamp
        order.identities.add((stamp + skew, status, previous))
        order.last_stamp = stamp
        event = self._event(order, run, status, previous, stamp + skew)
        if run.ref is not None:
            event["order"]["transition_id"] = run.ref
        run.identities.add(
            f"ref:{run.ref}" if run.ref is not None else f"at:{iso(stamp + skew)}|{status}|{previous}"
        )
        if run.ref is not None and run.record is None:
            run.record = (stamp + skew, bool(skew), self.now())
        self.queue.append(Copy(event, run, True, self.now(), self.now(), skewed=bool(skew)))
        if skew:
            self.faults["clock_skew"] += 1

    def resave(self, order: Order, *, new_phone: bool) -> None:
        if not order.runs:
            return
        if new_phone:
            order.phone = PHONES[(PHONES.index(order.phone) + 1) % len(PHONES)]
        run = order.runs[-1]
        stamp = self._second(order, same_second=False)
        order.last_stamp = stamp  # the CRM's clock never goes back for the order's next move
        event = self._event(order, run, run.status, run.status, stamp)
        self.queue.append(Copy(event, run, False, self.now(), self.now()))

    # -- the pipeline -----------------------------------------------------------------------------
    def deliver(self, index: int, *, again: bool, new_id: bool, fault: str | None, at_call: int) -> None:
        """One worker invocation with one waiting copy (any of them: SQS has no order here)."""
        self._forget_the_impossible()
        visible = [copy for copy in self.queue if copy.visible_at <= self.now()]
        if not visible:
            return
        copy = visible[index % len(visible)]
        event = {**copy.event, "event_id": f"evt-{uuid.uuid4().hex[:12]}"} if new_id else copy.event
        envelope = Envelope(
            event_id=crm_event_id(event["event_id"]),
            source="crm",
            type=event["type"],
            correlation_id=str(uuid.uuid4()),
            received_at=self.now(),
            payload=event,
        )
        if fault is not None:
            self.aws.arm(at_call, fault)
        outcome = "done"
        try:
            self.service.send_notification(envelope)
        except AccountRefused:
            # The gateway refused the account (`FakeBehaviour.REFUSE_ACCOUNT`, restored at the next
            # send): the worker re-sends the message delayed by the pause, uncounted.
            outcome = "paused"
            copy.visible_at = self.now() + timedelta(seconds=PAUSE_SECONDS)
        except TransientError as error:
            outcome = "retry"
            copy.visible_at = self.now() + timedelta(seconds=error.retry_after or 10)
        except PermanentError as error:
            outcome = "dead"
            self.dead_letters.append((copy, str(error)))
        except (SimulatedCrash, ClientError):
            outcome = "crashed"
            copy.visible_at = self.now() + timedelta(seconds=VISIBILITY_SECONDS)
        finally:
            self.aws.disarm()
            self.forget_metrics()
        order = next(order for order in self.orders if order.label == copy.run.order)
        if outcome != "crashed" and copy.is_move and copy.run.first_processed_step is None:
            copy.run.first_processed_step = self.tick()
            copy.run.misled = order.misleading_stamps
        stamp = datetime.fromisoformat(event["occurred_at"])
        if copy.skewed and outcome != "crashed" and stamp <= envelope.received_at + CLOCK_SKEW_TOLERANCE:
            order.misleading_stamps = True  # a fast clock, caught up with by the time it arrived
        if outcome in ("done", "dead") and not again:
            self.queue.remove(copy)
        elif outcome in ("done", "dead"):
            self.faults["duplicate_delivery"] += 1

    def _forget_the_impossible(self) -> None:
        """No copy of an event arrives later than the journal's retention after it happened: the
        retention is the redelivery bound plus the CRM's resend window (`pipeline.retention`),
        the assumption every key's lifetime rests on. Older copies are gone from SQS and the CRM."""
        oldest = self.now() - self.journal.retention
        for copy in [copy for copy in self.queue if copy.created_at <= oldest]:
            self.queue.remove(copy)
            self.faults["copies_past_the_redelivery_bound"] += 1

    def gateway_next(self, behaviour: FakeBehaviour) -> None:
        self.gateway.then(behaviour)
        if behaviour is not FakeBehaviour.ACCEPT:
            self.faults[f"gateway_{behaviour.value}"] += 1

    def advance(self, seconds: float) -> None:
        CLOCK.advance(seconds)

    def reconcile(self, fault: str | None = None, at_call: int = 1) -> None:
        if fault is not None:
            self.aws.arm(at_call, fault)
        try:
            importlib.import_module("pipeline.sms.reconcile").reconcile(self.service.runtime())
        except (SimulatedCrash, ClientError):
            pass  # the next scheduled run starts over
        finally:
            self.aws.disarm()
            self.forget_metrics()

    def receipt(self, index: int) -> None:
        """A delivery event for an SMS the gateway took (End User Messaging's SNS topic)."""
        if not self.gateway.delivered:
            return
        message_id, sms = self.gateway.delivered[index % len(self.gateway.delivered)]
        delivery = importlib.import_module("pipeline.sms.delivery")
        event = delivery.DeliveryEvent.parse(
            {
                "eventType": "TEXT_DELIVERED",
                "eventTimestamp": int(self.now().timestamp() * 1000),
                "messageId": message_id,
                "isFinal": True,
                "context": {gateways.CONTEXT_KEY: sms.key},
            }
        )
        delivery.apply_delivery_event(self.journal, event)

    def operator(self, index: int, decision: str) -> None:
        """A person resolves a record left to people, having checked the gateway's console."""
        waiting = [
            item for item in self._records() if item["state"] in (State.UNKNOWN.value, State.FAILED.value)
        ]
        if not waiting:
            return
        item = waiting[index % len(waiting)]
        key = str(item["id"])[len(KEY_PREFIX) :]
        delivered = [message for message, sms in self.gateway.delivered if sms.key == key]
        if decision == "accepted" and delivered:
            self.journal.resolve_accepted(key, via="operator")
        elif decision == "not_sent" and not delivered:
            self.journal.request_resend(key, by="operator")
        elif decision == "not_sent_then_receipt" and delivered:
            # The console was checked too early; the receipt comes right after the decision.
            self.journal.request_resend(key, by="operator")
            keys = [sms.key for _, sms in self.gateway.delivered]
            self.receipt(keys.index(key))
            self.faults["operator_mistaken_before_receipt"] += 1
        elif decision == "abandon" and self.journal.abandon(key, by="operator") is not None:
            # A person decided: settled, its record kept only for the retention after that.
            self.abandoned.add(key)

    def expire(self) -> int:
        """DynamoDB's TTL: items whose `expiration` has passed are deleted."""
        table = aws.resource("dynamodb").Table("journal")
        now = self.now().timestamp()
        gone = 0
        for item in _scan(table):
            if isinstance(item.get("expiration"), Decimal) and item["expiration"] <= now:
                table.delete_item(Key={"id": item["id"]})
                gone += 1
        if gone:
            self.faults["ttl_expired_items"] += gone
        return gone

    # -- the end ----------------------------------------------------------------------------------
    def drain(self) -> None:
        """The faults stop: every waiting copy is delivered until the queue is empty, and the
        reconciler runs until nothing is left for it (bounded)."""
        self.aws.disarm()
        self.gateway.script.clear()
        self.gateway.default = FakeBehaviour.ACCEPT
        for _ in range(60):
            while self.queue:
                self._forget_the_impossible()
                if not self.queue:
                    break
                due = min(copy.visible_at for copy in self.queue)
                if due > self.now():
                    self.advance(math.ceil((due - self.now()).total_seconds()))
                self.deliver(0, again=False, new_id=False, fault=None, at_call=0)
            self.advance(180)
            self.reconcile()
            open_states = {State.PENDING.value, State.SENDING.value}
            if not any(item["state"] in open_states for item in self._records()):
                break

    def _records(self) -> list[dict[str, Any]]:
        table = aws.resource("dynamodb").Table("journal")
        return [item for item in _scan(table) if str(item["id"]).startswith(KEY_PREFIX)]

    def _run_of_keys(self) -> dict[str, str]:
        """Each notification key the rules can name a run's entry by, and the run's marker. A
        notification belongs to the run whose move opened its entry: its body, re-rendered from a
        later event that corrected the phone, may name another run."""
        return {
            notification_key(ORDER_STATUS_CHANGED, order.key, identity, self.service.CHANNEL): run.marker
            for order in self.orders
            for run in order.runs
            for identity in run.identities
        }

    def violations(self, *, drained: bool) -> list[str]:
        run_of_key = self._run_of_keys()
        texts: Counter[str] = Counter()
        for _, sms in self.gateway.delivered:
            texts[run_of_key.get(sms.key, sms.body.split(",", 1)[0])] += 1
        records = self._records() if drained else []  # a scan: only once everything drained
        records_by_run: dict[str, list[dict[str, Any]]] = {}
        for item in records:
            key = str(item["id"])[len(KEY_PREFIX) :]
            marker = run_of_key.get(key, str(item["body"]).split(",", 1)[0])
            records_by_run.setdefault(marker, []).append(item)
        found: list[str] = []
        for order in self.orders:
            for run in order.runs:
                count = texts.get(run.marker, 0)
                if count > 1:
                    found.append(f"run {run.marker} ({run.status}) texted {count} times")
                if count and run.status not in RULED:
                    found.append(f"run {run.marker} ({run.status}, no rule) texted")
                if drained and run.status in RULED and self._due(order, run) and count == 0:
                    states = [item["state"] for item in records_by_run.get(run.marker, [])]
                    decided = any(run_of_key.get(key) == run.marker for key in self.abandoned)
                    moved_on = run.index + 1 < len(order.runs)
                    ended = OUTCOME_STATES | ({State.SUPERSEDED.value} if moved_on else set())
                    if not decided and not any(state in ended for state in states):
                        found.append(
                            f"run {run.marker} ({run.entered_from} -> {run.status}) was due and got no SMS"
                            f" and no record for a person (records: {states or 'none'})"
                        )
        if drained:
            for item in records:
                if item["state"] in (State.PENDING.value, State.SENDING.value):
                    found.append(f"record {str(item['id'])[:16]}... left {item['state']} after the drain")
                if _corrected_after_refusals(item):
                    found.append(
                        f"record {str(item['id'])[:16]}... refused at every attempt, its phone corrected"
                        " since, left failed: the corrected number never got it"
                    )
        return found

    def _due(self, order: Order, run: Run) -> bool:
        if run.first_processed_step is None or run.misled:
            return False
        following = order.runs[run.index + 1 : run.index + 2]
        if following and following[0].created_step < run.first_processed_step:
            return False
        return all(
            earlier.first_processed_step is not None
            and earlier.first_processed_step < run.first_processed_step
            for earlier in order.runs[: run.index]
        )


def _corrected_after_refusals(item: dict[str, Any]) -> bool:
    """A `failed` record none of whose attempts was taken (each refused, e.g. an invalid number),
    whose recipient a later word on the entry corrected after it failed, and no person abandoned:
    the corrected number is owed the SMS (`pipeline.sms.journal.Journal.change_recipient`)."""
    return (
        item["state"] == State.FAILED.value
        and "abandoned_at" not in item
        and "message_id" not in item
        and "delivery_status" not in item
        and str(item.get("recipient_changed_at", "")) > str(item["state_since"])
        and all(attempt.get("outcome") in ("refused", "refused_permanently") for attempt in item["attempts"])
    )


def _scan(table: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    kwargs: dict[str, Any] = {}
    while True:
        page = table.scan(**kwargs)
        items.extend(page.get("Items", []))
        if "LastEvaluatedKey" not in page:
            return items
        kwargs["ExclusiveStartKey"] = page["LastEvaluatedKey"]


def _create_journal() -> None:
    """The journal table as the stack makes it: TTL on `expiration`, the sparse `by_state` index."""
    aws.client("dynamodb").create_table(
        TableName="journal",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": "id", "AttributeType": "S"},
            {"AttributeName": "sms_state", "AttributeType": "S"},
            {"AttributeName": "state_since", "AttributeType": "S"},
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": "by_state",
                "KeySchema": [
                    {"AttributeName": "sms_state", "KeyType": "HASH"},
                    {"AttributeName": "state_since", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
