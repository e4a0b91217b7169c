"""Alarms and the dashboards over everything the stack runs.

Alarms (each notifies the alarm topic on ALARM and on OK), with `alarms=full` (the default):
- every DLQ (consumer redrive DLQs, SNS delivery DLQs, the SMS delivery-event DLQs) holds a message;
- every consumer queue's oldest message is older than its retry policy allows (`max_message_age`);
- every function reports an error; Lambda throttles an invocation: one alarm on the account's
  regional Throttles (no function of the stack reserves concurrency, so a throttle is the
  account's concurrency running out, whichever function it hits; the dashboards show which);
- the API answers 5xx, or refuses unauthenticated requests in a burst (the webhook's own metric:
  HTTP APIs have no per-status metric);
- the webhook refuses a CRM event because its customer's phone is not a valid number;
- a consumer is paused because a remote refused its whole account, one alarm per consumer and
  cause (`Consumer.account_causes`);
- a CRM source's event cannot become an order event (misconfiguration), or a CRM transition with
  an SMS rule was first seen too late to text (`sms_max_age_minutes`);
- SMS: an `unknown` outcome stays unresolved too long or past the reconcile deadline, the
  share of failed sends is high, and a notification ended `expired` (past its rule's maximum age
  at send time: a customer not texted).

With `alarms=essential` only ESSENTIAL_ALARMS: each consumer's DLQ, the webhook's errors and
the SMS unknowns (a bill at rest within the account's free alarm metrics for a small bot).

Each alarm metric is billed ($0.10 a month; an alarm on metric math pays for every metric it
reads), so combining alarms saves nothing: only watching fewer metrics does.

The dashboards: sections (ingress, each consumer, SMS, the CRM sweep) packed in order into as
few dashboards as keep each within the free tier's metrics per dashboard (`infra.prices`: 3
such dashboards are free in an account that has no other).

Which resources exist comes from the stack (so from the registry): a new consumer gets its
alarms and dashboard row without a change here.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from aws_cdk import Duration, Stack, Token
from aws_cdk import aws_cloudwatch as cloudwatch
from aws_cdk import aws_cloudwatch_actions as cloudwatch_actions
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.config import PipelineSettings
from infra.constructs.consumers import ConsumerPipeline
from infra.constructs.crm_sweep import CrmSweep
from infra.constructs.events_topic import AlarmTopic
from infra.constructs.ingress import Ingress
from infra.constructs.lambda_function import METRIC_PERIOD, PipelineFunction
from infra.constructs.sms import SmsSupport
from infra.prices import FREE_DASHBOARD_METRICS, SEARCH_METRICS_RESERVE
from pipeline.crm.sources import HIDDEN_METRIC, MISCONFIGURED_METRIC
from pipeline.crm.sweep import FAILURES_METRIC, LAG_METRIC, ORDERS_METRIC
from pipeline.crm.sync import TOO_OLD_METRIC
from pipeline.pause import PAUSE_CAUSES, PAUSE_FIXES, PAUSED_METRIC, pause_seconds
from pipeline.registry import Consumer
from pipeline.retention import CONSUMER_QUEUE_RETENTION
from pipeline.sms.endstates import CLOSING_METRICS
from pipeline.sms.journal import State

PERIOD = METRIC_PERIOD
# What CloudWatch accepts as a dashboard name.
DASHBOARD_NAME = re.compile(r"^[A-Za-z0-9_-]{1,255}$")
# Room kept for a region known only at deploy time (the longest today has 14 characters).
REGION_NAME_ROOM = 20
# A message may sit out every backoff and one run per delivery; beyond that (plus this slack)
# the worker is not keeping up or not running.
QUEUE_AGE_SLACK_SECONDS = 300
# Unauthorized requests per 5 minutes that are more than a stray scanner or one bad retry.
UNAUTHORIZED_SPIKE = 10
# Failed SMS (refused for good, or attempts used up) as a share of finished sends, over 15 minutes.
SMS_FAILED_RATE_PERCENT = 20
SMS_FAILED_RATE_PERIOD = Duration.minutes(15)
SMS_OUTCOMES = ("SmsAccepted", "SmsRefused", "SmsFailed", "SmsUnknown")
# A notification ended unsent past its maximum age (`pipeline.sms.endstates`).
SMS_EXPIRED_METRIC = CLOSING_METRICS[State.EXPIRED]


def max_message_age_seconds(consumer: Consumer) -> int:
    """The oldest a healthy consumer's message can get: the longest backoff before each retry
    (`pipeline.worker_settings.backoff_seconds` caps), one full run per delivery, and some slack."""
    retry = consumer.retry
    backoffs = sum(
        min(retry.max_delay_seconds, retry.base_delay_seconds * 2 ** (attempt - 1))
        for attempt in range(1, retry.max_receive_count)
    )
    return backoffs + retry.max_receive_count * consumer.timeout_seconds + QUEUE_AGE_SLACK_SECONDS


class AlarmKind(StrEnum):
    DLQ_NOT_EMPTY = "dlq_not_empty"
    QUEUE_AGE = "queue_age"
    FUNCTION_ERRORS = "function_errors"
    LAMBDA_THROTTLES = "lambda_throttles"
    API_5XX = "api_5xx"
    UNAUTHORIZED_SPIKE = "unauthorized_spike"
    INVALID_PHONE = "invalid_phone"
    SMS_UNKNOWN_AGE = "sms_unknown_age"
    SMS_UNKNOWN_PAST_DEADLINE = "sms_unknown_past_deadline"
    SMS_FAILED_RATE = "sms_failed_rate"
    CRM_SOURCE_MISCONFIGURED = "crm_source_misconfigured"
    CRM_TRANSITION_TOO_OLD = "crm_transition_too_old"
    ACCOUNT_PAUSED = "account_paused"
    CRM_ORDER_HIDDEN = "crm_order_hidden"
    CRM_SWEEP_BEHIND = "crm_sweep_behind"
    SMS_EXPIRED = "sms_expired"


# What `alarms=essential` keeps, by kind and which of its subjects (the rest of `full` is left out).
ESSENTIAL_ALARMS: dict[AlarmKind, str] = {
    AlarmKind.DLQ_NOT_EMPTY: "each consumer's DLQ (not the SNS delivery DLQs nor the SMS event DLQs)",
    AlarmKind.FUNCTION_ERRORS: "the webhook only",
    AlarmKind.SMS_UNKNOWN_AGE: "as in full",
    AlarmKind.SMS_UNKNOWN_PAST_DEADLINE: "as in full",
}


@dataclass(frozen=True)
class WatchedAlarm:
    kind: AlarmKind
    subject: str  # what it watches: a queue, function or feature name
    alarm: cloudwatch.Alarm


def dashboard_name(stack: Stack, number: int = 1) -> str:
    """The stack name and its region: dashboards are global per account, so the same stack name
    deployed in two regions of one account must not share one. Environment-agnostic, the region
    is the deploy-time AWS::Region (Fn::Join). The second and later dashboards end in -2, -3..."""
    region = stack.region
    suffix = "" if number == 1 else f"-{number}"
    concrete = region if not Token.is_unresolved(region) else "x" * REGION_NAME_ROOM
    if not DASHBOARD_NAME.match(f"{stack.stack_name}-{concrete}{suffix}"):
        raise ValueError(f"stack_name: {stack.stack_name!r} makes no valid CloudWatch dashboard name")
    return f"{stack.stack_name}-{region}{suffix}"


def metric_count(metric: cloudwatch.IMetric) -> int:
    """The metrics a graphed line references, as `infra.prices.dashboard_metrics` counts them in
    the template: a metric one, an expression those it uses, a SEARCH its reserve."""
    if isinstance(metric, cloudwatch.MathExpression):
        if "SEARCH(" in metric.expression:
            return SEARCH_METRICS_RESERVE
        return sum(metric_count(used) for used in metric.using_metrics.values())
    return 1


@dataclass
class Section:
    """Rows of widgets shown together on one dashboard, and the metrics they reference."""

    rows: list[list[cloudwatch.IWidget]]
    metrics: int = 0

    def graph(
        self, title: str, left: list[cloudwatch.IMetric], right: list[cloudwatch.IMetric] | None = None
    ) -> cloudwatch.GraphWidget:
        """A graph for a row of this section, its metrics counted."""
        self.metrics += sum(metric_count(metric) for metric in [*left, *(right or [])])
        return cloudwatch.GraphWidget(title=title, left=left, right=right or [], width=8, height=6)


def pack(sections: list[Section], limit: int = FREE_DASHBOARD_METRICS) -> list[list[Section]]:
    """Sections in order, on as few dashboards as keep each within `limit` metrics."""
    dashboards: list[list[Section]] = [[]]
    for section in sections:
        if section.metrics > limit:
            raise ValueError(f"a dashboard section of {section.metrics} metrics exceeds {limit}")
        if sum(s.metrics for s in dashboards[-1]) + section.metrics > limit:
            dashboards.append([])
        dashboards[-1].append(section)
    return dashboards


class Monitoring(Construct):
    """Alarms on the alarm topic (`infra.constructs.events_topic.AlarmTopic`) and the dashboard."""

    def __init__(
        self,
        scope: Construct,
        construct_id: str,
        *,
        settings: PipelineSettings,
        ingress: Ingress,
        pipelines: Mapping[str, ConsumerPipeline],
        sms: SmsSupport | None,
        alarm_topic: AlarmTopic,
        crm_sweep: CrmSweep | None = None,
    ) -> None:
        super().__init__(scope, construct_id)
        self.alarm_topic = alarm_topic
        self._action = cloudwatch_actions.SnsAction(self.alarm_topic.topic)
        self.alarms: list[WatchedAlarm] = []

        self.functions: dict[str, PipelineFunction] = {
            "webhook": ingress.webhook,
            **{name: pipeline.worker for name, pipeline in pipelines.items()},
            **({function.service_name: function for function in sms.functions} if sms else {}),
            **({crm_sweep.function.service_name: crm_sweep.function} if crm_sweep else {}),
        }
        self.dlqs: dict[str, sqs.IQueue] = {}
        for name, pipeline in pipelines.items():
            self.dlqs[f"{name}-dlq"] = pipeline.dlq
            self.dlqs[f"{name}-delivery-dlq"] = pipeline.delivery_dlq
        if sms:
            for role, queue in sms.delivery_events_dlqs.items():
                self.dlqs[f"sms-events-{role}-dlq"] = queue

        ordered_dlqs = {f"{name}-dlq" for name, pipeline in pipelines.items() if pipeline.consumer.ordered}
        if settings.alarms == "essential":
            for name, pipeline in pipelines.items():
                self._dlq_alarm(f"{name}-dlq", pipeline.dlq, ordered=f"{name}-dlq" in ordered_dlqs)
            self._errors_alarm("webhook", ingress.webhook)
            if sms:
                self._sms_unknown_alarms(settings, sms)
        else:
            for dlq_name, dlq in self.dlqs.items():
                self._dlq_alarm(dlq_name, dlq, ordered=dlq_name in ordered_dlqs)
            for name, pipeline in pipelines.items():
                self._queue_age_alarm(name, pipeline)
            for name, function in self.functions.items():
                self._errors_alarm(name, function)
            self._throttles_alarm()
            self._api_alarms(ingress)
            for name, pipeline in pipelines.items():
                for cause in pipeline.consumer.account_causes:
                    self._account_paused_alarm(name, pipeline, cause)
                if pipeline.consumer.publishes:
                    self._crm_source_alarm(name, pipeline)
                    self._crm_too_old_alarm(name, pipeline)
                    self._crm_hidden_alarm(name, pipeline)
            if crm_sweep:
                self._crm_sweep_behind_alarm(settings, crm_sweep)
            if sms:
                self._sms_unknown_alarms(settings, sms)
                self._sms_failed_rate_alarm(sms)
                self._sms_expired_alarm(sms)

        self.dashboards: list[cloudwatch.Dashboard] = []
        self._dashboards(ingress, pipelines, sms, crm_sweep)
        # The first: the one the DashboardName output names (ingress, and the alarms' states).
        self.dashboard = self.dashboards[0]

    # -- alarms -----------------------------------------------------------------------------------
    def _alarm(
        self,
        kind: AlarmKind,
        subject: str,
        construct_id: str,
        metric: cloudwatch.IMetric,
        *,
        threshold: float,
        comparison: cloudwatch.ComparisonOperator,
        description: str,
        missing: cloudwatch.TreatMissingData = cloudwatch.TreatMissingData.NOT_BREACHING,
    ) -> cloudwatch.Alarm:
        alarm = cloudwatch.Alarm(
            self,
            construct_id,
            metric=metric,
            threshold=threshold,
            comparison_operator=comparison,
            evaluation_periods=1,
            treat_missing_data=missing,
            alarm_description=description,
        )
        alarm.add_alarm_action(self._action)
        alarm.add_ok_action(self._action)
        self.alarms.append(WatchedAlarm(kind, subject, alarm))
        return alarm

    def _dlq_alarm(self, name: str, queue: sqs.IQueue, *, ordered: bool = False) -> None:
        # An alarm cannot name a chat (its dimensions are fixed): it says where the chat is.
        where = (
            " The chat held back is each message's MessageGroupId (telegram:<bot>:chat:<id>): "
            "`python -m ops dlq peek` shows it, and the worker's 'record sent to the DLQ' log line "
            "names it (message_group) with the reason; the chat's later updates went on. This alarm "
            "fires once, at the first: each dead letter's chat, event id and reason also arrive as "
            "a notice of their own on this topic ('<consumer>: chat <chat> dead-lettered update ...')."
            if ordered
            else ""
        )
        self._alarm(
            AlarmKind.DLQ_NOT_EMPTY,
            name,
            f"DlqNotEmpty-{name}",
            queue.metric_approximate_number_of_messages_visible(statistic="Maximum", period=PERIOD),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description=f"{name} holds messages that were given up on: inspect them, fix the cause, "
            "then redrive or discard them (consumer DLQs: python -m ops dlq)." + where,
            # SQS stops publishing metrics for a queue idle for 6 hours, while the message is
            # still there: missing data keeps the alarm as it is instead of clearing it.
            missing=cloudwatch.TreatMissingData.IGNORE,
        )

    def _queue_age_alarm(self, name: str, pipeline: ConsumerPipeline) -> None:
        limit = max_message_age_seconds(pipeline.consumer)
        self._alarm(
            AlarmKind.QUEUE_AGE,
            name,
            f"QueueAge-{name}",
            pipeline.queue.metric_approximate_age_of_oldest_message(statistic="Maximum", period=PERIOD),
            threshold=limit,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            description=f"The {name} queue's oldest message is older than its retries allow "
            f"({limit} s): the {name} worker is failing, throttled or too slow.",
        )

    def _errors_alarm(self, name: str, function: PipelineFunction) -> None:
        self._alarm(
            AlarmKind.FUNCTION_ERRORS,
            name,
            f"Errors-{name}",
            function.function.metric_errors(period=PERIOD),
            threshold=0,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            description=f"The {name} function reports errors (see its log group).",
        )

    def _throttles_alarm(self) -> None:
        """One alarm metric for every function's throttles: none reserves concurrency, so Lambda
        throttles one only when the account's regional concurrency runs out (which the
        account-wide Throttles counts, other functions of the account included)."""
        self._alarm(
            AlarmKind.LAMBDA_THROTTLES,
            "lambda",
            "LambdaThrottles",
            lambda_.Function.metric_all_throttles(period=PERIOD),
            threshold=0,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            description="Lambda throttled invocations in this account and region: its concurrency ran "
            "out (every function of the stack shares it). The dashboards' Throttles lines say which "
            "of the stack's functions; SQS-driven ones retry, the webhook answered 5xx.",
        )

    def _api_alarms(self, ingress: Ingress) -> None:
        self._alarm(
            AlarmKind.API_5XX,
            "api",
            "Api5xx",
            ingress.stage.metric_server_error(period=PERIOD, statistic="Sum"),
            threshold=0,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            description="The API answered 5xx: Telegram and the CRM retry, but something is broken "
            "(webhook errors, SNS publish failures, throttling).",
        )
        self._alarm(
            AlarmKind.UNAUTHORIZED_SPIKE,
            "api",
            "UnauthorizedSpike",
            ingress.unauthorized_requests(),
            threshold=UNAUTHORIZED_SPIKE,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description=f"{UNAUTHORIZED_SPIKE}+ requests in 5 minutes without a valid Telegram "
            "secret token or CRM signature: a rotated secret not registered, or probing.",
        )
        # Each one is an order-status event the shop lost (answered 422, so the CRM will not
        # retry it): worth a look from the first.
        self._alarm(
            AlarmKind.INVALID_PHONE,
            "crm",
            "InvalidPhones",
            ingress.invalid_phone_events(),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description="The CRM sent order events whose customer.phone is not a valid phone number "
            "(or a national form without phone_default_region): they were refused with 422 and no "
            "SMS is sent. Fix the number in the CRM (or the setting) and have the CRM resend.",
        )

    def _crm_source_alarm(self, name: str, pipeline: ConsumerPipeline) -> None:
        """A CRM webhook's event that cannot become an order event until the configuration is
        fixed (`pipeline.crm.sources`): each one may be a customer's SMS, so from the first."""
        self._alarm(
            AlarmKind.CRM_SOURCE_MISCONFIGURED,
            name,
            f"CrmSourceMisconfigured-{name}",
            pipeline.emitted_metric(MISCONFIGURED_METRIC),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description=f"{name} events could not become order events (a stage missing from the map, "
            "no phone where an SMS rule applies, the API credential revoked): the reason is in the "
            f"{name} log and on each message in the {name} DLQ; fix it, then redrive (python -m ops dlq).",
        )

    def _account_paused_alarm(self, name: str, pipeline: ConsumerPipeline, cause: str) -> None:
        """A remote refused the consumer's whole account (`pipeline.worker`: its records pause,
        not dead-letter): from the first, one alarm per cause, so the alarm names it."""
        self._alarm(
            AlarmKind.ACCOUNT_PAUSED,
            f"{name}:{cause}",
            f"AccountPaused-{name}-{cause}",
            pipeline.worker.emitted_metric(PAUSED_METRIC, dimensions={"consumer": name, "cause": cause}),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description=f"{name} is paused: its remote refused the whole account ({cause}: "
            f"{PAUSE_CAUSES[cause]}). Its messages stay queued and come back every "
            f"{pause_seconds(pipeline.consumer) // 60} minutes; once the account works the next one "
            f"simply succeeds. Fix: {PAUSE_FIXES[cause]}. A message still paused "
            f"{CONSUMER_QUEUE_RETENTION.days} days after it was sent is dead-lettered with the "
            f"reason (python -m ops dlq). `python -m ops doctor` shows the latest pause.",
        )

    def _crm_too_old_alarm(self, name: str, pipeline: ConsumerPipeline) -> None:
        """A transition with an SMS rule first seen past `sms_max_age_minutes` (`pipeline.crm.sync`):
        a customer who was not texted. Webhooks failing for longer than the sweep covers, or the
        sweep itself failing (its Errors alarm), or a pipeline connected to a CRM with old deals."""
        self._alarm(
            AlarmKind.CRM_TRANSITION_TOO_OLD,
            name,
            f"CrmTransitionsTooOld-{name}",
            pipeline.emitted_metric(TOO_OLD_METRIC),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description=f"{name} transitions into a status with an SMS rule were first seen after "
            "sms_max_age_minutes and were not texted (each is logged with its order and status in the "
            f"{name} log): check the CRM's webhook and the crm_sweep function.",
        )

    def _crm_hidden_alarm(self, name: str, pipeline: ConsumerPipeline) -> None:
        """An order the integration's user may not read (`pipeline.crm.sources.hidden`): the CRM
        leaves its history out silently, so its SMS would be lost without a word."""
        self._alarm(
            AlarmKind.CRM_ORDER_HIDDEN,
            name,
            f"CrmOrdersHidden-{name}",
            pipeline.emitted_metric(HIDDEN_METRIC),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description=f"{name} orders the integration's user may not read were skipped, unsent (each "
            f"is logged in the {name} log with the order and the right to grant): grant it, or keep "
            "orders the shop does not text out of the CRM webhook; the order's next event reads it whole.",
        )

    def _crm_sweep_behind_alarm(self, settings: PipelineSettings, crm_sweep: CrmSweep) -> None:
        """The sweep's lag (`pipeline.crm.sweep`: the oldest history not yet known read) past the
        SMS age limit: a catch-up that is not converging (or not yet), whose moves can no longer
        be texted. Every run lowers it while a catch-up progresses; stuck, it grows."""
        limit = settings.sms_max_age_minutes * 60
        self._alarm(
            AlarmKind.CRM_SWEEP_BEHIND,
            "crm_sweep",
            "CrmSweepBehind",
            crm_sweep.function.emitted_metric(LAG_METRIC, statistic="Maximum"),
            threshold=limit,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            description=f"The CRM history sweep is more than {settings.sms_max_age_minutes} minutes "
            "(sms_max_age_minutes) behind a CRM's history: its catch-up is not converging, and the "
            "moves it finds now are counted too old instead of texted. The crm_sweep log names the "
            "CRM, its pages and read_to each run; check its errors and the CRM's API.",
        )

    def _sms_unknown_alarms(self, settings: PipelineSettings, sms: SmsSupport) -> None:
        minutes = settings.sms_unknown_alarm_minutes
        self._alarm(
            AlarmKind.SMS_UNKNOWN_AGE,
            "sms",
            "SmsUnknownAge",
            sms.reconciler_metric("SmsUnknownOldestAgeSeconds", statistic="Maximum"),
            threshold=minutes * 60,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description=f"An SMS outcome has been unknown for {minutes}+ minutes: no delivery event "
            "or lookup settled it (python -m ops journal unknown).",
        )
        self._alarm(
            AlarmKind.SMS_UNKNOWN_PAST_DEADLINE,
            "sms",
            "SmsUnknownPastDeadline",
            sms.reconciler_metric("SmsUnknownPastDeadline", statistic="Maximum"),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description="SMS outcomes are unknown past the reconcile deadline: a person must mark "
            "them accepted or resend (python -m ops journal resolve <key> --accepted|--not-sent).",
        )

    def _sms_failed_rate_alarm(self, sms: SmsSupport) -> None:
        self._alarm(
            AlarmKind.SMS_FAILED_RATE,
            "sms",
            "SmsFailedRate",
            self._sms_failed_rate(sms),
            threshold=SMS_FAILED_RATE_PERCENT,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
            description=f"Over {SMS_FAILED_RATE_PERCENT}% of finished SMS sends failed in 15 minutes "
            "(refused for good or attempts used up): check the gateway and the sms DLQ.",
        )

    def _sms_expired_alarm(self, sms: SmsSupport) -> None:
        """A notification ended `expired` (`pipeline.sms.endstates`): an outcome, never retried nor
        dead-lettered, but a customer who was not texted: after an outage longer than the age, a
        DLQ left for days, a quiet-hours window longer than the age. From the first, as the CRM
        sources' too-old transitions; in `full` only (the worker's and the reconciler's counts,
        two alarm metrics)."""
        self._alarm(
            AlarmKind.SMS_EXPIRED,
            "sms",
            "SmsExpired",
            sms.send_outcome_metric(SMS_EXPIRED_METRIC),
            threshold=1,
            comparison=cloudwatch.ComparisonOperator.GREATER_THAN_OR_EQUAL_TO_THRESHOLD,
            description="Order SMS ended `expired`, unsent: they were past their rule's maximum age "
            "(sms_max_age_minutes, or the rule's max_age_hours) when they could be sent, after an "
            "outage, a late redrive or quiet hours longer than the age. Each is logged with its "
            "order and notification key in the sms log (python -m ops journal show <key>).",
        )

    @staticmethod
    def _sms_failed_rate(sms: SmsSupport) -> cloudwatch.MathExpression:
        period = SMS_FAILED_RATE_PERIOD
        total = "(failed + accepted + unknown)"
        return cloudwatch.MathExpression(
            expression=f"IF({total} > 0, 100 * failed / {total}, 0)",
            using_metrics={
                # Each already sums the worker's and the reconciler's sends, filled with 0.
                "failed": sms.send_outcome_metric("SmsFailed", period),
                "accepted": sms.send_outcome_metric("SmsAccepted", period),
                "unknown": sms.send_outcome_metric("SmsUnknown", period),
            },
            label="Failed SMS (% of finished sends)",
            period=period,
        )

    # -- dashboards -------------------------------------------------------------------------------
    def _dashboards(
        self,
        ingress: Ingress,
        pipelines: Mapping[str, ConsumerPipeline],
        sms: SmsSupport | None,
        crm_sweep: CrmSweep | None,
    ) -> None:
        sections = [self._ingress_section(ingress)]
        sections += [self._consumer_section(name, pipeline) for name, pipeline in pipelines.items()]
        if sms:
            sections.append(self._sms_section(sms))
        if crm_sweep:
            sections.append(self._crm_sweep_section(crm_sweep))
        # More than the free tier's 3 dashboards only with more consumers than the registry has
        # today (tests/infra: the fullest template needs 3); each further one is $3 a month.
        stack = Stack.of(self)
        for number, on_it in enumerate(pack(sections), start=1):
            dashboard = cloudwatch.Dashboard(
                self,
                "Dashboard" if number == 1 else f"Dashboard{number}",
                dashboard_name=dashboard_name(stack, number),
                default_interval=Duration.hours(3),
                period_override=cloudwatch.PeriodOverride.AUTO,
            )
            for section in on_it:
                for row in section.rows:
                    dashboard.add_widgets(*row)
            self.dashboards.append(dashboard)
        # An alarm status widget references alarms, not metrics.
        self.dashboards[0].add_widgets(
            cloudwatch.AlarmStatusWidget(
                title="Alarms", alarms=[watched.alarm for watched in self.alarms], width=24, height=8
            )
        )

    def _ingress_section(self, ingress: Ingress) -> Section:
        stage = ingress.stage
        webhook = ingress.webhook.function
        section = Section([[cloudwatch.TextWidget(markdown="# Ingress", width=24, height=1)]])
        section.rows.append(
            [
                section.graph(
                    "API requests and errors",
                    [
                        stage.metric_count(statistic="Sum", period=PERIOD),
                        stage.metric_client_error(period=PERIOD),
                        stage.metric_server_error(period=PERIOD),
                    ],
                    [stage.metric_latency(statistic="p99", period=PERIOD)],
                ),
                section.graph(
                    "Webhook: accepted and rejected events",
                    [
                        self._search(ingress.webhook, "EventsAccepted", "source,type"),
                        self._search(ingress.webhook, "EventsRejected", "source,reason"),
                    ],
                ),
                section.graph(
                    "Webhook function",
                    [webhook.metric_errors(period=PERIOD), webhook.metric_throttles(period=PERIOD)],
                    [webhook.metric_duration(statistic="p99", period=PERIOD)],
                ),
            ]
        )
        return section

    def _consumer_section(self, name: str, pipeline: ConsumerPipeline) -> Section:
        worker = pipeline.worker.function
        section = Section([[cloudwatch.TextWidget(markdown=f"## Consumer `{name}`", width=24, height=1)]])
        section.rows.append(
            [
                section.graph(
                    f"{name}: queue depth and oldest message age",
                    [
                        pipeline.queue.metric_approximate_number_of_messages_visible(
                            statistic="Maximum", period=PERIOD
                        )
                    ],
                    [
                        pipeline.queue.metric_approximate_age_of_oldest_message(
                            statistic="Maximum", period=PERIOD
                        )
                    ],
                ),
                section.graph(
                    f"{name}: dead-letter queues",
                    [
                        pipeline.dlq.metric_approximate_number_of_messages_visible(
                            statistic="Maximum", period=PERIOD, label="DLQ"
                        ),
                        pipeline.delivery_dlq.metric_approximate_number_of_messages_visible(
                            statistic="Maximum", period=PERIOD, label="SNS delivery DLQ"
                        ),
                    ],
                ),
                section.graph(
                    f"{name}: worker duration and errors",
                    [worker.metric_errors(period=PERIOD), worker.metric_throttles(period=PERIOD)],
                    [worker.metric_duration(statistic="p99", period=PERIOD)],
                ),
            ]
        )
        return section

    def _crm_sweep_section(self, crm_sweep: CrmSweep) -> Section:
        function = crm_sweep.function
        section = Section([])
        section.rows.append(
            [
                section.graph(
                    "CRM history sweep: orders looked at, failures",
                    [function.emitted_metric(ORDERS_METRIC), function.emitted_metric(FAILURES_METRIC)],
                    [function.function.metric_duration(statistic="Maximum", period=PERIOD)],
                ),
                section.graph(
                    "crm_sweep: errors, lag (seconds of history not yet read)",
                    [
                        function.function.metric_errors(period=PERIOD),
                        function.function.metric_throttles(period=PERIOD),
                    ],
                    [function.emitted_metric(LAG_METRIC, statistic="Maximum")],
                ),
            ]
        )
        return section

    def _sms_section(self, sms: SmsSupport) -> Section:
        section = Section([[cloudwatch.TextWidget(markdown="## SMS", width=24, height=1)]])
        widgets: list[cloudwatch.IWidget] = [
            section.graph("SMS send outcomes", [sms.send_outcome_metric(name) for name in SMS_OUTCOMES]),
            section.graph(
                "SMS unknown outcomes",
                [sms.reconciler_metric("SmsUnknownCount"), sms.reconciler_metric("SmsUnknownPastDeadline")],
                [sms.reconciler_metric("SmsUnknownOldestAgeSeconds")],
            ),
        ]
        for function in sms.functions:
            widgets.append(
                section.graph(
                    f"{function.service_name}: duration and errors",
                    [
                        function.function.metric_errors(period=PERIOD),
                        function.function.metric_throttles(period=PERIOD),
                    ],
                    [function.function.metric_duration(statistic="p99", period=PERIOD)],
                )
            )
        if sms.delivery_events_handler:
            handler = sms.delivery_events_handler
            widgets.append(
                section.graph(
                    "SMS delivery events",
                    [
                        handler.emitted_metric("SmsDeliveryEvents"),
                        handler.emitted_metric("SmsUnknownClosedByDeliveryEvent"),
                    ],
                    [
                        queue.metric_approximate_number_of_messages_visible(
                            statistic="Maximum", period=PERIOD, label=f"{role} DLQ"
                        )
                        for role, queue in sms.delivery_events_dlqs.items()
                    ],
                )
            )
        section.rows.append(widgets)
        return section

    @staticmethod
    def _search(webhook: PipelineFunction, metric_name: str, dimensions: str) -> cloudwatch.MathExpression:
        """Every dimension combination of a webhook metric (one line per source/type or reason)."""
        namespace, service = webhook.metrics_namespace, webhook.service_name
        search = f'{{{namespace},service,{dimensions}}} MetricName="{metric_name}" service="{service}"'
        return cloudwatch.MathExpression(
            expression=f"SEARCH('{search}', 'Sum', 300)",
            using_metrics={},
            label=metric_name,
            period=PERIOD,
        )
