"""Save every Telegram update into the conversations table, one item per update.

The key is derived from the update alone (`chat#<chat_id>` / `update#<update_id:012d>`), so a put
of the same update writes the same item: the store is idempotent by key even without the
worker's journal. The original update is kept as a JSON string, which sidesteps DynamoDB's
refusal of floats and its number-precision rules.
"""

from __future__ import annotations

import os
import re
from typing import Any

from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from pipeline import aws
from pipeline.envelope import Envelope, dumps
from pipeline.errors import ConsumerError, PermanentError, TransientError
from pipeline.formats import SCHEMA_VERSION
from pipeline.formats import by_name as by_format
from pipeline.retention import conversation_expiration
from pipeline.telegram import chat_of, integer_id, user_of

# Its table is written through boto3's resource: built at the init (`pipeline.aws.prepare`).
aws.prepare(resources=("dynamodb",))

# DynamoDB error codes worth retrying: capacity, throttling and server-side faults.
TRANSIENT_CODES = frozenset(
    {
        "InternalServerError",
        "LimitExceededException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
        "ServiceUnavailable",
        "ThrottlingException",
        "TransactionConflictException",
    }
)
# Codes that the same request will hit again however often it is retried.
PERMANENT_CODES = frozenset({"ValidationException", "ItemCollectionSizeLimitExceededException"})
NETWORK_ERRORS = (ConnectionClosedError, ConnectTimeoutError, EndpointConnectionError, ReadTimeoutError)


def conversation_key(update: dict[str, Any], kind: str) -> dict[str, str]:
    """`pk`/`sk` of an update: its chat, else its user, else its kind; then its update id."""
    update_id = update.get("update_id")
    if not isinstance(update_id, int) or isinstance(update_id, bool) or update_id < 0:
        raise PermanentError("update has no non-negative integer update_id")
    chat_id, user_id = integer_id(chat_of(update, kind)), integer_id(user_of(update, kind))
    if chat_id is not None:
        pk = f"chat#{chat_id}"
    elif user_id is not None:
        pk = f"user#{user_id}"
    else:
        pk = f"update#{kind}"
    return {"pk": pk, "sk": f"update#{update_id:012d}"}


# The conversation item's format (`pipeline.formats`; the `ai` consumer writes the same item).
FORMAT = by_format("conversation_update")
TAG_FORMAT = by_format("conversation_tag")
# A deep link `t.me/<bot>?start=<payload>` arrives as the private message "/start <payload>";
# Telegram allows A-Z, a-z, 0-9, _ and - in it, up to 64 characters. The store keeps the payload
# as the chat's tag (`tag#<payload>`), which `ops broadcast create --tag` selects by.
_START_PAYLOAD = re.compile(r"/start(?:@\w+)? ([A-Za-z0-9_-]{1,64})")


def conversation_item(envelope: Envelope) -> dict[str, Any]:
    """The item for one update; optional attributes are left out rather than stored empty."""
    if envelope.source != "telegram":
        raise PermanentError(f"store takes Telegram updates, got a {envelope.source} event")
    update, kind = envelope.payload, envelope.type
    chat, user = chat_of(update, kind), user_of(update, kind)
    kind_object = update.get(kind)
    text = None
    if isinstance(kind_object, dict):
        text = kind_object.get("text") or kind_object.get("caption")
    optional = {
        "chat_id": integer_id(chat),
        "chat_type": chat.get("type") if chat else None,
        "from_user_id": integer_id(user),
        "text": text if isinstance(text, str) else None,
    }
    return {
        **conversation_key(update, kind),
        SCHEMA_VERSION: FORMAT.version,
        "event_id": envelope.event_id,
        "type": kind,
        "received_at": envelope.received_at.isoformat(),
        "correlation_id": envelope.correlation_id,
        "payload": dumps(update),
        **{name: value for name, value in optional.items() if value is not None},
    }


def tag_item(envelope: Envelope) -> dict[str, Any] | None:
    """The chat's tag item when the update is a private "/start <payload>" (a deep link), else None."""
    update = envelope.payload
    if envelope.type != "message" or not isinstance(update.get("message"), dict):
        return None
    message = update["message"]
    chat, text = message.get("chat"), message.get("text")
    if not isinstance(chat, dict) or chat.get("type") != "private" or not isinstance(text, str):
        return None
    found = _START_PAYLOAD.fullmatch(text.strip())
    chat_id = integer_id(chat)
    if found is None or chat_id is None:
        return None
    return {
        "pk": f"chat#{chat_id}",
        "sk": f"tag#{found.group(1)}",
        SCHEMA_VERSION: TAG_FORMAT.version,
        "chat_id": chat_id,
        "tagged_at": envelope.received_at.isoformat(),
        "event_id": envelope.event_id,
    }


def classify(error: ClientError) -> ConsumerError | None:
    """The worker's view of a DynamoDB error; None for unknown codes (retried, then DLQ as is)."""
    code = aws.error_code(error)
    status = error.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    if code in TRANSIENT_CODES or status >= 500:
        return TransientError(f"DynamoDB {code or status}, retry later")
    if code in PERMANENT_CODES:
        return PermanentError(f"DynamoDB refused the item: {code}")
    return None


def save_update(envelope: Envelope) -> dict[str, str]:
    """Write the update's attributes to its item; returns its key (saved in the idempotency journal)."""
    table_name = os.environ.get("CONVERSATIONS_TABLE")
    if not table_name:
        raise PermanentError("CONVERSATIONS_TABLE is not set")
    item = conversation_item(envelope)
    key = {"pk": item["pk"], "sk": item["sk"]}
    expiration = conversation_expiration(envelope.received_at)
    table = aws.resource("dynamodb").Table(table_name)
    try:
        # The tag first: a failure after it retries the record, which writes both again (same keys).
        tag = tag_item(envelope)
        if tag is not None:
            _set(table, tag, expiration)
        # An update, not a put: the `ai` consumer may already have added its result to this item.
        _set(table, item, expiration)
    except ClientError as error:
        classified = classify(error)
        if classified is None:
            raise
        raise classified from error
    except NETWORK_ERRORS as error:
        raise TransientError(f"DynamoDB unreachable: {type(error).__name__}") from error
    return key


def _set(table: Any, item: dict[str, Any], expiration: int) -> None:
    """Write the item's attributes (and its expiration) to its key, leaving others it has alone."""
    key = {"pk": item["pk"], "sk": item["sk"]}
    values = {name: value for name, value in item.items() if name not in key}
    values["expiration"] = expiration
    table.update_item(
        Key=key,
        UpdateExpression="SET " + ", ".join(f"#{name} = :{name}" for name in values),
        ExpressionAttributeNames={f"#{name}": name for name in values},
        ExpressionAttributeValues={f":{name}": value for name, value in values.items()},
    )
