"""What each local function is doing, from its status pipe and its queues, as lines and as JSON."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

# States a function process reports, plus the supervisor's own.
STARTING = "starting"
READY = "ready"
MISSING = "missing handler"
INIT_ERROR = "init error"
RESTARTING = "restarting"
STOPPED = "stopped"
# Shown instead of "ready" while a function's last invocations (or processes) all failed.
FAILING = "failing"
# An exception class in a failure reason ("ValueError: ...", "retries exhausted ...: HTTPError ...").
_ERROR_CLASS = re.compile(r"\b([A-Z][A-Za-z0-9_]*(?:Error|Exception|Exit|Interrupt|Timeout))\b")


@dataclass
class QueueDepth:
    visible: int = 0
    in_flight: int = 0
    delayed: int = 0

    @property
    def total(self) -> int:
        return self.visible + self.in_flight + self.delayed

    @classmethod
    def from_attributes(cls, attributes: dict[str, str]) -> QueueDepth:
        return cls(
            visible=int(attributes.get("ApproximateNumberOfMessages", 0)),
            in_flight=int(attributes.get("ApproximateNumberOfMessagesNotVisible", 0)),
            delayed=int(attributes.get("ApproximateNumberOfMessagesDelayed", 0)),
        )


@dataclass
class FunctionStatus:
    """Counters of one function across restarts of its process."""

    name: str
    kind: str  # "api", "consumer", "schedule" or "subscription" (SNS)
    state: str = STARTING
    detail: str | None = None
    # The processes (a queue consumer's workers, `local.worker_pool`) handling a batch right now.
    busy_workers: set[str] = field(default_factory=set)
    # Worker processes running, and at most (a queue consumer's max_concurrency or the local setting).
    workers: int = 1
    max_workers: int = 1
    # The most processes ever busy at once (invocations side by side).
    most_busy_workers: int = 0
    invocations: int = 0
    records: int = 0
    failed_records: int = 0
    errors: int = 0
    timeouts: int = 0
    restarts: int = 0
    # Processes that died (not stopped, not timed out), and the invocations or process deaths in a
    # row that processed no record: one that does resets it. Above zero the function is failing.
    crashes: int = 0
    failing_in_a_row: int = 0
    # ConsumerWorker outcomes (processed, duplicate, retry, dead_lettered), when the handler has one.
    outcomes: Counter[str] = field(default_factory=Counter)
    has_outcomes: bool = False
    http_statuses: Counter[int] = field(default_factory=Counter)
    last_error: str | None = None
    queue: QueueDepth | None = None
    dlq: QueueDepth | None = None

    @property
    def busy(self) -> bool:
        return bool(self.busy_workers)

    def apply(self, message: dict[str, Any], worker: str = "") -> None:
        """Fold one JSON line from one of the function's processes (`worker`) into the counters."""
        event = message.get("event")
        if event == "state":
            self.state = str(message.get("state"))
            self.detail = message.get("detail")
        elif event == "busy":
            self.busy_workers.add(worker)
            self.most_busy_workers = max(self.most_busy_workers, len(self.busy_workers))
        elif event == "invocation":
            self.busy_workers.discard(worker)
            self.invocations += 1
            self.records += int(message.get("records") or 0)
            self.failed_records += int(message.get("failed") or 0)
            if message.get("error"):
                self.errors += 1
                self.last_error = str(message["error"])[:200]
            if message.get("timed_out"):
                self.timeouts += 1
                self.last_error = "timed out"
            if isinstance(message.get("outcomes"), dict):
                self.has_outcomes = True
                self.outcomes.update({str(k): int(v) for k, v in message["outcomes"].items()})
            if isinstance(message.get("status"), int):
                self.http_statuses[message["status"]] += 1
            if self.kind != "api":
                self._count_success_or_failure(message)
            else:  # a refused request is an answer, not a failure: the API is back once it answers
                self.failing_in_a_row = 0

    def _count_success_or_failure(self, message: dict[str, Any]) -> None:
        """An invocation that processed no record (all retried, dead-lettered or crashed) is a failure."""
        outcomes = message.get("outcomes")
        records = int(message.get("records") or 0)
        if isinstance(outcomes, dict):
            succeeded = int(outcomes.get("processed", 0)) + int(outcomes.get("duplicate", 0))
        else:
            succeeded = records - int(message.get("failed") or 0)
        if message.get("error") or message.get("timed_out"):
            succeeded = 0
        if succeeded > 0 or records == 0:
            self.failing_in_a_row = 0
            return
        self.failing_in_a_row += 1
        if message.get("last_failure") and not message.get("error") and not message.get("timed_out"):
            self.last_error = str(message["last_failure"])[:200]

    def crashed(self, exit_code: int) -> None:
        """The supervisor saw the process die (not a stop, not a timeout)."""
        self.crashes += 1
        self.failing_in_a_row += 1
        self.last_error = f"process exited with code {exit_code}"

    @property
    def failing(self) -> bool:
        return self.failing_in_a_row > 0

    @property
    def error_class(self) -> str | None:
        """The last error, shortened for the status line: its exception class when it names one."""
        if self.last_error is None:
            return None
        found = _ERROR_CLASS.search(self.last_error)
        return found.group(1) if found else self.last_error[:40]

    @property
    def processed(self) -> int:
        if self.has_outcomes:
            return self.outcomes["processed"]
        return self.records - self.failed_records

    @property
    def duplicates(self) -> int:
        return self.outcomes["duplicate"]

    @property
    def retried(self) -> int:
        return self.outcomes["retry"] if self.has_outcomes else self.failed_records

    @property
    def dead_lettered(self) -> int:
        return self.outcomes["dead_lettered"]

    @property
    def alarm(self) -> bool:
        """As the stack's CloudWatch alarm: a DLQ that is not empty."""
        return self.dlq is not None and self.dlq.visible + self.dlq.in_flight > 0

    def as_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "kind": self.kind,
            "state": self.state,
            "detail": self.detail,
            "invocations": self.invocations,
            "errors": self.errors,
            "timeouts": self.timeouts,
            "restarts": self.restarts,
            "crashes": self.crashes,
            "failing": self.failing,
            "last_error": self.last_error,
        }
        if self.max_workers > 1:
            document.update(
                workers=self.workers,
                max_workers=self.max_workers,
                busy_workers=len(self.busy_workers),
                most_busy_workers=self.most_busy_workers,
            )
        if self.kind == "api":
            document["requests"] = self.invocations
            document["statuses"] = {str(k): v for k, v in sorted(self.http_statuses.items())}
        else:
            document.update(
                processed=self.processed,
                duplicates=self.duplicates,
                retried=self.retried,
                dead_lettered=self.dead_lettered,
                failed_records=self.failed_records,
            )
        if self.queue is not None:
            document["queue_depth"] = self.queue.total
            document["in_flight"] = self.queue.in_flight
        if self.dlq is not None:
            document["dlq_depth"] = self.dlq.visible + self.dlq.in_flight
            document["alarm"] = self.alarm
        return document

    def line(self) -> str:
        """One status line: `store       ready  processed 12 dup 2 retried 1 dead 0 | queue 0 DLQ 0`;
        a function whose last invocations all failed: `crm  failing  ... failed 3 last ValueError | ...`."""
        state = self.state if self.state != READY else ("busy" if self.busy else "ready")
        if self.failing and self.state in (READY, RESTARTING, STARTING):
            state = FAILING
        head = f"{self.name:<11} {state:<15}"
        if self.state in (MISSING, INIT_ERROR):
            head += f" {self.detail or ''}"[:60]
        if self.kind == "api":
            statuses = " ".join(f"{code}x{count}" for code, count in sorted(self.http_statuses.items()))
            return f"{head} requests {self.invocations:<4} {statuses}".rstrip()
        counts = f"processed {self.processed:<4} dup {self.duplicates:<3} retried {self.retried:<3}"
        counts += f" dead {self.dead_lettered:<3} failed {self.failed_records:<3}"
        if self.crashes:
            counts += f" crashes {self.crashes}"
        if self.max_workers > 1:
            counts += f" workers {len(self.busy_workers)}/{self.workers}/{self.max_workers}"
        if self.failing and self.error_class:
            counts += f" last {self.error_class}"
        if self.kind == "schedule":
            failure = f" last {self.error_class}" if self.failing and self.error_class else ""
            return f"{head} runs {self.invocations:<4} errors {self.errors}{failure}"
        queues = ""
        if self.queue is not None and self.dlq is not None:
            dlq = self.dlq.visible + self.dlq.in_flight
            queues = f" | queue {self.queue.total:<3} (in flight {self.queue.in_flight}) DLQ {dlq}"
            if self.alarm:
                queues += "  ALARM"
        return f"{head} {counts}{queues}"
