"""What a consumer logs per record at INFO (issue 44): one structured line, without the keys
CloudWatch already knows from the log group. CloudWatch Logs bills every byte ingested."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.unit.consumer_support import Output, telegram_envelope, telegram_update
from tests.unit.consumers.conftest import DeployedConsumer, FakeHttpServer

# What CloudWatch knows from the log group and the function's configuration.
LOG_GROUP_KEYS = {"function_name", "function_arn", "function_memory_size"}


@pytest.fixture
def autoreply(scripted_autoreply: DeployedConsumer) -> DeployedConsumer:
    return scripted_autoreply


def test_a_replied_start_logs_one_line_at_info_without_the_log_groups_keys(
    autoreply: DeployedConsumer, http_fake: FakeHttpServer, output: Callable[[Any], Output]
) -> None:
    out = output(autoreply.app.worker)
    assert autoreply.deliver(telegram_envelope(telegram_update("private_start"))).failed == []

    assert len(http_fake.requests) == 1  # the reply was sent
    logs = [line for line in out.read() if "_aws" not in line]  # the EMF metric lines aside
    assert [line["message"] for line in logs] == ["record processed"]
    [line] = logs
    assert line["function_request_id"] and line["event_id"]
    assert not LOG_GROUP_KEYS & set(line)
