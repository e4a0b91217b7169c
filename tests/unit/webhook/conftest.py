"""Fixtures for the webhook: moto SNS -> SQS (to read what was published), secrets, logs."""

from __future__ import annotations

import importlib
import uuid
from collections import Counter
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from moto import mock_aws

from pipeline import aws, secrets
from tests.unit.consumer_support import CurrentStdout, FakeLambdaContext
from tests.unit.webhook.support import (
    BOT_ID,
    CRM_KEY,
    CRM_TOKEN,
    TELEGRAM_TOKEN,
    CapturedOutput,
    Invoke,
    Pipeline,
)

AWS_TEST_ENV = {
    "AWS_DEFAULT_REGION": "eu-central-1",
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
}


def _clear_secret_caches() -> None:
    secrets.clear_cache()


def _clean_aws_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in AWS_TEST_ENV.items():
        monkeypatch.setenv(name, value)
    for name in ("AWS_ENDPOINT_URL", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def moto_backend() -> Iterator[None]:
    """One moto backend and one set of clients per test module.

    Building boto3 clients costs ~70 ms each; per module they are built once. Tests stay
    independent: each gets its own topic, queue and secrets (`pipeline`) and empty secret caches,
    and the clients are dropped when the module ends.
    """
    with pytest.MonkeyPatch.context() as monkeypatch:
        _clean_aws_env(monkeypatch)
        with mock_aws():
            aws.reset_clients()
            _clear_secret_caches()
            yield
            aws.reset_clients()
            _clear_secret_caches()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean_aws_env(monkeypatch)
    for name, value in {
        "POWERTOOLS_TRACE_DISABLED": "1",
        "POWERTOOLS_SERVICE_NAME": "webhook",
        "POWERTOOLS_METRICS_NAMESPACE": "TelegramCrmPipeline",
        "POWERTOOLS_LOG_LEVEL": "INFO",
        "TELEGRAM_BOT_ID": BOT_ID,
        "SECRET_ROTATION_GRACE_SECONDS": "3600",
    }.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def pipeline(moto_backend: None, env: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipeline]:
    """A fresh FIFO topic (as the stack's) with a subscribed standard queue (moto keeps no
    topic-level deduplication, so the queue sees every publish), and the webhook secrets."""
    _clear_secret_caches()
    suffix = uuid.uuid4().hex[:12]
    sns, sqs, secretsmanager = aws.client("sns"), aws.client("sqs"), aws.client("secretsmanager")
    topic_arn = sns.create_topic(
        Name=f"events-{suffix}.fifo", Attributes={"FifoTopic": "true", "ContentBasedDeduplication": "false"}
    )["TopicArn"]
    queue_url = sqs.create_queue(QueueName=f"all-events-{suffix}")["QueueUrl"]
    attributes = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]
    sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=attributes["QueueArn"])
    telegram_secret = secretsmanager.create_secret(Name=f"telegram-{suffix}", SecretString=TELEGRAM_TOKEN)
    crm_secret = secretsmanager.create_secret(Name=f"crm-{suffix}", SecretString=CRM_KEY)
    crm_token = secretsmanager.create_secret(Name=f"crm-token-{suffix}", SecretString=CRM_TOKEN)
    monkeypatch.setenv("EVENTS_TOPIC_ARN", topic_arn)
    monkeypatch.setenv("TELEGRAM_SECRET_ID", telegram_secret["ARN"])
    monkeypatch.setenv("CRM_SECRET_ID", crm_secret["ARN"])
    monkeypatch.setenv("CRM_TOKEN_SECRET_ID", crm_token["ARN"])
    monkeypatch.delenv("CRM_AUTH", raising=False)  # the stack's default: signatures only

    calls: Counter[str] = Counter()
    publishes: list[dict[str, Any]] = []

    def count(model: Any, **_: Any) -> None:
        calls[model.name] += 1

    def record_publish(params: dict[str, Any], **_: Any) -> None:
        publishes.append(dict(params))

    sns.meta.events.register("before-parameter-build.sns.Publish", record_publish)

    # Every AWS call the webhook makes goes through these cached clients: count them.
    for client in (sns, secretsmanager):
        client.meta.events.register("before-call", count)
    secret_ids = (telegram_secret["ARN"], crm_secret["ARN"])
    yield Pipeline(
        topic_arn, queue_url, *secret_ids, calls, crm_token_secret_id=crm_token["ARN"], publishes=publishes
    )
    for client in (sns, secretsmanager):
        client.meta.events.unregister("before-call", count)
    sns.meta.events.unregister("before-parameter-build.sns.Publish", record_publish)
    _clear_secret_caches()


@pytest.fixture
def webhook(env: None) -> ModuleType:
    """`webhook.app`, imported once the Powertools environment is set."""
    return importlib.import_module("webhook.app")


@pytest.fixture
def invoke(pipeline: Pipeline, webhook: ModuleType) -> Invoke:
    def call(event: dict[str, Any]) -> dict[str, Any]:
        response: dict[str, Any] = webhook.lambda_handler(event, FakeLambdaContext("webhook"))
        return response

    return call


@pytest.fixture
def output(
    capsys: pytest.CaptureFixture[str], webhook: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> CapturedOutput:
    """Everything the function prints (JSON logs and EMF metrics).

    Powertools' Logger binds its stream handler to the `sys.stdout` of import time; make it
    follow the current one so capsys sees the logs.
    """
    monkeypatch.setattr(webhook.logger.registered_handler, "stream", CurrentStdout())
    return CapturedOutput(capsys)
