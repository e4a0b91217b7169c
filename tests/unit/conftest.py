"""Fixtures for the consumer workers (helpers in `tests/unit/consumer_support.py`).

Nothing here is autouse: the webhook and ops tests beside these keep their own fixtures.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from types import ModuleType
from typing import Any

import pytest
from moto import mock_aws

from pipeline import aws
from pipeline.registry import Consumer, by_name
from pipeline.worker import ConsumerWorker
from tests.unit.consumer_support import (
    REGION,
    ConsumerQueues,
    CurrentStdout,
    Deploy,
    FakeLambdaContext,
    Output,
    create_queues,
    create_tables,
)


@pytest.fixture
def aws_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Fake credentials, fixed region, Powertools settings for tests; no cached client leaks."""
    for name, value in {
        "AWS_DEFAULT_REGION": REGION,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SECURITY_TOKEN": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "POWERTOOLS_TRACE_DISABLED": "1",
        "POWERTOOLS_METRICS_NAMESPACE": "TelegramCrmPipeline",
        "POWERTOOLS_SERVICE_NAME": "consumer",
        "POWERTOOLS_LOG_LEVEL": "INFO",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    aws.reset_clients()
    yield
    aws.reset_clients()


@pytest.fixture
def moto_aws(aws_env: None) -> Iterator[None]:
    """In-process moto with the journal and conversations tables."""
    with mock_aws():
        create_tables()
        yield


@pytest.fixture
def deploy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Deploy]:
    """Give a worker its queues and environment, as one Lambda execution environment.

    A worker reads its environment once, at first use; it is read here, right after setting it,
    so several consumers can be deployed side by side in one test. `share=` deploys another
    execution environment of the same consumer on the same queues. Use with `moto_aws` (or a
    moto server).
    """
    workers: list[ConsumerWorker] = []

    def bind(
        worker: ConsumerWorker, consumer: str | Consumer, share: ConsumerQueues | None = None
    ) -> ConsumerQueues:
        spec = by_name(consumer) if isinstance(consumer, str) else consumer
        queues = share or create_queues(spec, suffix=f"-{len(workers)}" if workers else "")
        for name, value in queues.environment().items():
            monkeypatch.setenv(name, value)
        worker.reset()
        assert worker.settings.queue_url == queues.queue_url
        assert worker.consumer.name == spec.name
        workers.append(worker)
        return queues

    yield bind
    for worker in workers:
        worker.reset()
        worker.metrics.clear_metrics()


@pytest.fixture
def lambda_context() -> FakeLambdaContext:
    return FakeLambdaContext()


@pytest.fixture
def import_app(aws_env: None) -> Callable[[str], ModuleType]:
    """`<consumer>.app`, imported once the Powertools environment is set."""

    def load(name: str) -> ModuleType:
        return importlib.import_module(f"{name}.app")

    return load


@pytest.fixture
def output(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Callable[[Any], Output]:
    """Capture what a consumer prints; pass the worker whose logger to follow."""

    def follow(worker: ConsumerWorker) -> Output:
        monkeypatch.setattr(worker.logger.registered_handler, "stream", CurrentStdout())
        capsys.readouterr()  # drop what was printed before
        return Output(capsys)

    return follow
