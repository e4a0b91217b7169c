"""Alarms, the alarm topic and the dashboard.

Expected alarm counts are derived from what the stack built (so from the registry): a new
consumer is covered without touching these tests.
"""

from __future__ import annotations

import itertools
import json
import random
from collections import Counter
from typing import Any

import pytest
from aws_lambda_powertools import Metrics
from runtime_modules import imported
from synthesized import ALARM_EMAIL, BASE_CONTEXT, Synthesized
from template_queries import of_type, props, ref_name

from infra.application import build_app
from infra.constructs.monitoring import (
    DASHBOARD_NAME,
    ESSENTIAL_ALARMS,
    QUEUE_AGE_SLACK_SECONDS,
    SMS_FAILED_RATE_PERCENT,
    UNAUTHORIZED_SPIKE,
    AlarmKind,
    WatchedAlarm,
    max_message_age_seconds,
)
from infra.prices import FREE_DASHBOARD_METRICS, PRICES, alarm_metrics, dashboard_metrics
from pipeline.registry import CONSUMERS, Consumer
from pipeline.worker import backoff_seconds

GTE = "GreaterThanOrEqualToThreshold"
GT = "GreaterThanThreshold"


def _alarm(synth: Synthesized, watched: WatchedAlarm) -> dict[str, Any]:
    return props(synth.resources, synth.logical_id(watched.alarm))


def _of_kind(synth: Synthesized, kind: AlarmKind) -> list[WatchedAlarm]:
    return [watched for watched in synth.stack.monitoring.alarms if watched.kind is kind]


def _dimensions(metric: dict[str, Any]) -> dict[str, str]:
    return {d["Name"]: ref_name(d["Value"]) for d in metric.get("Dimensions", [])}


@pytest.fixture(params=["default_synth", "full_synth"])
def synth(request: pytest.FixtureRequest) -> Synthesized:
    synthesized: Synthesized = request.getfixturevalue(request.param)
    return synthesized


def _functions(synth: Synthesized) -> list[Any]:
    stack = synth.stack
    sms = [*stack.sms.functions] if stack.sms else []
    sweep = [stack.crm_sweep.function] if stack.crm_sweep else []
    return [stack.ingress.webhook, *(p.worker for p in stack.pipelines.values()), *sms, *sweep]


def _dlqs(synth: Synthesized) -> list[Any]:
    stack = synth.stack
    dlqs = [q for p in stack.pipelines.values() for q in (p.dlq, p.delivery_dlq)]
    return dlqs + (list(stack.sms.delivery_events_dlqs.values()) if stack.sms else [])


# -- how many of each ---------------------------------------------------------------------------------
def test_every_dlq_queue_function_and_the_api_have_their_alarms(synth: Synthesized) -> None:
    stack = synth.stack
    counts = Counter(watched.kind for watched in stack.monitoring.alarms)
    expected = {
        AlarmKind.DLQ_NOT_EMPTY: 2 * len(stack.consumers)
        + (2 if stack.sms and stack.sms.delivery_events else 0),
        AlarmKind.QUEUE_AGE: len(stack.consumers),
        AlarmKind.FUNCTION_ERRORS: len(_functions(synth)),
        AlarmKind.LAMBDA_THROTTLES: 1,
        AlarmKind.API_5XX: 1,
        AlarmKind.UNAUTHORIZED_SPIKE: 1,
        AlarmKind.INVALID_PHONE: 1,
        AlarmKind.SMS_UNKNOWN_AGE: 1,
        AlarmKind.SMS_UNKNOWN_PAST_DEADLINE: 1,
        AlarmKind.SMS_FAILED_RATE: 1,
        AlarmKind.SMS_EXPIRED: 1,
    }
    paused = sum(len(c.account_causes) for c in stack.consumers)
    if paused:
        expected[AlarmKind.ACCOUNT_PAUSED] = paused
    publishing = [c for c in stack.consumers if c.publishes]
    if publishing:
        expected[AlarmKind.CRM_SOURCE_MISCONFIGURED] = len(publishing)
        expected[AlarmKind.CRM_TRANSITION_TOO_OLD] = len(publishing)
        expected[AlarmKind.CRM_ORDER_HIDDEN] = len(publishing)
    if stack.crm_sweep is not None:
        expected[AlarmKind.CRM_SWEEP_BEHIND] = 1
    assert counts == expected
    assert len(of_type(synth.resources, "AWS::CloudWatch::Alarm")) == sum(expected.values())


def _free(unit: str) -> int:
    (free,) = [price.free_units for price in PRICES if price.unit == unit]
    return free


def _alarm_metrics(synth: Synthesized) -> int:
    return sum(alarm_metrics(alarm) for alarm in of_type(synth.resources, "AWS::CloudWatch::Alarm").values())


def test_essential_alarms_watch_each_consumer_dlq_webhook_errors_and_sms_unknowns_only(
    essential_synth: Synthesized,
) -> None:
    stack = essential_synth.stack
    assert stack.settings.alarms == "essential"
    watched = {(w.kind, w.subject) for w in stack.monitoring.alarms}
    assert watched == {
        *((AlarmKind.DLQ_NOT_EMPTY, f"{name}-dlq") for name in stack.pipelines),
        (AlarmKind.FUNCTION_ERRORS, "webhook"),
        (AlarmKind.SMS_UNKNOWN_AGE, "sms"),
        (AlarmKind.SMS_UNKNOWN_PAST_DEADLINE, "sms"),
    }
    assert {kind for kind, _ in watched} == set(ESSENTIAL_ALARMS)
    # Each consumer DLQ alarm is the full profile's own (same metric, threshold, missing data).
    for alarm_of in _of_kind(essential_synth, AlarmKind.DLQ_NOT_EMPTY):
        alarm = _alarm(essential_synth, alarm_of)
        assert (alarm["MetricName"], alarm["Threshold"], alarm["TreatMissingData"]) == (
            "ApproximateNumberOfMessagesVisible",
            1,
            "ignore",
        )
    assert len(of_type(essential_synth.resources, "AWS::CloudWatch::Alarm")) == len(watched)


def test_the_alarm_metrics_billed_per_profile(
    default_synth: Synthesized, essential_synth: Synthesized
) -> None:
    """Essential fits the account's free alarm metrics; full bills what its alarms read (each
    alarm one metric but the two on metric math), the throttles of every function in one."""
    assert _alarm_metrics(essential_synth) <= _free("alarm metric")
    stack = default_synth.stack
    expressions = {AlarmKind.UNAUTHORIZED_SPIKE: 2, AlarmKind.SMS_FAILED_RATE: 6, AlarmKind.SMS_EXPIRED: 2}
    assert _alarm_metrics(default_synth) == sum(expressions.get(w.kind, 1) for w in stack.monitoring.alarms)


def test_every_alarm_notifies_the_alarm_topic_on_alarm_and_on_recovery(synth: Synthesized) -> None:
    topic_id = synth.logical_id(synth.stack.monitoring.alarm_topic.topic)
    for alarm in of_type(synth.resources, "AWS::CloudWatch::Alarm").values():
        properties = alarm["Properties"]
        assert [ref_name(a) for a in properties["AlarmActions"]] == [topic_id]
        assert [ref_name(a) for a in properties["OKActions"]] == [topic_id]
        assert properties["EvaluationPeriods"] == 1
        assert properties["AlarmDescription"]


# -- each kind -------------------------------------------------------------------------------------
def test_each_dlq_alarms_on_its_first_message_and_stays_red_while_sqs_is_silent(synth: Synthesized) -> None:
    watched = _of_kind(synth, AlarmKind.DLQ_NOT_EMPTY)
    watched_queues = set()
    for alarm_watch in watched:
        alarm = _alarm(synth, alarm_watch)
        assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SQS", "ApproximateNumberOfMessagesVisible")
        assert (alarm["Statistic"], alarm["Period"]) == ("Maximum", 300)
        assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (GTE, 1)
        # SQS stops publishing for a queue idle 6 h: a forgotten message must not clear the alarm.
        assert alarm["TreatMissingData"] == "ignore"
        watched_queues.add(_dimensions(alarm)["QueueName"])
    assert watched_queues == {synth.logical_id(q) for q in _dlqs(synth)}


def test_each_queue_alarms_when_its_oldest_message_outlives_the_consumers_retries(synth: Synthesized) -> None:
    by_queue = {synth.logical_id(p.queue): p.consumer for p in synth.stack.pipelines.values()}
    seen = set()
    for watched in _of_kind(synth, AlarmKind.QUEUE_AGE):
        alarm = _alarm(synth, watched)
        queue_id = _dimensions(alarm)["QueueName"]
        consumer = by_queue[queue_id]
        assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/SQS", "ApproximateAgeOfOldestMessage")
        assert alarm["Statistic"] == "Maximum"
        assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (GT, max_message_age_seconds(consumer))
        assert alarm["TreatMissingData"] == "notBreaching"
        seen.add(queue_id)
    assert seen == set(by_queue)


class _Longest(random.Random):
    """Backoff's random part at its maximum: the longest delay the worker can choose."""

    def uniform(self, a: float, b: float) -> float:
        return b


@pytest.mark.parametrize("consumer", CONSUMERS, ids=lambda c: c.name)
def test_the_age_threshold_covers_every_delay_the_worker_can_choose_and_no_more_than_slack(
    consumer: Consumer,
) -> None:
    """What the worker can make a healthy message wait (pipeline.worker_settings.backoff_seconds at its
    longest, before each redelivery, plus a run per delivery) stays under the threshold."""
    retry = consumer.retry
    longest = sum(backoff_seconds(retry, count, _Longest()) for count in range(1, retry.max_receive_count))
    runs = retry.max_receive_count * consumer.timeout_seconds
    threshold = max_message_age_seconds(consumer)
    assert longest + runs <= threshold <= longest + runs + QUEUE_AGE_SLACK_SECONDS + retry.max_receive_count


def test_each_function_alarms_on_any_error(synth: Synthesized) -> None:
    function_ids = {synth.logical_id(f.function) for f in _functions(synth)}
    watched_functions = set()
    for watched in _of_kind(synth, AlarmKind.FUNCTION_ERRORS):
        alarm = _alarm(synth, watched)
        assert (alarm["Namespace"], alarm["MetricName"]) == ("AWS/Lambda", "Errors")
        assert (alarm["Statistic"], alarm["Period"]) == ("Sum", 300)
        assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (GT, 0)
        assert alarm["TreatMissingData"] == "notBreaching"
        watched_functions.add(_dimensions(alarm)["FunctionName"])
    assert watched_functions == function_ids


def test_any_throttle_of_any_function_alarms_through_the_accounts_throttles(synth: Synthesized) -> None:
    """One alarm metric covers every function's throttles only while none reserves concurrency:
    then Lambda throttles one only when the account's regional concurrency runs out, and the
    account-wide Throttles (no dimension) counts it. A reserved concurrency would need its own."""
    (watched,) = _of_kind(synth, AlarmKind.LAMBDA_THROTTLES)
    alarm = _alarm(synth, watched)
    assert (alarm["Namespace"], alarm["MetricName"], alarm.get("Dimensions", [])) == (
        "AWS/Lambda",
        "Throttles",
        [],
    )
    assert (alarm["Statistic"], alarm["Period"]) == ("Sum", 300)
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (GT, 0)
    functions = of_type(synth.resources, "AWS::Lambda::Function").values()
    assert [f for f in functions if "ReservedConcurrentExecutions" in f["Properties"]] == []


def test_the_api_alarms_on_any_5xx_of_its_stage(synth: Synthesized) -> None:
    (watched,) = _of_kind(synth, AlarmKind.API_5XX)
    alarm = _alarm(synth, watched)
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == ("AWS/ApiGateway", "5xx", "Sum")
    assert _dimensions(alarm) == {"ApiId": synth.logical_id(synth.stack.ingress.api), "Stage": "$default"}
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (GT, 0)


def _expression_alarm(
    synth: Synthesized, kind: AlarmKind
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    (watched,) = _of_kind(synth, kind)
    alarm = _alarm(synth, watched)
    return alarm, {m["Id"]: m for m in alarm["Metrics"]}


def test_a_burst_of_unauthorized_requests_on_either_route_alarms(synth: Synthesized) -> None:
    alarm, metrics = _expression_alarm(synth, AlarmKind.UNAUTHORIZED_SPIKE)
    (result,) = [m for m in metrics.values() if m.get("ReturnData", True)]
    sources = ["telegram", "crm"]
    if synth.stack.settings.bitrix24_stages:
        sources.append("bitrix24")
    if synth.stack.settings.amocrm_statuses:
        sources.append("amocrm")
    assert result["Expression"] == " + ".join(f"FILL({source}, 0)" for source in sources)
    for source in sources:
        stat = metrics[source]["MetricStat"]
        assert (stat["Metric"]["Namespace"], stat["Metric"]["MetricName"]) == (
            "TelegramCrmPipeline",
            "EventsRejected",
        )
        assert _dimensions(stat["Metric"]) == {
            "service": "webhook",
            "source": source,
            "reason": "unauthorized",
        }
        assert (stat["Stat"], stat["Period"]) == ("Sum", 300)
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (GTE, UNAUTHORIZED_SPIKE)
    assert alarm["TreatMissingData"] == "notBreaching"


def test_a_crm_event_refused_for_its_phone_alarms_at_once(synth: Synthesized) -> None:
    (watched,) = _of_kind(synth, AlarmKind.INVALID_PHONE)
    alarm = _alarm(synth, watched)
    assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"], alarm["Period"]) == (
        "TelegramCrmPipeline",
        "EventsRejected",
        "Sum",
        300,
    )
    assert _dimensions(alarm) == {"service": "webhook", "source": "crm", "reason": "invalid_phone"}
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (GTE, 1)
    assert alarm["TreatMissingData"] == "notBreaching"


def _alarmed_webhook_metric(synth: Synthesized, kind: AlarmKind, source: str) -> dict[str, Any]:
    """The metric an alarm on the webhook's rejections watches (for `source`, in an expression)."""
    if kind is AlarmKind.UNAUTHORIZED_SPIKE:
        _, metrics = _expression_alarm(synth, kind)
        metric: dict[str, Any] = metrics[source]["MetricStat"]["Metric"]
        return metric
    (watched,) = _of_kind(synth, kind)
    return _alarm(synth, watched)


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        (AlarmKind.UNAUTHORIZED_SPIKE, "telegram"),
        (AlarmKind.UNAUTHORIZED_SPIKE, "crm"),
        (AlarmKind.INVALID_PHONE, "crm"),
    ],
)
def test_an_alarm_on_rejections_counts_exactly_what_the_webhook_emits(
    default_synth: Synthesized, monkeypatch: pytest.MonkeyPatch, kind: AlarmKind, source: str
) -> None:
    webhook_id = default_synth.logical_id(default_synth.stack.ingress.webhook.function)
    env = props(default_synth.resources, webhook_id)["Environment"]["Variables"]
    for name in ("POWERTOOLS_SERVICE_NAME", "POWERTOOLS_METRICS_NAMESPACE"):
        monkeypatch.setenv(name, env[name])
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    alarmed = _alarmed_webhook_metric(default_synth, kind, source)
    with imported("webhook.ingest") as (ingest,):
        # What a 401 records, or a refused phone.
        reason = "unauthorized" if kind is AlarmKind.UNAUTHORIZED_SPIKE else ingest.INVALID_PHONE_REASON
        shared = Metrics()
        shared.clear_metrics()
        try:
            ingest.record_rejection(source, reason)
            emitted = Metrics().serialize_metric_set()
        finally:
            shared.clear_metrics()
    (directive,) = emitted["_aws"]["CloudWatchMetrics"]
    assert directive["Namespace"] == alarmed["Namespace"]
    assert [m["Name"] for m in directive["Metrics"]] == [alarmed["MetricName"]]
    assert {name: emitted[name] for name in directive["Dimensions"][0]} == _dimensions(alarmed)


def test_sms_unknowns_alarm_when_older_than_the_setting_or_past_the_deadline(
    default_synth: Synthesized, custom_synth: Synthesized
) -> None:
    for synth, minutes in ((default_synth, 60), (custom_synth, 30)):
        reconciler = {"service": "reconciler"}
        (age,) = _of_kind(synth, AlarmKind.SMS_UNKNOWN_AGE)
        alarm = _alarm(synth, age)
        assert (alarm["Namespace"], alarm["MetricName"]) == (
            "TelegramCrmPipeline",
            "SmsUnknownOldestAgeSeconds",
        )
        assert (_dimensions(alarm), alarm["Statistic"]) == (reconciler, "Maximum")
        assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (GTE, minutes * 60)
        (deadline,) = _of_kind(synth, AlarmKind.SMS_UNKNOWN_PAST_DEADLINE)
        alarm = _alarm(synth, deadline)
        assert alarm["MetricName"] == "SmsUnknownPastDeadline"
        assert _dimensions(alarm) == reconciler
        assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (GTE, 1)


def test_a_high_share_of_failed_sms_alarms(synth: Synthesized) -> None:
    alarm, metrics = _expression_alarm(synth, AlarmKind.SMS_FAILED_RATE)
    (result,) = [m for m in metrics.values() if m.get("ReturnData", True)]
    total = "(failed + accepted + unknown)"
    assert result["Expression"] == f"IF({total} > 0, 100 * failed / {total}, 0)"
    for name, metric_name in (
        ("failed", "SmsFailed"),
        ("accepted", "SmsAccepted"),
        ("unknown", "SmsUnknown"),
    ):
        # The worker's sends and the reconciler's (operator resends, orphans) alike.
        worker, reconciler = f"{metric_name.lower()}_worker", f"{metric_name.lower()}_reconciler"
        assert metrics[name]["Expression"] == f"FILL({worker}, 0) + FILL({reconciler}, 0)"
        for raw_id, dimensions in (
            # pipeline.worker adds `consumer` to everything the sms worker emits; Powertools `service`.
            (worker, {"consumer": "sms", "service": "sms"}),
            (reconciler, {"service": "reconciler"}),
        ):
            stat = metrics[raw_id]["MetricStat"]
            assert stat["Metric"]["MetricName"] == metric_name
            assert _dimensions(stat["Metric"]) == dimensions
            assert (stat["Stat"], stat["Period"]) == ("Sum", 900)
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (GT, SMS_FAILED_RATE_PERCENT)


def test_an_sms_ended_expired_alarms_from_the_first_in_the_full_profile_only(
    synth: Synthesized, essential_synth: Synthesized
) -> None:
    """Issue 43: `expired` is an outcome, not a loss, but a customer not texted (an outage longer
    than the age, a late redrive): counted by the worker and the reconciler alike, alarmed from
    the first in `full`; `essential` stays within the free alarm metrics without it."""
    alarm, metrics = _expression_alarm(synth, AlarmKind.SMS_EXPIRED)
    (result,) = [m for m in metrics.values() if m.get("ReturnData", True)]
    assert result["Expression"] == "FILL(smsexpired_worker, 0) + FILL(smsexpired_reconciler, 0)"
    for raw_id, dimensions in (
        ("smsexpired_worker", {"consumer": "sms", "service": "sms"}),
        ("smsexpired_reconciler", {"service": "reconciler"}),
    ):
        stat = metrics[raw_id]["MetricStat"]
        assert (stat["Metric"]["MetricName"], _dimensions(stat["Metric"])) == ("SmsExpired", dimensions)
        assert stat["Stat"] == "Sum"
    assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (GTE, 1)
    assert alarm["TreatMissingData"] == "notBreaching"
    assert "expired" in alarm["AlarmDescription"]
    assert not _of_kind(essential_synth, AlarmKind.SMS_EXPIRED)


# -- the alarm topic ----------------------------------------------------------------------------------
def test_alarm_topic_is_encrypted_tls_only_and_open_to_this_accounts_alarms_only(synth: Synthesized) -> None:
    topic = synth.stack.monitoring.alarm_topic
    topic_id, key_id = synth.logical_id(topic.topic), synth.logical_id(topic.key)
    assert ref_name(props(synth.resources, topic_id)["KmsMasterKeyId"]) == key_id
    assert props(synth.resources, key_id)["EnableKeyRotation"] is True
    (policy,) = [
        p["Properties"]["PolicyDocument"]["Statement"]
        for p in of_type(synth.resources, "AWS::SNS::TopicPolicy").values()
        if [ref_name(t) for t in p["Properties"]["Topics"]] == [topic_id]
    ]
    (deny,) = [s for s in policy if s["Effect"] == "Deny"]
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    (allow,) = [s for s in policy if s["Effect"] == "Allow"]
    assert allow["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    assert allow["Action"] == "sns:Publish"
    assert allow["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
    assert ref_name(allow["Condition"]["ArnLike"]["aws:SourceArn"]) == (
        "arn:${AWS::Partition}:cloudwatch:${AWS::Region}:${AWS::AccountId}:alarm:*"
    )
    (key_statement,) = [
        s
        for s in props(synth.resources, key_id)["KeyPolicy"]["Statement"]
        if s["Principal"] == {"Service": "cloudwatch.amazonaws.com"}
    ]
    assert set(key_statement["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
    outputs = synth.template.to_json()["Outputs"]
    assert ref_name(outputs["AlarmTopicArn"]["Value"]) == topic_id


def test_alarms_are_emailed_only_when_an_address_is_given(
    default_synth: Synthesized, full_synth: Synthesized
) -> None:
    def email_subscriptions(synth: Synthesized) -> list[dict[str, Any]]:
        topic_id = synth.logical_id(synth.stack.monitoring.alarm_topic.topic)
        return [
            s["Properties"]
            for s in of_type(synth.resources, "AWS::SNS::Subscription").values()
            if ref_name(s["Properties"]["TopicArn"]) == topic_id
        ]

    assert email_subscriptions(default_synth) == []
    (subscription,) = email_subscriptions(full_synth)
    assert (subscription["Protocol"], subscription["Endpoint"]) == ("email", ALARM_EMAIL)


# -- the dashboard ----------------------------------------------------------------------------------
def _dashboard_widgets(synth: Synthesized) -> list[dict[str, Any]]:
    """The widgets of every dashboard of the stack."""
    widgets: list[dict[str, Any]] = []
    for dashboard in of_type(synth.resources, "AWS::CloudWatch::Dashboard").values():
        # References render as ${LogicalId} (template_queries.ref_name), so the body parses as JSON.
        widgets += json.loads(ref_name(dashboard["Properties"]["DashboardBody"]))["widgets"]
    return widgets


def test_the_dashboards_are_free_tier_ones_each_within_its_metrics(synth: Synthesized) -> None:
    """At most the free tier's 3 dashboards, each referencing at most 50 metrics (a SEARCH counted
    at its reserve), so an account with no other dashboard pays nothing for them."""
    dashboards = of_type(synth.resources, "AWS::CloudWatch::Dashboard").values()
    counts = [dashboard_metrics(dashboard) for dashboard in dashboards]
    assert 1 <= len(counts) <= _free("dashboard")
    assert max(counts) <= FREE_DASHBOARD_METRICS
    # Packed, not spread: no two dashboards would fit on one.
    assert all(a + b > FREE_DASHBOARD_METRICS for a, b in itertools.pairwise(counts))


def _graphed(widgets: list[dict[str, Any]]) -> list[tuple[str, str, dict[str, str]]]:
    """(namespace, metric name, dimensions) of every plain metric on the dashboard."""
    found = []
    for widget in widgets:
        for line in widget.get("properties", {}).get("metrics", []):
            names = [part for part in line if isinstance(part, str)]
            if len(names) >= 2:
                namespace, metric, *pairs = names
                found.append((namespace, metric, dict(zip(pairs[::2], pairs[1::2], strict=True))))
    return found


def test_dashboard_shows_every_queue_dlq_and_function(synth: Synthesized) -> None:
    graphed = _graphed(_dashboard_widgets(synth))
    queues = {
        d["QueueName"]
        for ns, m, d in graphed
        if ns == "AWS/SQS" and m == "ApproximateNumberOfMessagesVisible"
    }
    ages = {
        d["QueueName"] for ns, m, d in graphed if ns == "AWS/SQS" and m == "ApproximateAgeOfOldestMessage"
    }
    pipelines = synth.stack.pipelines.values()
    assert queues == {
        "${" + synth.logical_id(q) + "}" for q in [*(p.queue for p in pipelines), *_dlqs(synth)]
    }
    assert ages == {"${" + synth.logical_id(p.queue) + "}" for p in pipelines}
    functions = {"${" + synth.logical_id(f.function) + "}" for f in _functions(synth)}
    for metric in ("Errors", "Throttles", "Duration"):
        assert {d["FunctionName"] for ns, m, d in graphed if ns == "AWS/Lambda" and m == metric} == functions
    api = {m for ns, m, d in graphed if ns == "AWS/ApiGateway"}
    assert {"Count", "4xx", "5xx", "Latency"} <= api


def test_dashboard_shows_the_sms_states_and_every_alarm(synth: Synthesized) -> None:
    widgets = _dashboard_widgets(synth)
    graphed = _graphed(widgets)
    sms_metrics = {m for ns, m, d in graphed if ns == "TelegramCrmPipeline"}
    assert {"SmsAccepted", "SmsRefused", "SmsFailed", "SmsUnknown"} <= sms_metrics
    assert {"SmsUnknownCount", "SmsUnknownOldestAgeSeconds", "SmsDeliveryEvents"} <= sms_metrics
    (alarm_widget,) = [w for w in widgets if w["type"] == "alarm"]
    shown = {arn.split("${")[-1].rstrip("}") for arn in alarm_widget["properties"]["alarms"]}
    assert shown == {synth.logical_id(w.alarm) for w in synth.stack.monitoring.alarms}
    outputs = synth.template.to_json()["Outputs"]
    assert ref_name(outputs["DashboardName"]["Value"]) == synth.logical_id(synth.stack.monitoring.dashboard)


def test_dashboard_widgets_fit_the_grid(synth: Synthesized) -> None:
    for widget in _dashboard_widgets(synth):
        assert widget["x"] + widget["width"] <= 24


def test_the_dashboard_is_named_by_stack_and_region_so_two_regions_never_share_one(
    default_synth: Synthesized, monkeypatch: pytest.MonkeyPatch
) -> None:
    stack_name = default_synth.stack.stack_name
    # Environment-agnostic: the region CloudFormation deploys to; the second one ends in -2.
    deployed = [
        ref_name(props(default_synth.resources, default_synth.logical_id(dashboard))["DashboardName"])
        for dashboard in default_synth.stack.monitoring.dashboards
    ]
    assert deployed == [f"{stack_name}-${{AWS::Region}}", f"{stack_name}-${{AWS::Region}}-2"]
    names = []
    for region in ("eu-central-1", "us-east-1"):
        monkeypatch.setenv("CDK_DEFAULT_REGION", region)
        _, stack = build_app(BASE_CONTEXT, nag=False)
        dashboard = stack.monitoring.dashboard.node.default_child
        names.append(stack.resolve(dashboard.dashboard_name))  # type: ignore[union-attr]
    assert names == [f"{stack_name}-eu-central-1", f"{stack_name}-us-east-1"]
    assert all(DASHBOARD_NAME.match(name) for name in names)


def test_a_crm_source_that_cannot_become_an_order_event_alarms_at_once(full_synth: Synthesized) -> None:
    """`pipeline.crm.sources.misconfigured` counts CrmSourceMisconfigured with the worker's dimensions."""
    watched = _of_kind(full_synth, AlarmKind.CRM_SOURCE_MISCONFIGURED)
    assert sorted(w.subject for w in watched) == ["amocrm", "bitrix24"]
    for alarm_of in watched:
        alarm = _alarm(full_synth, alarm_of)
        assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == (
            "TelegramCrmPipeline",
            "CrmSourceMisconfigured",
            "Sum",
        )
        assert _dimensions(alarm) == {"service": alarm_of.subject, "consumer": alarm_of.subject}
        assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (GTE, 1)
        assert "redrive" in alarm["AlarmDescription"]


def test_a_paused_consumer_alarms_at_once_naming_its_cause(full_synth: Synthesized) -> None:
    """`pipeline.worker` counts AccountPaused{consumer, cause} (with Powertools' service) for each
    record a refusal of the whole account pauses: one alarm per consumer and cause it can meet."""
    watched = _of_kind(full_synth, AlarmKind.ACCOUNT_PAUSED)
    expected = {f"{c.name}:{cause}" for c in full_synth.stack.consumers for cause in c.account_causes}
    assert {w.subject for w in watched} == expected
    assert {"amocrm:unpaid", "bitrix24:blocked"} <= expected
    for alarm_of in watched:
        name, cause = alarm_of.subject.split(":")
        alarm = _alarm(full_synth, alarm_of)
        assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == (
            "TelegramCrmPipeline",
            "AccountPaused",
            "Sum",
        )
        assert _dimensions(alarm) == {"service": name, "consumer": name, "cause": cause}
        assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (GTE, 1)
        assert f"({cause}:" in alarm["AlarmDescription"] and "Fix:" in alarm["AlarmDescription"]


def test_a_crm_order_hidden_from_the_integration_alarms_at_once(full_synth: Synthesized) -> None:
    """`pipeline.crm.sources.hidden` counts CrmOrdersHidden with the worker's dimensions: an order
    the CRM leaves out of its lists for the integration's user is a lost SMS unless someone looks."""
    watched = _of_kind(full_synth, AlarmKind.CRM_ORDER_HIDDEN)
    assert sorted(w.subject for w in watched) == ["amocrm", "bitrix24"]
    for alarm_of in watched:
        alarm = _alarm(full_synth, alarm_of)
        assert (alarm["Namespace"], alarm["MetricName"], alarm["Statistic"]) == (
            "TelegramCrmPipeline",
            "CrmOrdersHidden",
            "Sum",
        )
        assert _dimensions(alarm) == {"service": alarm_of.subject, "consumer": alarm_of.subject}
        assert (alarm["ComparisonOperator"], alarm["Threshold"]) == (GTE, 1)
        assert "right to grant" in alarm["AlarmDescription"]
