"""`outputs`: every stack output an operator needs, in a fixed order, or one bare value for scripts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from moto import mock_aws

from infra.outputs import OutputKey
from tests.unit.ops.support import TELEGRAM_SECRET, Deployed, create_resources, create_stack

ALARM_TOPIC = "arn:aws:sns:eu-central-1:123456789012:TelegramCrmPipeline-Alarms"
SMS_EVENTS_TOPIC = "arn:aws:sns:eu-central-1:123456789012:TelegramCrmPipeline-SmsEvents"
FAILED_DLQ = "https://sqs.eu-central-1.amazonaws.com/123456789012/sms-events-failed"
UNDELIVERED_DLQ = "https://sqs.eu-central-1.amazonaws.com/123456789012/sms-events-undelivered"


@pytest.fixture
def deployed_with_monitoring_and_sms_events() -> Iterator[Deployed]:
    with mock_aws():
        resources = create_resources()
        resources.outputs.update(
            {
                OutputKey.ALARM_TOPIC_ARN: ALARM_TOPIC,
                OutputKey.DASHBOARD_NAME: "TelegramCrmPipeline",
                OutputKey.SMS_EVENTS_TOPIC_ARN: SMS_EVENTS_TOPIC,
                OutputKey.SMS_CONFIGURATION_SET: "TelegramCrmPipeline-sms",
                OutputKey.sms_events_dlq_url("failed"): FAILED_DLQ,
                OutputKey.sms_events_dlq_url("undelivered"): UNDELIVERED_DLQ,
                "SomethingNewer": "from a later version",
            }
        )
        create_stack(resources)
        yield resources


def test_outputs_lists_every_output_in_order_and_flags_unknown_ones(
    deployed_with_monitoring_and_sms_events: Deployed, run
) -> None:
    result = run("outputs")

    assert result.code == 0, result.err
    known, _, unknown = result.out.partition("\n\n")
    lines = [line.split() for line in known.splitlines()]
    shown = {key: value for key, value in lines}
    assert shown[OutputKey.ALARM_TOPIC_ARN] == ALARM_TOPIC
    assert shown[OutputKey.SMS_EVENTS_TOPIC_ARN] == SMS_EVENTS_TOPIC
    assert shown["SmsEventsFailedDlqUrl"] == FAILED_DLQ
    assert shown["SmsEventsUndeliveredDlqUrl"] == UNDELIVERED_DLQ
    assert shown[OutputKey.queue_url("crm")] == deployed_with_monitoring_and_sms_events.queue_urls["crm"]
    assert shown[OutputKey.EVENTS_TOPIC_ARN].startswith("arn:aws:sns:")
    assert [key for key, _ in lines] == [key for key in OutputKey.every() if key in shown]
    assert "SomethingNewer" in unknown and "SomethingNewer" not in shown
    # Secret ids, never secret values.
    assert TELEGRAM_SECRET not in result.out


def test_outputs_with_a_key_prints_just_its_value(
    deployed_with_monitoring_and_sms_events: Deployed, run
) -> None:
    result = run("outputs", OutputKey.ALARM_TOPIC_ARN)

    assert (result.code, result.out) == (0, f"{ALARM_TOPIC}\n")


def test_an_output_the_stack_does_not_have_is_one_line_and_exit_2(deployed: Deployed, run) -> None:
    result = run("outputs", OutputKey.SMS_EVENTS_TOPIC_ARN)

    assert result.code == 2
    assert result.out == ""
    assert result.err.startswith("error: ") and "'SmsEventsTopicArn'" in result.err
