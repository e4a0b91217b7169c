"""Webhook Lambda behind an API Gateway HTTP API (payload 2.0). Thin: routes call `ingest`.

The routes are matched here, not by Powertools' event handler: the API has five POST routes, and
importing `aws_lambda_powertools.event_handler` (asyncio and every event class) costs about a
third of this function's init, which small bots pay at almost every conversation's first message.
"""

from __future__ import annotations

from pipeline import coldstart

coldstart.begin()  # the collector paused while the init imports, until `coldstart.end()` below

import json
import re
from collections.abc import Callable, Mapping
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext

from pipeline import aws
from pipeline.observability import http_correlation_id, service_logger, service_tracer
from webhook import ingest

logger = service_logger()
tracer = service_tracer()
metrics = Metrics()
# Every accepted request reads its secret and publishes: both clients at the init (`pipeline.aws`).
aws.prepare(clients=("secretsmanager", "sns"))

TELEGRAM_ROUTE = "/telegram/webhook"
CRM_ROUTE = "/crm/events"
# The CRM route for senders that cannot set a header: the static token is the last path segment.
CRM_TOKEN_ROUTE = f"{CRM_ROUTE}/<token>"
# CRMs that post their own webhooks: Bitrix24 (token in the body), amoCRM (token in the path).
BITRIX24_ROUTE = "/crm/bitrix24"
AMOCRM_PREFIX = "/crm/amocrm"
AMOCRM_ROUTE = f"{AMOCRM_PREFIX}/<token>"
ROUTE_SOURCES = {TELEGRAM_ROUTE: "telegram", CRM_ROUTE: "crm", BITRIX24_ROUTE: "bitrix24"}
# An HTTP SMS gateway's inbound messages (STOP/START replies; `webhook.sms_inbound`).
SMS_INBOUND_PREFIX = "/sms/inbound"
SMS_INBOUND_ROUTE = f"{SMS_INBOUND_PREFIX}/<token>"

Handler = Callable[[ingest.Request, str | None], ingest.Outcome]


def route_source(path: str) -> str:
    """The metric `source` of a request path (a token path is its CRM's; never logged)."""
    if path.startswith(f"{AMOCRM_PREFIX}/"):
        return "amocrm"
    if path.startswith(f"{CRM_ROUTE}/"):
        return "crm"
    if path.startswith(f"{SMS_INBOUND_PREFIX}/"):
        return "sms"
    return ROUTE_SOURCES.get(path, "none")


def _pattern(route: str) -> re.Pattern[str]:
    """A route with `<name>` segments as a regex; a parameter is one non-empty path segment."""
    parts = [
        f"(?P<{part[1:-1]}>[^/]+)" if part.startswith("<") else re.escape(part) for part in route.split("/")
    ]
    return re.compile("^" + "/".join(parts) + "$")


ROUTES: tuple[tuple[re.Pattern[str], Handler], ...] = (
    (
        _pattern(TELEGRAM_ROUTE),
        lambda request, _: ingest.ingest_telegram(request, ingest.Settings.from_env()),
    ),
    (_pattern(CRM_ROUTE), lambda request, _: ingest.ingest_crm(request, ingest.Settings.from_env())),
    (
        _pattern(CRM_TOKEN_ROUTE),
        lambda request, token: ingest.ingest_crm(request, ingest.Settings.from_env(), path_token=token),
    ),
    (
        _pattern(BITRIX24_ROUTE),
        lambda request, _: ingest.ingest_bitrix24(request, ingest.Settings.from_env()),
    ),
    (
        _pattern(AMOCRM_ROUTE),
        lambda request, token: ingest.ingest_amocrm(
            request, ingest.Settings.from_env(), path_token=token or ""
        ),
    ),
    (_pattern(SMS_INBOUND_ROUTE), lambda request, token: _sms_inbound(request, token or "")),
)


def _sms_inbound(request: ingest.Request, token: str) -> ingest.Outcome:
    # Imported by the first inbound SMS: only a deployment on an HTTP gateway has the route.
    from webhook import sms_inbound

    return sms_inbound.ingest_sms_inbound(request, token)


NOT_FOUND = ingest.Outcome(404, {"ok": False, "error": "not_found", "message": "Not found"})
INTERNAL_ERROR = ingest.Outcome(500, {"ok": False, "error": "internal_error", "message": "Internal error"})


def _request(event: Mapping[str, Any], correlation_id: str) -> ingest.Request:
    context = event.get("requestContext") or {}
    headers = event.get("headers") or {}
    return ingest.Request(
        # API Gateway lowercases HTTP API header names; a test or local caller may not.
        headers={str(name).lower(): value for name, value in headers.items()},
        body=event.get("body"),
        is_base64_encoded=bool(event.get("isBase64Encoded")),
        correlation_id=correlation_id,
        source_ip=(context.get("http") or {}).get("sourceIp"),
    )


def _response(outcome: ingest.Outcome) -> dict[str, Any]:
    return {
        "statusCode": outcome.status_code,
        "headers": {"Content-Type": "application/json"},
        "body": json.dumps(outcome.body, separators=(",", ":")),
        "isBase64Encoded": False,
    }


def dispatch(event: Mapping[str, Any], correlation_id: str) -> ingest.Outcome:
    """The route's outcome; 404 for any other path or method (as API Gateway would have no route)."""
    method = ((event.get("requestContext") or {}).get("http") or {}).get("method", "")
    path = str(event.get("rawPath") or "")
    for pattern, handle in ROUTES if method == "POST" else ():
        match = pattern.match(path)
        if match is None:
            continue
        # The token as API Gateway decoded it into pathParameters, else as the path carries it.
        token = (event.get("pathParameters") or {}).get("token") or match.groupdict().get("token")
        try:
            return handle(_request(event, correlation_id), token)
        except Exception:
            logger.exception("Unhandled error")
            ingest.record_rejection(route_source(path), "error")
            return INTERNAL_ERROR
    ingest.record_rejection("none", "not_found")
    return NOT_FOUND


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    correlation_id = http_correlation_id(event)
    logger.set_correlation_id(correlation_id)
    response = _response(dispatch(event, correlation_id))
    response["headers"]["X-Correlation-Id"] = correlation_id
    return response


coldstart.end()  # the init is done (see `pipeline.coldstart`)
