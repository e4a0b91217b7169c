"""Helpers for the ops CLI tests: a deployed-looking stack in moto, and a fake Bot API.

The stack is a real moto CloudFormation stack whose outputs point at real moto SQS queues,
Secrets Manager secrets and a DynamoDB journal table, so the CLI goes through the same
`describe_stacks` -> resources path as against AWS.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import boto3
from aiogram.methods import DeleteWebhook, GetWebhookInfo, SetWebhook, TelegramMethod
from aiogram.types import Update
from pydantic import ValidationError

from infra.outputs import OutputKey
from ops.stack import DEFAULT_STACK_NAME
from pipeline.envelope import Envelope, telegram_event_id
from pipeline.registry import CONSUMERS
from pipeline.sms.journal import BY_STATE_INDEX

BOT_TOKEN = "123456789:AAH-test-token_for-ops-cli-0123456789"
TELEGRAM_SECRET = "initialSecretToken_" + "x" * 45
CRM_SIGNING_KEY = "crm-signing-key-0123456789abcdefghijklmnopqrstuvwxyz"
CRM_TOKEN = "crm-token-0123456789abcdefghijklmnopqrstuvwxyzABCDEF"
WEBHOOK_URL = "https://abc123.execute-api.eu-central-1.amazonaws.com/telegram"
# The stack these tests operate has the default consumers and `crm` (crm_leads=true, the lead
# sink the tests dead-letter into); `ai` and the CRM sources are off: no queues for them.
DEPLOYED_SETTINGS = {"crm_leads": True}
DEPLOYED_CONSUMERS = tuple(
    c.name for c in CONSUMERS if DEPLOYED_SETTINGS.get(c.requires_setting, c.requires_setting is None)
)

ENV_TO_CLEAR = (
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
    "AWS_ENDPOINT_URL_PINPOINT_SMS_VOICE_V2",
    "AWS_PROFILE",
    "AWS_REGION",
    "TELEGRAM_BOT_TOKEN",
    "TELEGRAM_API_BASE",
)


# -- the stack ------------------------------------------------------------------------------------
@dataclass
class Deployed:
    queue_urls: dict[str, str]
    dlq_urls: dict[str, str]
    delivery_dlq_urls: dict[str, str]
    telegram_secret_id: str
    bot_token_secret_id: str
    journal_table: str
    outputs: dict[str, str] = field(default_factory=dict)


def create_resources() -> Deployed:
    """Queues, secrets and the journal table, as the CDK stack creates them."""
    sqs = boto3.client("sqs")
    queue_urls, dlq_urls, delivery_dlq_urls = {}, {}, {}
    for name in DEPLOYED_CONSUMERS:
        delivery_dlq_urls[name] = sqs.create_queue(QueueName=f"pipeline-{name}-delivery-dlq")["QueueUrl"]
        dlq_urls[name] = sqs.create_queue(QueueName=f"pipeline-{name}-dlq")["QueueUrl"]
        dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_urls[name], AttributeNames=["QueueArn"])[
            "Attributes"
        ]["QueueArn"]
        queue_urls[name] = sqs.create_queue(
            QueueName=f"pipeline-{name}",
            Attributes={
                "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "5"})
            },
        )["QueueUrl"]
    secrets = boto3.client("secretsmanager")
    telegram = secrets.create_secret(Name="pipeline/telegram-secret-token", SecretString=TELEGRAM_SECRET)[
        "ARN"
    ]
    secrets.create_secret(Name="pipeline/crm-signing-key", SecretString=CRM_SIGNING_KEY)
    bot_token = secrets.create_secret(Name="pipeline/telegram-bot-token", SecretString=BOT_TOKEN)["ARN"]
    secrets.create_secret(Name="pipeline/crm-token", SecretString=CRM_TOKEN)
    boto3.client("dynamodb").create_table(
        TableName="pipeline-journal",
        KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
        AttributeDefinitions=[
            {"AttributeName": name, "AttributeType": "S"} for name in ("id", "sms_state", "state_since")
        ],
        GlobalSecondaryIndexes=[
            {
                "IndexName": BY_STATE_INDEX,
                "KeySchema": [
                    {"AttributeName": "sms_state", "KeyType": "HASH"},
                    {"AttributeName": "state_since", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
        ],
        BillingMode="PAY_PER_REQUEST",
    )
    deployed = Deployed(queue_urls, dlq_urls, delivery_dlq_urls, telegram, bot_token, "pipeline-journal")
    deployed.outputs = {
        OutputKey.WEBHOOK_URL: WEBHOOK_URL,
        OutputKey.CRM_URL: WEBHOOK_URL.replace("/telegram", "/crm"),
        OutputKey.TELEGRAM_SECRET_ID: telegram,
        OutputKey.CRM_SECRET_ID: "pipeline/crm-signing-key",
        OutputKey.BOT_TOKEN_SECRET_ID: bot_token,
        OutputKey.CRM_TOKEN_SECRET_ID: "pipeline/crm-token",
        OutputKey.JOURNAL_TABLE: "pipeline-journal",
        **{OutputKey.queue_url(name): url for name, url in queue_urls.items()},
        **{OutputKey.dlq_url(name): url for name, url in dlq_urls.items()},
        **{OutputKey.delivery_dlq_url(name): url for name, url in delivery_dlq_urls.items()},
    }
    return deployed


def create_stack(deployed: Deployed, stack_name: str = DEFAULT_STACK_NAME) -> None:
    template = {
        "Resources": {"EventsTopic": {"Type": "AWS::SNS::Topic"}},
        "Outputs": {
            OutputKey.EVENTS_TOPIC_ARN: {"Value": {"Ref": "EventsTopic"}},
            **{key: {"Value": value} for key, value in deployed.outputs.items()},
        },
    }
    boto3.client("cloudformation").create_stack(StackName=stack_name, TemplateBody=json.dumps(template))


# -- the fake Telegram Bot API ----------------------------------------------------------------------
METHOD_MODELS: dict[str, type[TelegramMethod[Any]]] = {
    model.__api_method__: model for model in (SetWebhook, GetWebhookInfo, DeleteWebhook)
}


@dataclass
class FakeTelegram:
    """Records every call; a param aiogram's method model refuses (or does not know) is a test failure."""

    url: str = ""
    token: str = BOT_TOKEN
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    invalid: list[str] = field(default_factory=list)
    webhook_info: dict[str, Any] = field(
        default_factory=lambda: {"url": "", "has_custom_certificate": False, "pending_update_count": 0}
    )
    fail_with: tuple[int, str] | None = None

    def methods(self) -> list[str]:
        return [method for method, _ in self.calls]

    def params(self, method: str) -> list[dict[str, Any]]:
        return [params for name, params in self.calls if name == method]

    def answer(self, path: str, params: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        prefix, _, method = path.lstrip("/").partition("/")
        if prefix != f"bot{self.token}":
            return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
        model = METHOD_MODELS.get(method)
        if model is None:
            return 404, {"ok": False, "error_code": 404, "description": "Not Found"}
        unknown = set(params) - set(model.model_fields)
        try:
            model.model_validate(params)
        except ValidationError as error:
            # Locations and error types only: the input values include the secret_token.
            problems = [(e["loc"], e["type"]) for e in error.errors(include_input=False)]
            self.invalid.append(f"{method}: {problems}")
        if unknown:
            self.invalid.append(f"{method}: unknown params {sorted(unknown)}")
        self.calls.append((method, params))
        if self.fail_with is not None:
            code, description = self.fail_with
            return code, {"ok": False, "error_code": code, "description": description}
        result: Any = self.webhook_info if method == "getWebhookInfo" else True
        return 200, {"ok": True, "result": result}


# -- running the CLI ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str


# -- DLQ contents ---------------------------------------------------------------------------------
CUSTOMER_PHONE = "+79161234567"


def contact_update(update_id: int) -> dict[str, Any]:
    """A private chat's shared contact: the kind of payload that must never be printed."""
    user = {"id": 4242, "is_bot": False, "first_name": "Ann"}
    update = {
        "update_id": update_id,
        "message": {
            "message_id": update_id,
            "date": 1_767_225_600,
            "chat": {"id": 4242, "type": "private", "first_name": "Ann"},
            "from": user,
            "contact": {"phone_number": CUSTOMER_PHONE, "first_name": "Ann", "user_id": 4242},
        },
    }
    Update.model_validate(update)
    return update


def envelope_body(update_id: int) -> str:
    return Envelope(
        event_id=telegram_event_id("default", update_id),
        source="telegram",
        type="message",
        correlation_id=f"corr-{update_id}",
        received_at=datetime(2026, 1, 1, tzinfo=UTC),
        payload=contact_update(update_id),
    ).to_json()


def dead_letter(
    queue_url: str, update_id: int, reason: str = "permanent: CRM answered 422", sqs: Any = None
) -> None:
    """What the worker sends to a DLQ: the envelope, routing attributes and the reason."""
    (sqs or boto3.client("sqs")).send_message(
        QueueUrl=queue_url,
        MessageBody=envelope_body(update_id),
        MessageAttributes={
            "source": {"DataType": "String", "StringValue": "telegram"},
            "type": {"DataType": "String", "StringValue": "message"},
            "dead_letter_reason": {"DataType": "String", "StringValue": reason},
            "dead_letter_consumer": {"DataType": "String", "StringValue": "crm"},
        },
    )


def drain(queue_url: str) -> list[dict[str, Any]]:
    """Every message of a queue (received and deleted)."""
    sqs = boto3.client("sqs")
    messages: list[dict[str, Any]] = []
    while batch := sqs.receive_message(
        QueueUrl=queue_url, MaxNumberOfMessages=10, MessageAttributeNames=["All"], VisibilityTimeout=30
    ).get("Messages", []):
        messages.extend(batch)
        sqs.delete_message_batch(
            QueueUrl=queue_url,
            Entries=[{"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(batch)],
        )
    return messages


def depth(queue_url: str, sqs: Any = None) -> int:
    attributes = (sqs or boto3.client("sqs")).get_queue_attributes(
        QueueUrl=queue_url, AttributeNames=["ApproximateNumberOfMessages"]
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"])
