"""Classify a message's intent and extract lead fields with the Bedrock Converse API.

Off unless configured: with BEDROCK_MODEL_ID empty the record is acknowledged ("ai disabled")
and Bedrock is never called. Messages without text (or caption) are skipped, and so are bare
commands (a text that is only a bot command, `/start` or `/help@MyShopBot`): nothing to analyze.

The result is written as attribute `ai` of the conversation item (`chat#<chat_id>` /
`update#<update_id:012d>`) with `update_item`, which creates the item if the store consumer has
not written it yet and leaves its other attributes alone if it has.

Bedrock errors: throttling, unavailability and model timeouts retry; a request the model can
never accept (validation, no access to the model, unknown model) dead-letters with the code.
Unknown codes fall through to the worker, which retries them and dead-letters them at the end.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotocoreConnectionError

from ai.extraction import SYSTEM_PROMPT, parse_extraction
from pipeline import aws
from pipeline.envelope import Envelope
from pipeline.errors import PermanentError, TransientError
from pipeline.formats import SCHEMA_VERSION
from pipeline.formats import by_name as by_format
from pipeline.registry import MESSAGE_KINDS
from pipeline.retention import conversation_expiration
from pipeline.telegram import TelegramUpdate, bot_command, chat_of, integer_id

logger = Logger(child=True)
metrics = Metrics()

# Bedrock's client and the conversations table's resource, built at the init (`pipeline.aws.prepare`).
aws.prepare(clients=("bedrock-runtime",), resources=("dynamodb",))

MAX_INPUT_CHARS = 4_000
MAX_OUTPUT_TOKENS = 400
RAW_KEPT_CHARS = 4_000
TRANSIENT_CODES = frozenset(
    {
        "ThrottlingException",
        "ServiceUnavailableException",
        "ModelTimeoutException",
        "ModelNotReadyException",
        "InternalServerException",
    }
)
PERMANENT_CODES = frozenset({"ValidationException", "AccessDeniedException", "ResourceNotFoundException"})


def converse(model_id: str, text: str) -> tuple[str, str | None]:
    """The model's text answer and stop reason, or a classified error."""
    try:
        response = aws.client("bedrock-runtime").converse(
            modelId=model_id,
            system=[{"text": SYSTEM_PROMPT}],
            messages=[{"role": "user", "content": [{"text": text[:MAX_INPUT_CHARS]}]}],
            inferenceConfig={"maxTokens": MAX_OUTPUT_TOKENS, "temperature": 0},
        )
    except ClientError as error:
        details = error.response.get("Error", {})
        code = details.get("Code", "")
        reason = f"bedrock converse: {code}: {str(details.get('Message', ''))[:200]}"
        if code in TRANSIENT_CODES:
            raise TransientError(reason) from None
        if code in PERMANENT_CODES:
            raise PermanentError(reason) from None
        raise
    except (BotocoreConnectionError, HTTPClientError) as error:
        raise TransientError(f"bedrock converse: {type(error).__name__}") from None
    content = response.get("output", {}).get("message", {}).get("content", [])
    raw = "".join(block["text"] for block in content if isinstance(block, Mapping) and "text" in block)
    return raw, response.get("stopReason")


def analysis(raw: str, stop_reason: str | None, model_id: str, event_id: str) -> dict[str, Any]:
    """The `ai` attribute: the validated fields, or `unparsed` with the model's raw text."""
    extraction = parse_extraction(raw)
    common = {
        "model_id": model_id,
        "event_id": event_id,
        "stop_reason": stop_reason,
        "analyzed_at": datetime.now(UTC).isoformat(),
    }
    if extraction is None:
        return {"status": "unparsed", "raw": raw[:RAW_KEPT_CHARS], **common}
    return {"status": "parsed", **extraction.present(), **common}


@dataclass(frozen=True)
class Skipped:
    """Why an update is not sent to Bedrock: `reason` goes in the worker's result, `log` is the line."""

    reason: str
    log: str
    command: str | None = None


def to_analyze(envelope: Envelope) -> tuple[str, int] | Skipped:
    """The text this consumer sends to Bedrock and the chat whose item gets the result, or why it
    sends nothing: a message without text (or caption) or chat, or a bare command. The benchmarks
    ask it too (`bench.pipeline`: which updates the ai consumer acts on)."""
    message = envelope.payload.get(envelope.type) if envelope.type in MESSAGE_KINDS else None
    text = None
    if isinstance(message, Mapping):
        text = message.get("text") or message.get("caption")
    chat_id = integer_id(chat_of(envelope.payload, envelope.type))
    if not isinstance(text, str) or not text.strip() or chat_id is None:
        return Skipped("no text", "no text to analyze")
    found = bot_command(TelegramUpdate.parse(envelope.payload))
    if found is not None and found.bare:
        return Skipped("bare command", "bare command, not analyzed", found.name)
    return text, chat_id


def analyze(envelope: Envelope) -> dict[str, Any]:
    """The worker's `process` for the ai consumer."""
    model_id = os.environ.get("BEDROCK_MODEL_ID", "").strip()
    if not model_id:
        logger.info("ai disabled")
        return {"ai": "disabled"}
    subject = to_analyze(envelope)
    if isinstance(subject, Skipped):
        logger.info(subject.log, extra={"command": subject.command} if subject.command else None)
        return {"ai": "skipped", "reason": subject.reason}
    text, chat_id = subject
    update_id = envelope.payload.get("update_id")
    if not isinstance(update_id, int) or isinstance(update_id, bool) or update_id < 0:
        raise PermanentError("update has no non-negative integer update_id")

    raw, stop_reason = converse(model_id, text)
    result = analysis(raw, stop_reason, model_id, envelope.event_id)
    aws.resource("dynamodb").Table(os.environ["CONVERSATIONS_TABLE"]).update_item(
        Key={"pk": f"chat#{chat_id}", "sk": f"update#{update_id:012d}"},
        # The store consumer may not have written the item yet: the same TTL as it gives it.
        UpdateExpression="SET #ai = :ai, #v = :v, #expiration = if_not_exists(#expiration, :expiration)",
        ExpressionAttributeNames={"#ai": "ai", "#v": SCHEMA_VERSION, "#expiration": "expiration"},
        ExpressionAttributeValues={
            ":ai": result,
            ":v": by_format("conversation_update").version,
            ":expiration": conversation_expiration(envelope.received_at),
        },
    )
    metric = "AiParsed" if result["status"] == "parsed" else "AiUnparsed"
    metrics.add_metric(name=metric, unit=MetricUnit.Count, value=1)
    logger.info("message analyzed", extra={"status": result["status"], "intent": result.get("intent")})
    return {"ai": result["status"], "intent": result.get("intent")}
