"""`POST /sms/inbound/<token>`: an HTTP SMS gateway's inbound-message callback.

A customer's reply reaches the gateway, which posts it here (`{"from": "+E.164", "text": ...}`,
JSON, as `local.fakes.sms` does). A STOP keyword (`pipeline.sms.suppression.STOP_WORDS`) puts
the number on the suppression list, START/UNSTOP takes it off: the same journal items
`ops sms opt-out/opt-in` write, so every later order SMS to it ends `suppressed`. Any other text
is acknowledged and counted, never an error (a gateway would retry it forever).

The token is the `sms_inbound_token` secret, in the path (a gateway's console takes only a URL).
Like every route: the token first (401, nothing written), then the body (400 not JSON, 422 not
an inbound message). Answered 200 only once the list is written; a DynamoDB failure is 503, so
the gateway retries. Each request is one `SmsInbound` metric (`action`: opt_out, opt_in,
ignored) or one `EventsRejected{source=sms}`. The number is logged masked only.
"""

from __future__ import annotations

import os
import re
from typing import Any

from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import BotoCoreError, ClientError

from pipeline import aws
from pipeline.observability import mask_phone
from pipeline.registry import secret_env_var
from pipeline.sms import suppression
from pipeline.sms.clock import CLOCK
from webhook import ingest

logger = Logger(child=True)
metrics = Metrics()

SOURCE = "sms"
SECRET = "sms_inbound_token"  # noqa: S105 - the logical name (`infra.environment.SMS_INBOUND_SECRET`)
METRIC = "SmsInbound"
# Who put a number on the list (`ops sms opt-out` writes "operator").
BY = "inbound_sms"
E164 = re.compile(r"^\+[1-9]\d{6,14}$")
# Longer than any SMS a gateway joins from parts (10 parts of 160): not an inbound message.
MAX_TEXT = 1600


def _message(payload: Any) -> tuple[str, str]:
    """The sender and text of an inbound message; 422 naming the field, never its value."""
    if not isinstance(payload, dict):
        ingest._reject(422, ingest.INVALID_REASON, 'body must be a JSON object {"from", "text"}')
    sender = payload.get("from")
    sender = sender.strip() if isinstance(sender, str) else ""
    text = payload.get("text")
    errors = []
    if not E164.fullmatch(sender):
        errors.append({"loc": ["from"], "msg": "must be an E.164 phone number (+ and 8..15 digits)"})
    if not isinstance(text, str) or len(text) > MAX_TEXT:
        errors.append({"loc": ["text"], "msg": f"must be a string of at most {MAX_TEXT} characters"})
        text = ""
    if errors:
        ingest._reject(422, ingest.INVALID_REASON, "body is not an inbound SMS", errors)
    return sender, text


def _apply(keyword: str, phone: str) -> bool:
    """Write the list (STOP puts, START deletes); whether it changed. 503 if DynamoDB fails."""
    table = aws.resource("dynamodb").Table(os.environ["JOURNAL_TABLE"])
    try:
        if keyword == "stop":
            return suppression.opt_out(table, phone, by=BY, now=CLOCK.now())
        return suppression.opt_in(table, phone)
    except (ClientError, BotoCoreError):
        logger.exception("Could not write the suppression list; the gateway will retry")
        ingest._reject(503, "store_failed", "could not record the reply, retry later")


def _count(action: str) -> None:
    metrics.add_dimension(name="action", value=action)
    metrics.add_metric(name=METRIC, unit=MetricUnit.Count, value=1)


def ingest_sms_inbound(request: ingest.Request, path_token: str) -> ingest.Outcome:
    """One inbound SMS: STOP opts the number out, START back in, anything else is ignored."""

    def work() -> ingest.Outcome:
        secret_id = os.environ.get(secret_env_var(SECRET), "")
        if not secret_id:
            ingest._reject(404, "not_found", "no inbound SMS route (the SMS gateway is not an HTTP gateway)")
        ingest._require_secret_token(path_token, secret_id, "token")
        sender, text = _message(ingest.parse_json(request.raw_body()))
        keyword = suppression.inbound_keyword(text)
        if keyword is None:
            logger.info("Inbound SMS is no keyword: ignored", extra={"sender": mask_phone(sender)})
            _count("ignored")
            return ingest.Outcome(200, {"ok": True, "action": "ignored"})
        action = "opt_out" if keyword == "stop" else "opt_in"
        changed = _apply(keyword, sender)
        extra = {"sender": mask_phone(sender), "action": action, "changed": changed}
        logger.info("Inbound SMS keyword", extra=extra)
        _count(action)
        return ingest.Outcome(200, {"ok": True, "action": action, "changed": changed})

    try:
        return work()
    except ingest.Rejection as rejection:
        if rejection.status_code < 500:
            extra = {"source": SOURCE, "reason": rejection.reason, "detail": rejection.detail}
            logger.warning("Request rejected", extra={**extra, "errors": rejection.errors})
        ingest.record_rejection(SOURCE, rejection.reason, rejection.count)
        return rejection.outcome()
