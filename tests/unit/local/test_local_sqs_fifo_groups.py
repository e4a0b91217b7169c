"""The local moto server's receives keep SQS's FIFO group rules (`local.sqs_receive`).

SQS (the oracle, from its developer guide): a group is locked while any of its messages is in
flight; a group's messages are delivered strictly in order; a receive may return several messages
of one group, in order; no message goes to two receives.

In-process moto with the local server's patches (`local.moto_process.apply_patches`) on a clock
of the test's own: a long poll's waits advance it by their length instead of sleeping, so the
order in which messages become visible during a poll is certain, not a matter of machine load.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from local import sqs_receive
from tests.unit.local.sqs_support import MAX_RECEIVES, FakeClock, bodies, fifo_queue, receive, send


def fail_poison_and_hold_the_rest(sqs: Any, url: str, batch: list[dict[str, Any]]) -> None:
    """What the FIFO worker does with [poison, p3, p4, s1]: poison fails (1 s backoff), p3 and p4
    are released at batch end with the same delay (a moment later, here a second), s1 is slow."""
    by_body = {m["Body"]: m["ReceiptHandle"] for m in batch}
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=by_body["poison"], VisibilityTimeout=1)
    sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": body, "ReceiptHandle": by_body[body], "VisibilityTimeout": 2} for body in ("p3", "p4")
        ],
    )


def test_a_long_poll_delivers_the_failed_head_of_a_group_before_the_records_held_behind_it(
    sqs: Any,
) -> None:
    """The defect of issue 22: chat P's p3 was answered before its poison was retried."""
    url, _ = fifo_queue(sqs)
    send(sqs, url, ("P", "poison"), ("P", "p3"), ("P", "p4"), ("S", "s1"))
    batch = receive(sqs, url)
    assert bodies(batch) == ["poison", "p3", "p4", "s1"]
    fail_poison_and_hold_the_rest(sqs, url, batch)
    # The next long poll starts while all of P is in flight; poison turns visible a second in,
    # p3 and p4 a second later, s1 stays in flight.
    assert bodies(receive(sqs, url, wait=10)) == ["poison", "p3", "p4"]


def test_a_receive_after_the_backoff_starts_the_group_with_its_failed_head(
    sqs: Any, clock: FakeClock
) -> None:
    url, _ = fifo_queue(sqs)
    send(sqs, url, ("P", "poison"), ("P", "p3"), ("P", "p4"), ("S", "s1"))
    fail_poison_and_hold_the_rest(sqs, url, receive(sqs, url))
    clock.advance(3)
    assert bodies(receive(sqs, url)) == ["poison", "p3", "p4"]


def test_a_dead_lettered_head_lets_its_group_go_on_in_order_in_the_same_long_poll(sqs: Any) -> None:
    """One record at a time (each receive of p3 would count against it too)."""
    url, dlq = fifo_queue(sqs)
    send(sqs, url, ("P", "poison"), ("P", "p3"), ("P", "p4"))
    for _ in range(MAX_RECEIVES):
        (poison,) = receive(sqs, url, wait=10, count=1)
        assert poison["Body"] == "poison"
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=poison["ReceiptHandle"], VisibilityTimeout=1
        )
    # Its receives are used up: the receive that finds it visible moves it to the DLQ, and P goes on.
    assert bodies(receive(sqs, url, wait=10)) == ["p3", "p4"]
    assert bodies(receive(sqs, dlq)) == ["poison"]


@pytest.mark.parametrize("made_visible", ["m1", "m2"])
def test_a_message_made_visible_does_not_unlock_its_group_while_another_is_in_flight(
    sqs: Any, clock: FakeClock, made_visible: str
) -> None:
    url, _ = fifo_queue(sqs)
    send(sqs, url, ("G", "m1"), ("G", "m2"), ("G", "m3"))
    handles = {m["Body"]: m["ReceiptHandle"] for m in receive(sqs, url, count=2)}
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handles[made_visible], VisibilityTimeout=0)
    clock.advance(0.01)  # visible from the next millisecond on (the test's clock stands still)
    assert receive(sqs, url) == []
    # Once the other is back too, the group resumes from its first message not deleted.
    other = "m2" if made_visible == "m1" else "m1"
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=handles[other], VisibilityTimeout=0)
    clock.advance(0.01)
    assert bodies(receive(sqs, url)) == ["m1", "m2", "m3"]


def test_one_receive_returns_each_groups_messages_in_order(sqs: Any) -> None:
    url, _ = fifo_queue(sqs)
    sent = [(group, f"{group}{n}") for n in range(3) for group in ("A", "B", "C")]
    send(sqs, url, *sent)
    received = bodies(receive(sqs, url))
    for group in ("A", "B", "C"):
        assert [body for body in received if body.startswith(group)] == [f"{group}{n}" for n in range(3)]


def test_concurrent_receives_never_share_a_group_or_a_message(sqs: Any) -> None:
    """Several pollers (Lambda's concurrency) on one FIFO queue: each group in one receive at a time."""
    url, _ = fifo_queue(sqs)
    send(sqs, url, *[(f"g{g}", f"g{g}-{n}") for n in range(5) for g in range(4)])
    taken: list[list[str]] = []
    start = threading.Barrier(4)

    def poll() -> None:
        start.wait()
        taken.append(bodies(receive(sqs, url, count=3)))

    threads = [threading.Thread(target=poll) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    everything = [body for batch in taken for body in batch]
    assert len(everything) == len(set(everything))
    groups_per_receive = [{body.split("-")[0] for body in batch} for batch in taken]
    for index, groups in enumerate(groups_per_receive):
        for other in groups_per_receive[index + 1 :]:
            assert not groups & other


class Passes:
    """Counts receive passes, and tells when a poll starts to wait."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        self.waiting = threading.Event()
        receive_pass, wait = sqs_receive._receive_pass, sqs_receive.wait_for_a_change

        def counted(*args: Any) -> Any:
            self.count += 1
            return receive_pass(*args)

        def wait_and_tell(*args: Any) -> None:
            self.waiting.set()
            wait(*args)

        monkeypatch.setattr(sqs_receive, "_receive_pass", counted)
        monkeypatch.setattr(sqs_receive, "wait_for_a_change", wait_and_tell)


def test_a_long_poll_on_a_locked_group_waits_instead_of_spinning(
    patched_sqs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """moto's wait returns at once while any message is visible: a poll whose visible messages all
    sit in a locked group made thousands of passes a second. On the real clock; a loaded machine
    makes fewer passes, never more."""
    url, _ = fifo_queue(patched_sqs)
    send(patched_sqs, url, ("G", "m1"), ("G", "m2"))
    assert bodies(receive(patched_sqs, url, count=1)) == ["m1"]  # G is locked; m2 stays visible
    passes = Passes(monkeypatch)

    assert receive(patched_sqs, url, wait=1) == []
    assert passes.count <= 1 / sqs_receive.TICK_SECONDS + 2


@pytest.mark.parametrize("release", ["delete", "make_visible"])
def test_a_waiting_poll_wakes_when_its_group_is_released(
    patched_sqs: Any, monkeypatch: pytest.MonkeyPatch, release: str
) -> None:
    """With ticks longer than the poll, only the release itself can end the wait early."""
    monkeypatch.setattr(sqs_receive, "TICK_SECONDS", 60.0)
    url, _ = fifo_queue(patched_sqs)
    send(patched_sqs, url, ("G", "m1"), ("G", "m2"))
    (head,) = receive(patched_sqs, url, count=1)
    passes = Passes(monkeypatch)
    got: list[list[str]] = []
    poll = threading.Thread(target=lambda: got.append(bodies(receive(patched_sqs, url, wait=20))))
    poll.start()
    assert passes.waiting.wait(10)
    if release == "delete":
        patched_sqs.delete_message(QueueUrl=url, ReceiptHandle=head["ReceiptHandle"])
    else:
        patched_sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=head["ReceiptHandle"], VisibilityTimeout=0
        )
    poll.join(10)

    assert not poll.is_alive(), "the poll slept on through the release"
    assert got == [["m2"] if release == "delete" else ["m1", "m2"]]


def test_a_repeat_within_five_minutes_of_a_processed_first_is_not_delivered_again(
    sqs: Any, clock: FakeClock
) -> None:
    """Found by test_local_sqs_fifo_model: moto deduplicated only against messages still in the
    queue, so a publish retried after its first was processed and deleted came again. SQS keeps
    the deduplication id five minutes from the first send."""
    url, _ = fifo_queue(sqs)
    send(sqs, url, ("A", "event-1"))
    (first,) = receive(sqs, url)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    clock.advance(299)
    send(sqs, url, ("A", "event-1"))
    assert receive(sqs, url) == []
    clock.advance(1)  # five minutes after the first send: a new message
    send(sqs, url, ("A", "event-1"))
    assert bodies(receive(sqs, url)) == ["event-1"]


def test_a_deduplication_id_repeated_in_another_group_is_delivered(sqs: Any) -> None:
    """The stack's FIFO queues deduplicate per message group (`DeduplicationScope: messageGroup`);
    moto compared across groups."""
    url, _ = fifo_queue(sqs)
    for group in ("A", "B"):
        sqs.send_message(QueueUrl=url, MessageBody=group, MessageGroupId=group, MessageDeduplicationId="same")
    assert bodies(receive(sqs, url)) == ["A", "B"]
