"""A deployed-looking stack for the console's whole-value tests (issue 40): chats 12, 123 and -12,
CRM orders 4 and 42, each with its log line and its bot state, on whatever AWS boto3 reaches
(moto in-process for the HTTP tests, a moto server for the browser's console process)."""

from __future__ import annotations

import json
import time

import boto3

from infra.outputs import OutputKey
from infra.tables import TABLE_KEYS
from pipeline.telegram_bot.state import item_attributes
from tests.unit.ops.support import create_resources

STACK = "Guard"
LOG_GROUP = "/aws/lambda/guard-webhook"
BOT_STATE_TABLE = "pipeline-bot-state"
CHATS = {12: "telegram:default:1012", 123: "telegram:default:1123", -12: "telegram:default:1912"}
ORDERS = {"4": "crm:e-4", "42": "crm:e-42"}


def published(event_id: str, source: str, kind: str, group: str, at: int) -> dict[str, object]:
    return {
        "timestamp": at,
        "message": json.dumps(
            {
                "service": "webhook",
                "message": "Event published",
                "event_id": event_id,
                "source": source,
                "type": kind,
                "message_group": group,
                "timestamp": f"2026-01-01T00:00:{at % 60:02d}Z",
            }
        ),
    }


def create_bot_state_table(name: str) -> None:
    """The bot_state table with its key and index schema as deployed (infra.tables)."""
    keys = TABLE_KEYS["bot_state"]
    boto3.client("dynamodb").create_table(
        TableName=name,
        KeySchema=[{"AttributeName": keys.partition, "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": key, "AttributeType": "S"} for key in keys.key_attributes],
        GlobalSecondaryIndexes=[
            {
                "IndexName": index.name,
                "KeySchema": [
                    {"AttributeName": index.partition, "KeyType": "HASH"},
                    *([{"AttributeName": index.sort, "KeyType": "RANGE"}] if index.sort else []),
                ],
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
            for index in keys.indexes
        ],
        BillingMode="PAY_PER_REQUEST",
    )


def seed_console_stack() -> dict[str, str]:
    """The stack `STACK` (outputs, its log group) with each chat's and order's event and state."""
    deployed = create_resources()
    create_bot_state_table(BOT_STATE_TABLE)
    dynamodb = boto3.client("dynamodb")
    for chat in CHATS:  # as the bot writes them
        for pk, data in (
            (f"chat#{chat}", {"of": chat}),
            (f"user#{chat}", {"user": chat}),
            (f"conversation#order#[{chat},{chat}]", "ASK"),
        ):
            dynamodb.put_item(TableName=BOT_STATE_TABLE, Item=item_attributes(pk, json.dumps(data), 1))
    outputs = {**deployed.outputs, OutputKey.table_name("bot_state"): BOT_STATE_TABLE}
    template = {
        "Resources": {
            "WebhookLogs": {"Type": "AWS::Logs::LogGroup", "Properties": {"LogGroupName": LOG_GROUP}},
            "Topic": {"Type": "AWS::SNS::Topic"},
        },
        "Outputs": {key: {"Value": value} for key, value in outputs.items()},
    }
    boto3.client("cloudformation").create_stack(StackName=STACK, TemplateBody=json.dumps(template))
    logs = boto3.client("logs")
    logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName="s")
    now = int(time.time() * 1000)
    lines = [
        published(event_id, "telegram", "message", f"telegram:default:chat:{chat}", now + index)
        for index, (chat, event_id) in enumerate(CHATS.items())
    ]
    lines += [
        published(event_id, "crm", "order.status_changed", f"crm:order:{order}", now + 10 + index)
        for index, (order, event_id) in enumerate(ORDERS.items())
    ]
    logs.put_log_events(logGroupName=LOG_GROUP, logStreamName="s", logEvents=lines)
    return outputs
