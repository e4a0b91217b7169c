"""The local stack is built from the registry as the CDK stack is, and routes as SNS would."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from aws_lambda_powertools.utilities.data_classes import SNSEvent
from pydantic import ValidationError

from infra.config import PipelineSettings
from local.overlay import (
    LOCAL_AMOCRM_STATUSES,
    LOCAL_BEDROCK_MODEL_ID,
    LOCAL_BITRIX24_STAGES,
    LOCAL_BOT_APPLICATION,
)
from local.resources import LocalResources, create_resources
from local.settings import LocalSettings
from local.sns_subscription import sns_record
from pipeline.registry import CONSUMERS, by_name, enabled, secret_env_var, table_env_var
from pipeline.retention import IDEMPOTENCY_TTL_SECONDS
from tests.support.local_stack import local_resources_in_moto, moto_client

# An accepted idempotency TTL other than the default.
LONGER_TTL = 2 * IDEMPOTENCY_TTL_SECONDS

REGION = "eu-central-1"
FAKES = {
    "crm": "http://127.0.0.1:1111",
    "sms": "http://127.0.0.1:2222",
    "end_user_messaging": "http://127.0.0.1:3333",
    "bitrix24": "http://127.0.0.1:4444",
    "amocrm": "http://127.0.0.1:5555",
}


client = moto_client


@pytest.fixture(scope="module")
def stack() -> Iterator[LocalResources]:
    """One local stack for the module (tests only read it, or drain what they publish)."""
    with local_resources_in_moto(LocalSettings(), FAKES) as resources:
        yield resources


def test_every_enabled_consumer_gets_a_queue_with_its_redrive_and_visibility(stack: LocalResources) -> None:
    sqs = client("sqs")
    # Locally the `ai` consumer runs on the Bedrock fake even without a configured model, and the
    # CRM sources' consumers on their stand-ins with the demo maps, the example bot (so no
    # autoreply), and the crm consumer on the CRM stand-in.
    local = PipelineSettings.from_context(
        {
            "crm_leads": True,
            "bedrock_model_id": LOCAL_BEDROCK_MODEL_ID,
            "bot_application": LOCAL_BOT_APPLICATION,
            "bitrix24_stages": LOCAL_BITRIX24_STAGES,
            "amocrm_statuses": LOCAL_AMOCRM_STATUSES,
        }
    )
    expected = enabled(local.registry_settings())
    assert [c.name for c in stack.consumers] == [c.name for c in expected]
    for consumer in stack.consumers:
        queue = stack.queues[consumer.name]
        attributes = sqs.get_queue_attributes(QueueUrl=queue.url, AttributeNames=["All"])["Attributes"]
        redrive = json.loads(attributes["RedrivePolicy"])
        assert redrive == {
            "deadLetterTargetArn": queue.dlq_arn,
            "maxReceiveCount": consumer.redrive_max_receive_count,
        }
        assert int(attributes["VisibilityTimeout"]) == consumer.visibility_timeout_seconds


def test_subscriptions_use_raw_delivery_and_the_registry_filter_policy(stack: LocalResources) -> None:
    sns = client("sns")
    by_queue = {queue.arn: name for name, queue in stack.queues.items()}
    subscriptions = sns.list_subscriptions_by_topic(TopicArn=stack.topic_arn)["Subscriptions"]
    assert sorted(by_queue[s["Endpoint"]] for s in subscriptions) == sorted(stack.queues)
    for subscription in subscriptions:
        attributes = sns.get_subscription_attributes(SubscriptionArn=subscription["SubscriptionArn"])[
            "Attributes"
        ]
        consumer = next(c for c in CONSUMERS if c.name == by_queue[subscription["Endpoint"]])
        assert attributes["RawMessageDelivery"] == "true"
        assert json.loads(attributes["FilterPolicy"]) == consumer.filter_policy


def test_a_published_event_reaches_exactly_the_consumers_whose_policy_matches(stack: LocalResources) -> None:
    attributes = {"source": "telegram", "type": "callback_query", "chat_type": "private"}
    client("sns").publish(
        TopicArn=stack.topic_arn,
        Message='{"event_id":"x"}',
        MessageAttributes={k: {"DataType": "String", "StringValue": v} for k, v in attributes.items()},
        MessageGroupId="telegram:bot:chat:1",
        MessageDeduplicationId="x",
    )

    sqs = client("sqs")
    reached = set()
    for name, queue in stack.queues.items():
        messages = sqs.receive_message(QueueUrl=queue.url, MessageAttributeNames=["All"]).get("Messages", [])
        if messages:
            reached.add(name)
            assert messages[0]["Body"] == '{"event_id":"x"}'  # raw delivery: the envelope, no SNS wrapper
            assert messages[0]["MessageAttributes"]["type"]["StringValue"] == "callback_query"
    expected = {
        c.name for c in stack.consumers if all(attributes.get(k) in v for k, v in c.filter_policy.items())
    }
    assert reached == expected
    assert "bot" in reached and "autoreply" not in reached and "crm" not in reached


def test_journal_has_the_reconcilers_index_and_ttl(stack: LocalResources) -> None:
    dynamodb = client("dynamodb")
    table = dynamodb.describe_table(TableName=stack.tables["journal"])["Table"]

    assert table["KeySchema"] == [{"AttributeName": "id", "KeyType": "HASH"}]
    index = table["GlobalSecondaryIndexes"][0]
    assert index["IndexName"] == "by_state"
    assert index["KeySchema"] == [
        {"AttributeName": "sms_state", "KeyType": "HASH"},
        {"AttributeName": "state_since", "KeyType": "RANGE"},
    ]
    ttl = dynamodb.describe_time_to_live(TableName=stack.tables["journal"])["TimeToLiveDescription"]
    assert ttl == {"TimeToLiveStatus": "ENABLED", "AttributeName": "expiration"}
    conversations = dynamodb.describe_table(TableName=stack.tables["conversations"])["Table"]
    assert [k["AttributeName"] for k in conversations["KeySchema"]] == ["pk", "sk"]


def test_secrets_hold_the_local_values(stack: LocalResources) -> None:
    secrets = client("secretsmanager")

    def value(name: str) -> str:
        return secrets.get_secret_value(SecretId=stack.secrets[name])["SecretString"]

    settings = LocalSettings()
    assert value("telegram") == settings.telegram_secret
    assert value("crm") == settings.crm_signing_key
    assert value("crm_token") == settings.crm_token
    assert json.loads(value("crm_api")) == {
        "kind": "webhook",
        "url": "http://127.0.0.1:1111/leads",
        "auth_header": "Bearer local",
    }
    assert value("telegram_bot_token") == settings.telegram_bot_token


def test_each_function_gets_the_environment_contract(stack: LocalResources) -> None:
    for consumer in stack.consumers:
        environment = stack.consumer_environment(consumer)
        assert environment["CONSUMER_NAME"] == consumer.name
        assert environment["QUEUE_URL"] == stack.queues[consumer.name].url
        assert environment["DLQ_URL"] == stack.queues[consumer.name].dlq_url
        assert environment["JOURNAL_TABLE"] == stack.tables["journal"]
        assert environment["IDEMPOTENCY_TTL_SECONDS"] == str(IDEMPOTENCY_TTL_SECONDS)
        for table in consumer.tables:
            assert environment[table_env_var(table)] == stack.tables[table]
        used = consumer.used_secrets(stack.deployment.registry_settings())
        for secret in used:
            assert environment[secret_env_var(secret)] == stack.secrets[secret]
        # Issue 23: a secret it does not read under this deployment (the HTTP SMS gateway's
        # token with End User Messaging) is neither in its environment nor created.
        for secret in set(consumer.secrets) - set(used):
            assert secret_env_var(secret) not in environment
            assert secret not in stack.secrets
        assert environment["POWERTOOLS_SERVICE_NAME"] == consumer.name
        # An ordered consumer publishes a notice per dead letter to the alarm topic, as in the stack.
        assert environment.get("ALARM_TOPIC_ARN") == (stack.alarm_topic_arn if consumer.ordered else None)
    assert any(consumer.ordered for consumer in stack.consumers)
    assert client("sns").get_topic_attributes(TopicArn=stack.alarm_topic_arn)["Attributes"]["TopicArn"]
    # The SMS gateway is the stack's default, End User Messaging, with the configuration set
    # whose delivery events the local runtime hands to `sms_events`.
    sms = stack.consumer_environment(by_name("sms"))
    assert stack.delivery_events is not None
    assert (sms["SMS_GATEWAY"], sms["SMS_CONFIGURATION_SET"]) == (
        "end_user_messaging",
        stack.delivery_events.configuration_set,
    )
    assert "SMS_HTTP_BASE_URL" not in sms
    assert stack.consumer_environment(by_name("ai"))["BEDROCK_MODEL_ID"] == LOCAL_BEDROCK_MODEL_ID
    assert stack.webhook_environment() == {
        "EVENTS_TOPIC_ARN": stack.topic_arn,
        "TELEGRAM_SECRET_ID": stack.secrets["telegram"],
        "CRM_SECRET_ID": stack.secrets["crm"],
        "CRM_TOKEN_SECRET_ID": stack.secrets["crm_token"],
        "BITRIX24_APP_TOKEN_SECRET_ID": stack.secrets["bitrix24_app_token"],
        "CRM_AUTH": "signature",
        "TELEGRAM_BOT_ID": "default",
        "SECRET_ROTATION_GRACE_SECONDS": "3600",
        "TELEGRAM_IP_ALLOWLIST": "",
        "PHONE_DEFAULT_REGION": "",
        "POWERTOOLS_SERVICE_NAME": "webhook",
        "POWERTOOLS_METRICS_NAMESPACE": "TelegramCrmPipeline",
        "POWERTOOLS_LOG_LEVEL": "INFO",
        # The `tracing` setting is off by default.
        "POWERTOOLS_TRACE_DISABLED": "true",
    }


def sms_settings(environment: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in environment.items() if k.startswith("SMS_") and not k.endswith("_SECRET_ID")}


def test_the_reconciler_and_sms_events_read_the_sms_settings_on_the_journal(stack: LocalResources) -> None:
    environments = stack.stack_environments()
    # The CRM stand-ins are connected locally: their history sweep runs too.
    assert set(environments) == {
        "webhook",
        "reconciler",
        "sms_events",
        "crm_sweep",
        *(c.name for c in stack.consumers),
    }
    worker = sms_settings(stack.consumer_environment(by_name("sms")))
    for name in ("reconciler", "sms_events"):
        environment = environments[name]
        assert sms_settings(environment) == worker, name
        assert environment["JOURNAL_TABLE"] == stack.tables["journal"]
        assert environment["POWERTOOLS_SERVICE_NAME"] == name
        assert not {"CONSUMER_NAME", "QUEUE_URL", "DLQ_URL", "SMS_GATEWAY_SECRET_ID"} & set(environment), name


def test_with_the_http_gateway_the_reconciler_gets_its_token_and_there_are_no_delivery_events(
    stack: LocalResources,
) -> None:
    # Inside the module's moto, under another stack name.
    settings = LocalSettings(deployment=PipelineSettings(stack_name="HttpSms"), sms_gateway="http")
    http = create_resources(client, settings, FAKES)

    environments = http.stack_environments()
    assert set(environments) == {"webhook", "reconciler", "crm_sweep", *(c.name for c in http.consumers)}
    sms = http.consumer_environment(by_name("sms"))
    assert (sms["SMS_GATEWAY"], sms["SMS_HTTP_BASE_URL"]) == ("http", FAKES["sms"])
    assert "SMS_CONFIGURATION_SET" not in sms
    assert http.delivery_events is None
    assert sms_settings(environments["reconciler"]) == sms_settings(sms)
    assert environments["reconciler"]["SMS_GATEWAY_SECRET_ID"] == http.secrets["sms_gateway"]


def test_delivery_events_reach_a_queue_as_sns_notifications_sms_events_can_read(
    stack: LocalResources,
) -> None:
    """The configuration set's topic delivers, not raw, to the queue standing for `sms_events`'
    subscription; each message becomes the SNS record Lambda would invoke it with."""
    events = stack.delivery_events
    assert events is not None
    sqs = client("sqs")
    attributes = sqs.get_queue_attributes(QueueUrl=events.queue.url, AttributeNames=["All"])["Attributes"]
    assert json.loads(attributes["RedrivePolicy"]) == {
        "deadLetterTargetArn": events.queue.dlq_arn,
        "maxReceiveCount": 3,  # Lambda's asynchronous attempts, then the on-failure destination
    }
    [subscription] = client("sns").list_subscriptions_by_topic(TopicArn=events.topic_arn)["Subscriptions"]
    assert (subscription["Endpoint"], subscription["SubscriptionArn"]) == (
        events.queue.arn,
        events.subscription_arn,
    )
    event = {"eventType": "TEXT_DELIVERED", "eventTimestamp": 1, "messageId": "m-1", "context": {"k": "v"}}

    client("sns").publish(TopicArn=events.topic_arn, Message=json.dumps(event))

    [message] = sqs.receive_message(QueueUrl=events.queue.url, WaitTimeSeconds=1)["Messages"]
    sqs.delete_message(QueueUrl=events.queue.url, ReceiptHandle=message["ReceiptHandle"])
    lambda_event = {"Records": [sns_record(json.loads(message["Body"]), events.subscription_arn)]}
    [record] = SNSEvent(lambda_event).records
    assert (record.event_source, record.event_subscription_arn) == ("aws:sns", events.subscription_arn)
    assert (record.sns.topic_arn, record.sns.get_type) == (events.topic_arn, "Notification")
    assert json.loads(record.sns.message) == event
    assert record.sns.message_id and record.sns.timestamp


def test_without_a_model_id_the_ai_consumer_does_not_exist(stack: LocalResources) -> None:
    # Inside the module's moto, under another stack name.
    settings = LocalSettings(deployment=PipelineSettings(stack_name="NoAi"), ai_consumer=False)

    without_ai = create_resources(client, settings, FAKES)

    assert "ai" not in without_ai.queues
    assert "ai" not in {c.name for c in without_ai.consumers}
    assert "ai" in stack.queues


def test_settings_follow_the_cdk_context(tmp_path: Path) -> None:
    cdk_json = tmp_path / "cdk.json"
    cdk_json.write_text(
        json.dumps(
            {
                "context": {
                    "telegram_bot_id": "shop",
                    "idempotency_ttl_seconds": str(LONGER_TTL),
                    "@aws-cdk/core:someFlag": True,  # the CDK's own keys are ignored
                }
            }
        )
    )

    settings = LocalSettings.from_cdk_json(cdk_json, context={"log_level": "DEBUG"}, region="us-east-1")

    assert settings.deployment == PipelineSettings(
        telegram_bot_id="shop", idempotency_ttl_seconds=LONGER_TTL, log_level="DEBUG"
    )
    assert (settings.telegram_bot_id, settings.region) == ("shop", "us-east-1")
    assert LocalSettings.from_cdk_json(tmp_path / "absent.json") == LocalSettings()


def test_cdk_context_the_stack_would_refuse_is_refused_locally_too(tmp_path: Path) -> None:
    cdk_json = tmp_path / "cdk.json"
    cdk_json.write_text(json.dumps({"context": {"log_retention_days": "31"}}))

    with pytest.raises(ValidationError, match="log_retention_days"):
        LocalSettings.from_cdk_json(cdk_json)


@pytest.mark.parametrize(
    ("running", "swept"),
    [(("sms",), None), (("bitrix24", "sms"), "bitrix24"), (("amocrm", "bitrix24", "sms"), "bitrix24,amocrm")],
)
def test_the_sweep_reads_only_the_crms_whose_consumer_runs(
    running: tuple[str, ...], swept: str | None
) -> None:
    """A runtime started with some consumers has only their secrets: the sweep must not need the others'."""
    settings = LocalSettings(deployment=PipelineSettings(stack_name=f"Sweep{len(running)}"))
    consumers = tuple(by_name(name) for name in running)
    with local_resources_in_moto(settings, FAKES, consumers) as resources:
        environment = resources.stack_environments().get("crm_sweep")

    assert (environment or {}).get("CRM_SWEEP_SOURCES") == swept
