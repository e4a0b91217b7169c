"""Generated sequences against the local server's FIFO queue (`local.sqs_receive` on moto), checked
against SQS's rules as its developer guide states them (the oracle, not a copy of the patch):

  - a message group is locked while any of its messages is in flight (received, not yet visible
    again); its messages are delivered strictly in order, several of one group in one receive;
  - a message received `maxReceiveCount` times goes to the DLQ on the receive that finds it
    visible again, and its group goes on with the next one;
  - a message sent with a deduplication id already sent in the five minutes before is accepted
    but never delivered (per message group, with `DeduplicationScope: messageGroup`), whether
    or not the first one is still in the queue;
  - a receive of up to 10 messages here returns every message it may (SQS may return fewer; the
    local one does not, and the tests' timing depends on it).

The sender, the workers and the clock are Hypothesis' rules: sends and resends (a publish retried
after a lost answer) to three groups, receives, deletes, visibility changes (a failed record's
backoff, a batch's release), and time passing (past a visibility timeout, past the five minutes).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from moto.core import DEFAULT_ACCOUNT_ID
from moto.sqs.models import Queue, sqs_backends

from tests.unit.local.sqs_support import MAX_RECEIVES, FakeClock, fifo_queue

GROUPS = ("A", "B", "C")
VISIBILITY_MS = 30_000  # the queue's VisibilityTimeout (sqs_support.fifo_queue)
DEDUPLICATION_MS = 5 * 60 * 1000
_queues = itertools.count(1)


@dataclass
class Sent:
    """One message as SQS holds it: where it is and what a receive may do with it."""

    body: str
    group: str
    deduplication_id: str
    visible_at_ms: int = 0
    receives: int = 0
    receipt_handle: str | None = None


class LocalFifoQueue(RuleBasedStateMachine):
    sqs: Any
    clock: FakeClock

    def __init__(self) -> None:
        super().__init__()
        self.queue: list[Sent] = []  # in the queue, in send order
        self.dead_lettered: list[str] = []
        self.first_sent_ms: dict[tuple[str, str], int] = {}  # (group, deduplication id) -> first send
        self.bodies = itertools.count(1)
        self.url, self.dlq = fifo_queue(self.sqs, f"model{next(_queues)}")

    def stored(self, url: str) -> Queue:
        """moto's queue behind a URL: what it holds, seen without a receive (which would count)."""
        backend = sqs_backends[DEFAULT_ACCOUNT_ID][self.sqs.meta.region_name]
        return backend.get_queue(url.rsplit("/", 1)[-1])

    # -- the model's time: moto's own milliseconds ------------------------------------------------
    def now_ms(self) -> int:
        return self.clock.millis()

    def in_flight(self, message: Sent) -> bool:
        return self.now_ms() <= message.visible_at_ms  # visible only once the clock is past it

    def locked_groups(self) -> set[str]:
        return {m.group for m in self.queue if self.in_flight(m)}

    # -- the sender -------------------------------------------------------------------------------
    def _send(self, group: str, deduplication_id: str) -> None:
        body = f"{group}{next(self.bodies)}"
        self.sqs.send_message(
            QueueUrl=self.url, MessageBody=body, MessageGroupId=group, MessageDeduplicationId=deduplication_id
        )
        first = self.first_sent_ms.get((group, deduplication_id))
        if first is not None and self.now_ms() - first < DEDUPLICATION_MS:
            return  # accepted, never delivered
        self.first_sent_ms[(group, deduplication_id)] = self.now_ms()
        self.queue.append(Sent(body, group, deduplication_id))

    @initialize()
    def start_at_a_whole_second(self) -> None:
        # A whole second (a float holds it exactly), so every step below is exact in milliseconds.
        self.clock.now = float(int(self.clock.now))

    @rule(group=st.sampled_from(GROUPS))
    def send(self, group: str) -> None:
        self._send(group, f"event-{next(self.bodies)}")

    @precondition(lambda self: bool(self.first_sent_ms))
    @rule(data=st.data())
    def resend(self, data: st.DataObject) -> None:
        """The same event published again (its answer was lost): same group, same deduplication id."""
        group, deduplication_id = data.draw(st.sampled_from(sorted(self.first_sent_ms)))
        self._send(group, deduplication_id)

    @precondition(lambda self: bool(self.first_sent_ms))
    @rule(data=st.data())
    def send_its_id_to_another_group(self, data: st.DataObject) -> None:
        """Another group's message with a deduplication id already sent: a repeat only in its group."""
        group, deduplication_id = data.draw(st.sampled_from(sorted(self.first_sent_ms)))
        self._send(data.draw(st.sampled_from([g for g in GROUPS if g != group])), deduplication_id)

    # -- the workers ------------------------------------------------------------------------------
    @rule(count=st.sampled_from([1, 2, 10]))
    def receive(self, count: int) -> None:
        locked_before = self.locked_groups()
        answer = self.sqs.receive_message(
            QueueUrl=self.url, MaxNumberOfMessages=count, AttributeNames=["All"]
        ).get("Messages", [])
        received = [m["Body"] for m in answer]
        by_body = {m.body: m for m in self.queue}
        assert len(received) == len(set(received)) <= count
        assert all(body in by_body for body in received), f"delivered what SQS holds back: {received}"
        moved = self._newly_dead_lettered()
        for body in moved:
            message = by_body[body]
            assert message.receives >= MAX_RECEIVES and not self.in_flight(message), body
        for group in GROUPS:
            remaining = [m.body for m in self.queue if m.group == group and m.body not in moved]
            taken = [body for body in received if by_body[body].group == group]
            if taken:
                assert group not in locked_before, f"group {group} was in flight: {received}"
                assert taken == remaining[: len(taken)], f"group {group} out of order: {taken} of {remaining}"
            elif len(received) < count and group not in locked_before:
                assert not remaining, f"group {group} free with {remaining} waiting, not delivered"
        self.queue = [m for m in self.queue if m.body not in moved]
        for message in answer:
            sent = by_body[message["Body"]]
            sent.receives += 1
            assert int(message["Attributes"]["ApproximateReceiveCount"]) == sent.receives
            sent.visible_at_ms = self.now_ms() + VISIBILITY_MS
            sent.receipt_handle = message["ReceiptHandle"]

    def _newly_dead_lettered(self) -> list[str]:
        bodies = [m.body for m in self.stored(self.dlq)._messages]
        assert bodies[: len(self.dead_lettered)] == self.dead_lettered
        new = bodies[len(self.dead_lettered) :]
        self.dead_lettered = bodies
        return new

    def _held(self) -> list[Sent]:
        return [m for m in self.queue if m.receipt_handle is not None and self.in_flight(m)]

    @precondition(lambda self: bool(self._held()))
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        """A record processed: deleted with its last receipt handle."""
        message = data.draw(st.sampled_from(self._held()))
        self.sqs.delete_message(QueueUrl=self.url, ReceiptHandle=message.receipt_handle)
        self.queue.remove(message)

    @precondition(lambda self: bool(self._held()))
    @rule(data=st.data(), seconds=st.sampled_from([0, 1, 2, 5, 30]))
    def change_visibility(self, data: st.DataObject, seconds: int) -> None:
        """A failed record's backoff, or a batch's record released (0) for a later one."""
        message = data.draw(st.sampled_from(self._held()))
        self.sqs.change_message_visibility(
            QueueUrl=self.url, ReceiptHandle=message.receipt_handle, VisibilityTimeout=seconds
        )
        message.visible_at_ms = self.now_ms() + seconds * 1000

    # -- time -------------------------------------------------------------------------------------
    @rule(seconds=st.sampled_from([0.5, 1, 2, 5, 31, 301]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @invariant()
    def nothing_is_lost(self) -> None:
        """What the model holds is what the queue holds (in order), plus what went to the DLQ."""
        assert [m.body for m in self.stored(self.url)._messages] == [m.body for m in self.queue]


def test_the_local_fifo_queue_keeps_sqs_rules_over_generated_sequences(sqs: Any, clock: FakeClock) -> None:
    LocalFifoQueue.sqs, LocalFifoQueue.clock = sqs, clock
    run_state_machine_as_test(
        LocalFifoQueue,
        settings=settings(
            max_examples=60,
            stateful_step_count=40,
            deadline=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        ),
    )


@pytest.fixture(autouse=True)
def _no_leaked_machine() -> Any:
    yield
    LocalFifoQueue.sqs = LocalFifoQueue.clock = None
