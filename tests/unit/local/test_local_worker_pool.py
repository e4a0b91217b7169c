"""A queue consumer's several worker processes (`local.worker_pool`), and the status they share.

Oracle: Lambda's SQS event source, which runs up to `MaximumConcurrency` invocations at once, each
in its own execution environment, and scales up while messages wait.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from local import worker_pool
from local.child_process import ChildProcess
from local.runtime import Runtime
from local.settings import LocalSettings
from local.status import FunctionStatus
from local.worker_pool import WorkerPool, worker_name
from pipeline.registry import by_name


class FakeWorker(ChildProcess):
    def start(self) -> None:
        self.started_at = time.monotonic()


def pool(maximum: int, on_demand: bool = True) -> WorkerPool:
    def make(index: int) -> ChildProcess:
        return FakeWorker(
            name=worker_name("bot", index),
            function="bot",
            module="m",
            args=list,
            env={},
            log_path=Path(os.devnull),
            on_message=lambda child, message: None,
        )

    return WorkerPool("bot", maximum, make, on_demand=on_demand)


def names(workers: list[ChildProcess]) -> list[str]:
    return [worker.name for worker in workers]


def test_a_pool_starts_one_worker_on_demand_and_all_of_them_otherwise() -> None:
    assert names(pool(3).start()) == ["bot"]
    assert names(pool(3, on_demand=False).start()) == ["bot", "bot#2", "bot#3"]


def test_a_pool_adds_a_worker_only_while_all_are_busy_and_messages_wait_up_to_its_maximum(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(worker_pool, "SCALE_CHECK_SECONDS", 0)
    workers = pool(3)
    workers.start()
    asked: list[int] = []

    def visible(count: int) -> Any:
        return lambda: asked.append(count) or count

    assert workers.scale_up(busy=set(), visible_messages=visible(5)) is None  # one idle: no
    assert asked == []  # and the queue is not even asked
    assert workers.scale_up(busy={"bot"}, visible_messages=visible(0)) is None  # nothing waits
    added = workers.scale_up(busy={"bot"}, visible_messages=visible(5))
    assert added is not None and added.name == "bot#2"
    assert workers.scale_up(busy={"bot"}, visible_messages=visible(5)) is None  # bot#2 not busy yet
    assert workers.scale_up(busy={"bot", "bot#2"}, visible_messages=visible(5)) is not None
    assert workers.scale_up(busy={"bot", "bot#2", "bot#3"}, visible_messages=visible(5)) is None
    assert names(workers.workers) == ["bot", "bot#2", "bot#3"]


def test_a_function_is_busy_until_its_last_busy_worker_finishes() -> None:
    status = FunctionStatus("bot", "consumer", max_workers=3, workers=3)
    status.apply({"event": "busy", "records": 1}, worker="bot")
    status.apply({"event": "busy", "records": 1}, worker="bot#2")
    status.apply({"event": "invocation", "records": 1, "failed": 0}, worker="bot")
    assert status.busy
    assert "workers 1/3/3" in status.line()
    status.apply({"event": "invocation", "records": 1, "failed": 0}, worker="bot#2")
    assert not status.busy
    assert status.as_dict()["most_busy_workers"] == 2


def pids(runtime: Runtime, function: str) -> dict[str, int]:
    return {
        worker.name: worker.process.pid  # type: ignore[union-attr]
        for worker in runtime.pools[function].workers
    }


def wait_until(condition: Any, timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        time.sleep(0.1)
    raise AssertionError("timed out")


def test_a_consumers_workers_are_restarted_one_by_one_on_a_crash_and_all_on_a_restart(tmp_path: Path) -> None:
    settings = LocalSettings.from_cdk_json(
        consumer_workers=3, scale_workers_on_demand=False, bot_consumer=False
    )
    with Runtime(settings=settings, state_dir=tmp_path, consumers=(by_name("store"),)) as runtime:
        before = pids(runtime, "store")
        assert list(before) == ["store", "store#2", "store#3"]
        # The window the runtime reports (the demo's and `bench latency`'s) is its workers' own.
        args = runtime.children["store#2"].args()
        gathered = int(args[args.index("--batching-window") + 1])
        assert runtime.batching_windows() == {"store": gathered}
        assert gathered == by_name("store").batching_window_seconds > 0
        assert all(runtime.children[name].exit_code is None for name in before)
        assert runtime.status()["store"]["workers"] == 3

        os.kill(before["store#2"], signal.SIGKILL)  # one execution environment dies
        after_crash = wait_until(lambda: (p := pids(runtime, "store"))["store#2"] != before["store#2"] and p)
        assert after_crash["store"] == before["store"] and after_crash["store#3"] == before["store#3"]
        status = runtime.status()["store"]
        assert status["crashes"] == 1 and status["state"] == "ready"

        runtime.restart_functions("store")
        restarted = pids(runtime, "store")
        assert not set(restarted.values()) & set(after_crash.values())
        processes = [runtime.children[name].process for name in restarted]
    assert all(process is not None and process.poll() is not None for process in processes)
