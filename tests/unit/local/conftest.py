"""Fixtures for the CRM portal stand-ins' tests (helpers in `crm_portal_support`) and for the local
SQS's (helpers in `sqs_support`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto.dynamodb.models import DynamoDBBackend
from moto.dynamodb.models.table import Table
from moto.moto_server.werkzeug_app import DomainDispatcherApplication
from moto.sqs import models as sqs_models
from moto.sqs.models import Queue, SQSBackend

from local import sqs_receive
from local.fakes.amocrm import AmoCrmFake
from local.fakes.bitrix24 import Bitrix24PortalFake
from local.moto_dynamodb import DYNAMODB_ITEM_WRITES, TABLE_READS
from local.moto_process import apply_patches
from local.sqs_receive import QUEUE_METHODS, SQS_BACKEND_METHODS
from tests.unit.local.crm_portal_support import Receiver, fixed_clock, running, serving
from tests.unit.local.sqs_support import FakeClock


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with serving(Receiver()) as receiver:
        yield receiver


@pytest.fixture
def portal(receiver: Receiver) -> Iterator[Bitrix24PortalFake]:
    with running(Bitrix24PortalFake(handler_url=receiver.url, clock=fixed_clock)) as fake:
        yield fake


@pytest.fixture
def amo(receiver: Receiver) -> Iterator[AmoCrmFake]:
    with running(AmoCrmFake(handler_url=receiver.url, clock=fixed_clock)) as fake:
        yield fake


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> FakeClock:
    clock = FakeClock()
    monkeypatch.setattr(sqs_models, "unix_time", clock.seconds)
    monkeypatch.setattr(sqs_models, "unix_time_millis", clock.millis)

    def wait_for_a_change(queue: Queue, seen: int, seconds: float) -> None:
        clock.advance(seconds)

    monkeypatch.setattr(sqs_receive, "wait_for_a_change", wait_for_a_change)
    return clock


@pytest.fixture
def sqs(clock: FakeClock, patched_sqs: Any) -> Any:
    """The patched SQS on the test's clock."""
    return patched_sqs


@pytest.fixture
def patched_sqs(aws_env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """In-process moto patched as the local server is; what the patches replace comes back after."""
    for name in (*SQS_BACKEND_METHODS, "is_message_valid_based_on_retention_period"):
        monkeypatch.setattr(SQSBackend, name, getattr(SQSBackend, name))
    for name in QUEUE_METHODS:
        monkeypatch.setattr(Queue, name, getattr(Queue, name))
    monkeypatch.setattr(Queue, "pending_message_groups", Queue.pending_message_groups)
    for name in DYNAMODB_ITEM_WRITES:
        monkeypatch.setattr(DynamoDBBackend, name, getattr(DynamoDBBackend, name))
    for name in TABLE_READS:
        monkeypatch.setattr(Table, name, getattr(Table, name))
    lookup = DomainDispatcherApplication.get_backend_for_host
    monkeypatch.setattr(DomainDispatcherApplication, "get_backend_for_host", lookup)
    apply_patches()
    from moto import mock_aws

    with mock_aws():
        yield boto3.client("sqs")
