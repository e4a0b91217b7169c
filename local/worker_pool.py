"""A queue consumer's execution environments: several worker processes on one queue, as Lambda runs it.

Lambda's SQS event source runs up to `MaximumConcurrency` invocations of a consumer at once
(`Consumer.max_concurrency`), each in its own execution environment: on a standard queue several
batches at once; on a FIFO queue several too, and the queue's group locks keep each message group
to one batch at a time (parallel across groups, serial within one). Locally each environment is a
worker process (`local.worker_process`), all long-polling the same queue.

Lambda scales up while messages wait, and so does the pool: it starts with one worker and adds
one while every worker is busy and the queue has visible messages, up to the maximum (a worker
that is starting counts as not busy, so they come one at a time). A worker's name is the
function's for the first (`bot`), `bot#2`, `bot#3`, ... for the others. Scaling down (Lambda
retires idle environments) is not played: a worker stays until the runtime stops or restarts the
function.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from local.child_process import ChildProcess

# How often a pool whose workers are all busy asks its queue whether messages wait.
SCALE_CHECK_SECONDS = 0.5


def worker_name(function: str, index: int) -> str:
    """The name of a function's `index`th worker process (1-based)."""
    return function if index == 1 else f"{function}#{index}"


class WorkerPool:
    """The worker processes of one queue consumer; `make_worker(index)` builds (not starts) one."""

    def __init__(
        self,
        function: str,
        maximum: int,
        make_worker: Callable[[int], ChildProcess],
        *,
        on_demand: bool = True,
    ) -> None:
        if maximum < 1:
            raise ValueError(f"{function}: at least one worker, not {maximum}")
        self.function = function
        self.maximum = maximum
        self.on_demand = on_demand
        self._make_worker = make_worker
        self.workers: list[ChildProcess] = []
        self._checked_at = 0.0

    def start(self) -> list[ChildProcess]:
        """Start the first worker (all of them when not on demand); the workers started."""
        count = 1 if self.on_demand else self.maximum
        return [self._add() for _ in range(count)]

    def _add(self) -> ChildProcess:
        worker = self._make_worker(len(self.workers) + 1)
        self.workers.append(worker)
        worker.start()
        return worker

    def scale_up(self, busy: Collection[str], visible_messages: Callable[[], int]) -> ChildProcess | None:
        """Add a worker when every one is busy (`busy`: their names) and messages wait in the queue.

        Called by the runtime's supervisor; asks the queue (`visible_messages`) at most every
        SCALE_CHECK_SECONDS, and only when it might add one. The worker started, if any.
        """
        if len(self.workers) >= self.maximum:
            return None
        if any(worker.name not in busy for worker in self.workers):
            return None
        now = time.monotonic()
        if now - self._checked_at < SCALE_CHECK_SECONDS:
            return None
        self._checked_at = now
        if visible_messages() <= 0:
            return None
        return self._add()
