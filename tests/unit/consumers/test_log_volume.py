"""What a consumer logs per record at INFO (issue 44): one structured line, without the keys
CloudWatch already knows from the log group. CloudWatch Logs bills every byte ingested."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from pipeline.observability import service_logger
from tests.unit.conftest import CurrentStdout
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


def test_a_processed_record_writes_no_metric_line_and_its_info_line_no_location_nor_warm_cold_start(
    autoreply: DeployedConsumer, output: Callable[[Any], Output], capsys: pytest.CaptureFixture[str]
) -> None:
    """A metric line per invocation (RecordsProcessed, which the queue's NumberOfMessagesDeleted
    already counts) was a third of a record's log bytes; `location` and `cold_start: false` rode
    on every line. A warm invocation's record that needs no reply is one line, and nothing else
    is printed."""
    output(autoreply.app.worker)
    updates = [telegram_update("edited_message") for _ in range(2)]
    updates[1]["update_id"] += 1
    assert autoreply.deliver(telegram_envelope(updates[0])).failed == []
    capsys.readouterr()
    assert autoreply.deliver(telegram_envelope(updates[1])).failed == []

    captured = capsys.readouterr()
    lines = [json.loads(line) for line in captured.out.splitlines()]
    assert [line.get("message", line) for line in lines] == ["record processed"]  # no `_aws` metric line
    [line] = lines
    assert "location" not in line and "cold_start" not in line


def test_a_warning_keeps_its_location_an_info_line_does_not(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    logger = service_logger()
    monkeypatch.setattr(logger.registered_handler, "stream", CurrentStdout())
    logger.info("fine")
    logger.warning("look here")
    info, warning = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert "location" not in info
    assert warning["location"].startswith("test_a_warning_keeps_its_location_an_info_line_does_not:")


def test_a_function_process_flushing_no_metric_prints_nothing() -> None:
    """Powertools warns on stderr when an invocation flushes no metric: since a processed record
    has none, that would be a plain line in the log of every new environment. A process as Lambda
    runs it (Python's default warning filters) prints nothing."""
    code = (
        "import pipeline.observability\n"
        "from aws_lambda_powertools import Metrics\n"
        "Metrics(namespace='Pipeline', service='store').flush_metrics()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("PYTHONWARNINGS", None)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert (done.stdout, done.stderr) == ("", "")
