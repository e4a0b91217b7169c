"""What the runtime's functions and queues look like right now: queue depths, drained or not.

Reads moto's queues and the fleet's `FunctionStatus`es; used by `Runtime.status`,
`Runtime.wait_until_drained` and by the chaos campaign (`local.chaos`), which waits for the
queues to drain after its faults stop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from infra.environment import SMS_EVENTS
from local.resources import LocalResources
from local.status import INIT_ERROR, MISSING, FunctionStatus, QueueDepth

DEPTH_ATTRIBUTES = [
    "ApproximateNumberOfMessages",
    "ApproximateNumberOfMessagesNotVisible",
    "ApproximateNumberOfMessagesDelayed",
]


def queue_depths(
    sqs: Any, resources: LocalResources, functions: Mapping[str, FunctionStatus]
) -> dict[str, tuple[QueueDepth, QueueDepth]]:
    """Each queue-fed function's (queue, DLQ) depth, read from moto."""
    queues = dict(resources.queues)
    if resources.delivery_events is not None and SMS_EVENTS.service_name in functions:
        queues[SMS_EVENTS.service_name] = resources.delivery_events.queue
    depths: dict[str, tuple[QueueDepth, QueueDepth]] = {}
    for name, queue in queues.items():
        main = sqs.get_queue_attributes(QueueUrl=queue.url, AttributeNames=DEPTH_ATTRIBUTES)["Attributes"]
        dlq = sqs.get_queue_attributes(QueueUrl=queue.dlq_url, AttributeNames=DEPTH_ATTRIBUTES)["Attributes"]
        depths[name] = (QueueDepth.from_attributes(main), QueueDepth.from_attributes(dlq))
    return depths


def apply_depths(
    functions: Mapping[str, FunctionStatus], depths: Mapping[str, tuple[QueueDepth, QueueDepth]]
) -> None:
    for name, (main_depth, dlq_depth) in depths.items():
        functions[name].queue = main_depth
        functions[name].dlq = dlq_depth


def drained(functions: Mapping[str, FunctionStatus], only: Collection[str] | None = None) -> bool:
    """Every consumer with a handler (of those named in `only`, when given) has an empty queue and
    no batch in hand (the others' wait). A name in `only` that is no function is refused."""
    unknown = sorted(set(only or ()) - set(functions))
    if unknown:
        raise ValueError(f"no such functions: {unknown}")
    return all(
        status.queue is not None and status.queue.total == 0 and not status.busy
        for name, status in functions.items()
        if (only is None or name in only)
        and status.kind in ("consumer", "subscription")
        and status.state not in (MISSING, INIT_ERROR)
    )


def wait_until_drained(
    refresh: Callable[[], None],
    is_drained: Callable[[], bool],
    timeout: float,
    settle_seconds: float,
    cancel: threading.Event | None = None,
) -> bool:
    """True once `is_drained()` has held for `settle_seconds` (after `refresh()` each time)."""
    deadline = time.monotonic() + timeout
    quiet_since: float | None = None
    while time.monotonic() < deadline and not (cancel is not None and cancel.is_set()):
        refresh()
        if is_drained():
            quiet_since = quiet_since or time.monotonic()
            if time.monotonic() - quiet_since >= settle_seconds:
                return True
        else:
            quiet_since = None
        time.sleep(0.25)
    return False
