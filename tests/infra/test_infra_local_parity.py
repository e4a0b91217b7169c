"""The local runtime runs every function wired as in AWS.

`make local` reads cdk.json, changes the deployment where AWS has no local stand-in
(`local.overlay.local_deployment`) and creates the resources in moto. Here the stack is
synthesized from exactly those settings, and each function's environment in its template is
compared with the whole environment the local runtime starts the same function's process with:
the same functions, the same keys and values, except resource identifiers (tokens in the
template, names/URLs/ARNs locally), the keys the documented local overlay adds
(`local.overlay.local_overlay`) and the variables Lambda sets itself.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from synthesized import BASE_CONTEXT, Synthesized, synthesize
from template_queries import function_env, of_type, props

from local.resources import LocalResources
from local.runtime import Runtime
from local.settings import CDK_JSON, LocalSettings
from pipeline.retention import REDELIVERY_BOUND, REDELIVERY_MARGIN
from tests.support.local_stack import local_resources_in_moto, moto_client

REGION = "eu-central-1"
MOTO = "http://127.0.0.1:1000"
FAKES = {
    "telegram": "http://127.0.0.1:1001",
    "crm": "http://127.0.0.1:1002",
    "bedrock": "http://127.0.0.1:1003",
    "sms": "http://127.0.0.1:1004",
    "sns": "http://127.0.0.1:1005",
    "end_user_messaging": "http://127.0.0.1:1006",
    "bitrix24": "http://127.0.0.1:1007",
    "amocrm": "http://127.0.0.1:1008",
}
# The local overlay, documented in local/overlay.py: what every function gets on top of the
# stack's environment, and what some get besides.
EVERY_FUNCTION = {
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
    "TELEGRAM_API_BASE",
}
# Added only where the stack traces (its `tracing` setting on); off, the stack sets it itself.
WHERE_THE_STACK_TRACES = {"POWERTOOLS_TRACE_DISABLED"}
ALSO = {
    "webhook": {"AWS_ENDPOINT_URL_SNS"},
    # The CRM sources' consumers publish order events: through the SNS proxy, as the webhook.
    "bitrix24": {"AWS_ENDPOINT_URL_SNS"},
    "amocrm": {"AWS_ENDPOINT_URL_SNS"},
    "crm_sweep": {"AWS_ENDPOINT_URL_SNS"},
    # The sms consumer asks a CRM's consumer to look at an order again (pipeline.crm.look): so too.
    "sms": {"SMS_LOOKUP_SETTLE_SECONDS", "AWS_ENDPOINT_URL_PINPOINT_SMS_VOICE_V2", "AWS_ENDPOINT_URL_SNS"},
    "reconciler": {"SMS_LOOKUP_SETTLE_SECONDS", "AWS_ENDPOINT_URL_PINPOINT_SMS_VOICE_V2"},
    # The Telegram stand-in's /_crash_after works only where this is set: never in AWS.
    "bot": {"LOCAL_CRASH_HOOKS"},
}
# Variables Lambda sets itself in AWS (the runtime's host process does it locally), and what keeps
# a local process off the user's own AWS configuration.
LAMBDA_SETS = {
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_LAMBDA_FUNCTION_NAME",
    "AWS_LAMBDA_FUNCTION_VERSION",
    "AWS_LAMBDA_FUNCTION_MEMORY_SIZE",
    "AWS_LAMBDA_LOG_GROUP_NAME",
    "AWS_LAMBDA_INITIALIZATION_TYPE",
    "AWS_CONFIG_FILE",
    "AWS_SHARED_CREDENTIALS_FILE",
    "PATH",
    "LANG",
    "TZ",
    "PYTHONPATH",
    "PYTHONUNBUFFERED",
}
# What the local runtime's function host reads besides: where it records the AWS calls, and
# whose imported files it reports to the reloader.
RUNTIME_SETS = {"LOCAL_AWS_CALLS_FILE", "LOCAL_CODE_ROOT"}
# Names of the variables that hold resource identifiers (`infra.environment`).
IDENTIFIER_SUFFIXES = ("_ARN", "_URL", "_SECRET_ID", "_TABLE")


@pytest.fixture(scope="module")
def local_resources() -> Iterator[LocalResources]:
    """The resources `make local` creates, from cdk.json as it reads it, in an in-process moto."""
    with local_resources_in_moto(LocalSettings.from_cdk_json(CDK_JSON), FAKES) as resources:
        yield resources


@pytest.fixture(scope="module")
def local_synth(tmp_path_factory: pytest.TempPathFactory, local_resources: LocalResources) -> Synthesized:
    """The stack deployed with the local runtime's settings."""
    outdir: Path = tmp_path_factory.mktemp("cdk-local")
    return synthesize(outdir, {**BASE_CONTEXT, **local_resources.deployment.to_context()})


def stack_environments(synth: Synthesized) -> dict[str, dict[str, Any]]:
    """Each function's Environment.Variables in the template, by its Powertools service name."""
    functions = of_type(synth.resources, "AWS::Lambda::Function")
    environments = {}
    for function_id in functions:
        environment = function_env(synth.resources, function_id)
        environments[environment["POWERTOOLS_SERVICE_NAME"]] = environment
    assert len(environments) == len(functions), "two functions share a Powertools service name"
    return environments


def test_the_stack_is_built_from_the_local_deployment_settings(
    local_synth: Synthesized, local_resources: LocalResources
) -> None:
    assert local_synth.stack.settings == local_resources.deployment
    assert local_synth.stack.consumers == local_resources.consumers


def test_every_function_runs_locally_with_the_stacks_environment_plus_only_the_overlay(
    local_synth: Synthesized, local_resources: LocalResources
) -> None:
    deployed = stack_environments(local_synth)
    # As `Runtime.start()` starts the processes (not started here: no moto, no fakes needed).
    local = Runtime(settings=local_resources.settings).function_environments(local_resources)

    tracing = local_synth.stack.settings.tracing
    assert set(local) == set(deployed)
    for function, environment in deployed.items():
        local_environment = local[function]
        local_only = set(local_environment) - set(environment) - LAMBDA_SETS - RUNTIME_SETS
        expected = EVERY_FUNCTION | ALSO.get(function, set()) | (WHERE_THE_STACK_TRACES if tracing else set())
        assert local_only == expected, function
        assert local_environment["POWERTOOLS_TRACE_DISABLED"] in {"true", "1"}, function
        assert set(environment) <= set(local_environment), function
        for key, value in environment.items():
            if isinstance(value, str):
                assert local_environment[key] == value, f"{function}: {key}"
            else:  # a reference to a resource of the stack: the local one's name, URL or ARN
                assert key.endswith(IDENTIFIER_SUFFIXES), f"{function}: {key} is a token but no identifier"
                assert local_environment[key], f"{function}: {key}"


def test_the_comparison_covers_every_kind_of_local_function(local_resources: LocalResources) -> None:
    """What the local runtime runs with cdk.json as it is: the webhook, every consumer (the `ai`
    one on the Bedrock fake), the SMS reconciler and, End User Messaging being the stack's
    default gateway, `sms_events`."""
    assert local_resources.deployment.sms_gateway == "end_user_messaging"
    assert set(local_resources.local_environments(MOTO)) == {
        "webhook",
        "reconciler",
        "sms_events",
        # cdk.json connects the Bitrix24 and amoCRM stand-ins: their history is swept.
        "crm_sweep",
        *(consumer.name for consumer in local_resources.consumers),
    }
    assert "ai" in {consumer.name for consumer in local_resources.consumers}


def test_local_queues_keep_messages_as_long_as_the_stacks_within_the_same_bound(
    local_synth: Synthesized, local_resources: LocalResources
) -> None:
    """The local runtime's queues and DLQs (in moto) have the template's retention periods,
    the ones the redelivery bound is made of."""

    def local_retention(url: str) -> int:
        attributes = moto_client("sqs").get_queue_attributes(
            QueueUrl=url, AttributeNames=["MessageRetentionPeriod"]
        )["Attributes"]
        return int(attributes["MessageRetentionPeriod"])

    assert set(local_resources.queues) == set(local_synth.stack.pipelines)
    for name, queues in local_resources.queues.items():
        pipeline = local_synth.stack.pipelines[name]
        deployed = {
            "queue": props(local_synth.resources, local_synth.logical_id(pipeline.queue)),
            "dlq": props(local_synth.resources, local_synth.logical_id(pipeline.dlq)),
        }
        local = {"queue": local_retention(queues.url), "dlq": local_retention(queues.dlq_url)}
        assert local == {kind: queue["MessageRetentionPeriod"] for kind, queue in deployed.items()}, name
        assert timedelta(seconds=sum(local.values())) + REDELIVERY_MARGIN == REDELIVERY_BOUND, name
