"""dlq list / peek / redrive against moto SQS queues named by the stack outputs."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from ops.text import format_age
from pipeline import aws
from pipeline.envelope import Envelope
from tests.unit.ops.support import (
    CUSTOMER_PHONE,
    DEPLOYED_CONSUMERS,
    Deployed,
    dead_letter,
    depth,
    drain,
    envelope_body,
)


def rows(output: str) -> dict[str, list[str]]:
    """The table's rows by consumer (the table ends at the first blank line)."""
    return {line.split()[0]: line.split() for line in output.split("\n\n")[0].splitlines()[1:]}


def shift_now(monkeypatch: pytest.MonkeyPatch, delta: timedelta) -> None:
    """Make `dlq list` believe it runs `delta` later, so sampled messages have an age."""

    class Later(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Later:  # type: ignore[override]
            return datetime.now(tz) + delta  # type: ignore[return-value]

    monkeypatch.setattr("ops.dlq.datetime", Later)


def test_list_shows_depth_and_sampled_age_per_deployed_consumer(
    deployed: Deployed, run, monkeypatch: pytest.MonkeyPatch
):
    for update_id in (1, 2, 3):
        dead_letter(deployed.dlq_urls["crm"], update_id)
    boto3.client("sqs").send_message(
        QueueUrl=deployed.delivery_dlq_urls["store"], MessageBody=envelope_body(9)
    )
    shift_now(monkeypatch, timedelta(hours=2, minutes=5, seconds=10))

    result = run("dlq", "list", "--sample")

    assert result.code == 0, result.err
    table = rows(result.out)
    assert set(table) == set(DEPLOYED_CONSUMERS)  # `ai` is not deployed: not listed
    assert table["crm"][1:] == ["3", "0", "2h05m", "sample", "0", "-"]
    assert table["store"][1:] == ["0", "0", "-", "-", "1", "-"]
    assert "sample: oldest of up to 10 messages" in result.out
    # Sampling does not hide anything.
    assert depth(deployed.dlq_urls["crm"]) == 3


def test_list_receives_nothing_unless_asked_so_peek_shows_the_messages_own_receive_count(
    deployed: Deployed, run
):
    dead_letter(deployed.dlq_urls["crm"], 1)

    listed = run("dlq", "list")
    peeked = run("dlq", "peek", "crm", "--json")

    assert listed.code == 0, listed.err
    assert rows(listed.out)["crm"][1:5] == ["1", "0", "?", "-"]  # no CloudWatch datapoint, no sample
    assert "?: not read without --sample" in listed.out
    [message] = json.loads(peeked.out)["messages"]
    assert message["receive_count"] == 1  # peek's own receive, and nothing before it


def test_list_prefers_the_cloudwatch_age_metric(deployed: Deployed, run):
    dead_letter(deployed.dlq_urls["store"], 1)
    boto3.client("cloudwatch").put_metric_data(
        Namespace="AWS/SQS",
        MetricData=[
            {
                "MetricName": "ApproximateAgeOfOldestMessage",
                "Dimensions": [{"Name": "QueueName", "Value": "pipeline-store-dlq"}],
                "Value": 93_600,
                "Unit": "Seconds",
            }
        ],
    )

    result = run("dlq", "list")

    assert result.code == 0, result.err
    assert rows(result.out)["store"][1:5] == ["1", "0", "1d02h", "cloudwatch"]
    assert "sample:" not in result.out


def test_peek_prints_ids_and_reason_and_leaves_messages_visible(deployed: Deployed, run):
    dlq = deployed.dlq_urls["crm"]
    dead_letter(dlq, 101, reason="retries exhausted after 8 attempts: CRM 503")
    boto3.client("sqs").send_message(QueueUrl=dlq, MessageBody="not json at all")

    result = run("dlq", "peek", "crm")

    assert result.code == 0, result.err
    assert "  event_id: telegram:default:101" in result.out.splitlines()
    assert "  type: message" in result.out.splitlines()
    assert "  correlation_id: corr-101" in result.out.splitlines()
    assert "  dead_letter_reason: retries exhausted after 8 attempts: CRM 503" in result.out.splitlines()
    assert "  note: body is not JSON (15 bytes)" in result.out.splitlines()
    assert "2 message(s) shown" in result.out
    # Personal data in the payload is never printed.
    assert CUSTOMER_PHONE not in result.out
    assert "Ann" not in result.out
    # Released at once: a plain receive gets both again right away.
    assert len(drain(dlq)) == 2


def test_peek_unwraps_sns_notifications(deployed: Deployed, run):
    notification = {"Type": "Notification", "MessageId": "m-1", "Message": envelope_body(7)}
    boto3.client("sqs").send_message(
        QueueUrl=deployed.dlq_urls["store"], MessageBody=json.dumps(notification)
    )

    result = run("dlq", "peek", "store")

    assert "  event_id: telegram:default:7" in result.out.splitlines()


def test_peek_respects_max(deployed: Deployed, run):
    for update_id in range(12):
        dead_letter(deployed.dlq_urls["crm"], update_id)

    result = run("dlq", "peek", "crm", "--max", "11")

    assert result.out.count("\nmessage ") + result.out.startswith("message ") == 11
    assert depth(deployed.dlq_urls["crm"]) == 12


def test_peek_unknown_consumer_is_a_clear_error(deployed: Deployed, run):
    result = run("dlq", "peek", "ai")

    assert result.code == 2
    assert result.err.startswith("error: no consumer 'ai'")
    assert "crm" in result.err


def test_redrive_moves_everything_back_with_fallback_under_moto(deployed: Deployed, run):
    dlq, queue = deployed.dlq_urls["crm"], deployed.queue_urls["crm"]
    for update_id in range(23):  # more than two SQS batches
        dead_letter(dlq, update_id)

    result = run("dlq", "redrive", "--yes", "crm")

    assert result.code == 0, result.err
    assert "StartMessageMoveTask is not available here" in result.out
    assert "moved 23 message(s)" in result.out
    assert depth(dlq) == 0
    moved = drain(queue)
    event_ids = {Envelope.from_json(m["Body"]).event_id for m in moved}
    assert event_ids == {f"telegram:default:{i}" for i in range(23)}
    # Routing attributes travel with the message, as with SQS's own move task.
    assert {m["MessageAttributes"]["type"]["StringValue"] for m in moved} == {"message"}


def test_redrive_uses_the_move_task_where_sqs_offers_it(
    deployed: Deployed, run, monkeypatch: pytest.MonkeyPatch
):
    dead_letter(deployed.dlq_urls["crm"], 1)
    sqs = aws.client("sqs")
    started: list[dict[str, str]] = []

    def start_message_move_task(**kwargs: str) -> dict[str, str]:
        started.append(kwargs)
        return {"TaskHandle": "handle-1"}

    def list_message_move_tasks(**kwargs: Any) -> dict[str, Any]:
        return {
            "Results": [
                {"TaskHandle": "handle-1", "Status": "COMPLETED", "ApproximateNumberOfMessagesMoved": 1}
            ]
        }

    monkeypatch.setattr(sqs, "start_message_move_task", start_message_move_task)
    monkeypatch.setattr(sqs, "list_message_move_tasks", list_message_move_tasks)

    result = run("dlq", "redrive", "--yes", "crm")

    assert result.code == 0, result.err
    arn = "arn:aws:sqs:eu-central-1:123456789012:"
    assert started == [{"SourceArn": arn + "pipeline-crm-dlq", "DestinationArn": arn + "pipeline-crm"}]
    assert "moved 1 message(s)" in result.out
    assert "not available" not in result.out
    assert depth(deployed.dlq_urls["crm"]) == 1  # the stand-in task moved nothing itself


def test_redrive_does_not_fall_back_on_a_real_refusal(
    deployed: Deployed, run, monkeypatch: pytest.MonkeyPatch
):
    dead_letter(deployed.dlq_urls["crm"], 1)
    sqs = aws.client("sqs")

    def denied(**kwargs: str) -> None:
        raise ClientError(
            {"Error": {"Code": "AccessDenied", "Message": "not allowed"}}, "StartMessageMoveTask"
        )

    monkeypatch.setattr(sqs, "start_message_move_task", denied)

    result = run("dlq", "redrive", "--yes", "crm")

    assert result.code == 2
    assert result.err == "error: AWS StartMessageMoveTask failed: AccessDenied: not allowed\n"
    assert depth(deployed.dlq_urls["crm"]) == 1
    assert depth(deployed.queue_urls["crm"]) == 0


def test_ages_are_formatted_for_humans() -> None:
    assert [format_age(s) for s in (None, 0, 59, 61, 3600 + 120, 90_000)] == [
        "-",
        "0s",
        "59s",
        "1m01s",
        "1h02m",
        "1d01h",
    ]


def test_redrive_message_id_moves_that_message_only(deployed: Deployed, run):
    dlq, queue = deployed.dlq_urls["crm"], deployed.queue_urls["crm"]
    for update_id in (1, 2, 3):
        dead_letter(dlq, update_id)
    shown = json.loads(run("dlq", "peek", "crm", "--json").out)["messages"]
    [wanted] = [m["message_id"] for m in shown if m["event_id"] == "telegram:default:2"]

    dry = run("dlq", "redrive", "crm", "--message-id", wanted, "--dry-run")
    assert f"dry run: would move message {wanted} of the crm DLQ" in dry.out
    assert depth(dlq) == 3
    result = run("dlq", "redrive", "crm", "--message-id", wanted, "--yes")

    assert result.code == 0, result.err
    assert f"moved message {wanted} from the crm DLQ to its queue" in result.out
    [moved] = drain(queue)
    assert Envelope.from_json(moved["Body"]).event_id == "telegram:default:2"
    assert depth(dlq) == 2  # the others passed over are visible again at once
    gone = run("dlq", "redrive", "crm", "--message-id", wanted, "--yes")
    assert gone.code == 2
    assert f"the crm DLQ holds no message '{wanted}'" in gone.err
