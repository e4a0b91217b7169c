"""The baseline of `bench latency`: the single-function bot this pipeline replaces. Never deployed.

One Lambda behind the HTTP API does everything before it answers Telegram: checks the secret
token header, parses the update, saves it to the conversations table, answers a command with
`sendMessage`, pushes a new contact's lead to the CRM, then answers 200. It is built from the
same code the pipeline runs (the webhook's secret check, `pipeline.telegram`, the `store` item,
the `autoreply` reply table and Bot API client, the `crm` lead and sink), so the two differ in
where the work happens, not in what it is; it carries the same Powertools logger, tracer and
metrics as every function here. No idempotency journal, no retries: a failure answers 500 and
Telegram resends (a single-function bot's usual shape).

The benchmark serves it with `python -m local.apigw --handler bench.inline_bot.lambda_handler`,
in its own process with the union of the webhook's and the consumers' environments.
"""

from __future__ import annotations

import hmac
import json
import os
from typing import Any

from autoreply.logic import reply_text
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext
from crm.leads import lead_from_envelope
from crm.sinks import sink_from_config
from store.logic import conversation_item

from pipeline import aws, http, publication, secrets, telegram
from pipeline.bot_api import BotApi
from pipeline.observability import http_correlation_id, service_tracer

SECRET_HEADER = "x-telegram-bot-api-secret-token"

logger = Logger(service="inline_bot")
tracer = service_tracer()
metrics = Metrics()
# Built at the init, as the pipeline's functions build theirs (`pipeline.aws.prepare`): the secrets'
# client and the HTTPS opener (its table's resource: `store.logic`, imported above).
aws.prepare(clients=("secretsmanager",))
http.prepare()


def _answer(status: int, body: dict[str, Any]) -> dict[str, Any]:
    return {"statusCode": status, "headers": {"Content-Type": "application/json"}, "body": json.dumps(body)}


def _token_ok(token: str | None) -> bool:
    if not token:
        return False
    return secrets.check_with_refresh(
        os.environ["TELEGRAM_SECRET_ID"],
        lambda candidates: any(hmac.compare_digest(token, value) for value in candidates),
        retry_if=lambda matched: not matched,
    )


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    if not _token_ok((event.get("headers") or {}).get(SECRET_HEADER)):
        return _answer(401, {"ok": False, "error": "unauthorized"})
    try:
        payload = json.loads(event.get("body") or "")
        update = telegram.TelegramUpdate.parse(payload)
    except ValueError:  # pydantic's ValidationError is a ValueError
        return _answer(400, {"ok": False, "error": "invalid"})
    envelope, _ = publication.publication(
        update, payload, bot_id=os.environ["TELEGRAM_BOT_ID"], correlation_id=http_correlation_id(event)
    )
    aws.resource("dynamodb").Table(os.environ["CONVERSATIONS_TABLE"]).put_item(
        Item=conversation_item(envelope)
    )
    text = reply_text(update) if envelope.type == "message" else None
    chat_id = envelope.payload["message"]["chat"]["id"] if text is not None else None
    if text is not None:
        BotApi(secrets.secret_string("telegram_bot_token")).call(
            "sendMessage", {"chat_id": chat_id, "text": text}
        )
    lead = lead_from_envelope(envelope)
    lead_id = sink_from_config(secrets.secret_json("crm_api")).push(lead) if lead is not None else None
    metrics.add_metric(name="UpdatesHandled", unit=MetricUnit.Count, value=1)
    logger.info(
        "update handled",
        extra={"event_id": envelope.event_id, "replied": text is not None, "lead_id": lead_id},
    )
    return _answer(200, {"ok": True})
