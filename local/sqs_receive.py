"""SQS's receive as SQS makes it, for the local moto server: FIFO groups locked, delivered in order;
and a FIFO queue's deduplication as SQS keeps it.

moto 5.x's `SQSBackend.receive_message` decides which FIFO groups are locked from a snapshot taken
at the start of a long poll, recomputed only when it meets a message that is pending and visible
again. In one pass the head of a group (a failed record, visible again after its backoff) can be
skipped as locked by that stale snapshot, then a later message of the group (released after it)
recomputes the snapshot, finds the group free and is delivered first: a chat's next update is
answered before the one that failed. It also runs concurrent receives (one thread per request)
side by side, so two pollers of one queue can both take the same message or group.

SQS's rules, which `receive_in_order` keeps:
  - a group is locked while any of its messages is in flight (received, not visible again);
  - a group's messages are delivered strictly in order: a receive never returns a message when an
    earlier message of its group is still in the queue and this receive did not return it;
  - a receive may return several messages of one group, in order;
  - receives are atomic: no message goes to two receives at once.
Everything else is moto's: the visibility timeout, the redrive to the DLQ on the receive after
`maxReceiveCount`, the retention check.

A long poll that finds nothing to take waits for a change to its queue (a message sent, deleted or
made visible early), or a tick for visibility and delays that run out. moto's wait returns at once
while any message is visible, so on a FIFO queue whose visible messages all sit in locked groups
each waiting poller spun through receive passes for its whole 20 s: most of the server's CPU.

Deduplication: SQS accepts a FIFO send whose deduplication id was sent in the five minutes before
and never delivers it, whether or not the first message is still in the queue, per message group
when the queue's `DeduplicationScope` is `messageGroup`. moto compares only with the messages
still in the queue, across groups: after the first was processed and deleted, a repeat sent within
the five minutes was delivered again (a publish retried after a lost answer, processed twice).
"""

from __future__ import annotations

import threading
from copy import deepcopy
from typing import Any

# One receive pass at a time, across every queue (a pass is a walk of one queue, sub-millisecond).
RECEIVE_PASS = threading.Lock()
# The longest a waiting poll goes without a pass: the delay before it sees a message whose
# visibility timeout or delay ran out (every other change wakes it at once).
TICK_SECONDS = 0.5
# SQS's deduplication interval, from a message's first successful send.
DEDUPLICATION_MS = 5 * 60 * 1000
# What `receive_as_sqs_does` replaces (a test puts them back).
SQS_BACKEND_METHODS = ("receive_message", "delete_message", "change_message_visibility")
QUEUE_METHODS = ("add_message",)


def receive_in_order(
    self: Any,
    queue_name: str,
    count: int,
    wait_seconds_timeout: int,
    visibility_timeout: int,
    message_attribute_names: list[str] | None = None,
) -> list[Any]:
    """`SQSBackend.receive_message`, with SQS's FIFO group rules (module docstring)."""
    from moto.sqs import models

    queue = self.get_queue(queue_name)
    polling_end = models.unix_time() + wait_seconds_timeout
    while True:
        seen = changes(queue)
        with RECEIVE_PASS:
            result = _receive_pass(self, queue, count, visibility_timeout, message_attribute_names or [])
        remaining = polling_end - models.unix_time()
        if result or not wait_seconds_timeout or remaining <= 0:
            return result
        wait_for_a_change(queue, seen, min(TICK_SECONDS, remaining))


def changes(queue: Any) -> int:
    """How many times the queue has changed (`_changed`): a poll waits only if none came since its pass."""
    return int(getattr(queue, "_local_changes", 0))


def wait_for_a_change(queue: Any, seen: int, seconds: float) -> None:
    """Until the queue changes after `seen`, or `seconds` pass."""
    with queue._messages_lock:
        if changes(queue) == seen:
            queue._messages_lock.wait(timeout=seconds)


def _changed(queue: Any) -> None:
    with queue._messages_lock:
        queue._local_changes = changes(queue) + 1
        queue._messages_lock.notify_all()


def _first_in_its_window(queue: Any, message: Any) -> bool:
    """Whether a FIFO send is delivered: no send with its deduplication id (in its group, for a
    `messageGroup` scope) in the five minutes before. Records it when it is."""
    if message.deduplication_id is None:
        return True  # moto refuses a FIFO send without one (or makes it from the body) before this
    scope = message.group_id if queue.attributes.get("DeduplicationScope") == "messageGroup" else None
    key = (scope, message.deduplication_id)
    first_sent: dict[tuple[str | None, str], int] = queue.__dict__.setdefault("_local_first_sent", {})
    first = first_sent.get(key)
    if first is not None and message.sent_timestamp - first < DEDUPLICATION_MS:
        return False
    first_sent[key] = message.sent_timestamp
    return True


def _append(queue: Any, message: Any) -> None:
    with queue._messages_lock:
        queue._messages.append(message)
    _changed(queue)


def _receive_pass(
    backend: Any, queue: Any, count: int, visibility_timeout: int, attribute_names: list[str]
) -> list[Any]:
    from moto.sqs.models import _filter_message_attributes

    fifo = bool(queue.fifo_queue)
    # Groups this receive may not take from: a message in flight (not visible, not delayed: only a
    # receive or a visibility change hides a message) or, below, an earlier message left behind.
    held = (
        {m.group_id for m in queue._messages if m.group_id is not None and not m.visible} if fifo else set()
    )
    result: list[Any] = []
    to_dead_letter: list[Any] = []
    for message in list(queue._messages):
        group = message.group_id if fifo else None
        if group is not None and group in held:
            continue
        if not message.visible or message.delayed:
            if group is not None:
                held.add(group)
            continue
        queue.pending_messages.discard(message)
        if not backend.is_message_valid_based_on_retention_period(queue.name, message):
            continue  # past retention: as good as gone, it holds nothing back
        if (
            queue.dead_letter_queue is not None
            and queue.redrive_policy
            and message.approximate_receive_count >= queue.redrive_policy["maxReceiveCount"]
        ):
            to_dead_letter.append(message)  # leaves the queue: the group's next message may follow
            continue
        queue.pending_messages.add(message)
        message.mark_received(visibility_timeout=visibility_timeout)
        # A copy, so filtering the attributes for the answer leaves the stored message whole.
        answered = deepcopy(message)
        _filter_message_attributes(answered, attribute_names)
        result.append(answered)
        if len(result) >= count:
            break
    for message in to_dead_letter:
        queue._messages.remove(message)
        _append(queue.dead_letter_queue, message)  # a move, not a send: no deduplication
    return result


def receive_as_sqs_does() -> None:
    """Replace moto's `SQSBackend.receive_message` with `receive_in_order` and a FIFO queue's
    deduplication with SQS's, and make each send, delete and visibility change wake the queue's
    waiting polls (in this process). moto's add_message also feeds Lambda event source mappings,
    which moto cannot run here: the local runtime polls the queues itself."""
    from moto.sqs.models import Queue, SQSBackend

    SQSBackend.receive_message = receive_in_order  # type: ignore[method-assign]
    add_message = Queue.add_message
    delete_message = SQSBackend.delete_message
    change_visibility = SQSBackend.change_message_visibility

    def add_and_wake(self: Queue, message: Any) -> None:
        if not self.fifo_queue:
            add_message(self, message)
            _changed(self)
        elif _first_in_its_window(self, message):
            _append(self, message)  # moto's add_message, without its own deduplication

    def delete_and_wake(self: SQSBackend, queue_name: str, receipt_handle: str) -> None:
        delete_message(self, queue_name, receipt_handle)
        _changed(self.get_queue(queue_name))

    def change_visibility_and_wake(self: SQSBackend, queue_name: str, *args: Any, **kwargs: Any) -> None:
        change_visibility(self, queue_name, *args, **kwargs)
        _changed(self.get_queue(queue_name))

    Queue.add_message = add_and_wake  # type: ignore[method-assign]
    SQSBackend.delete_message = delete_and_wake  # type: ignore[method-assign]
    SQSBackend.change_message_visibility = change_visibility_and_wake  # type: ignore[method-assign]
