"""Webhook Lambda behind an API Gateway HTTP API (payload 2.0). Thin: routes call `ingest`."""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.event_handler import APIGatewayHttpResolver, Response, content_types
from aws_lambda_powertools.event_handler.exceptions import NotFoundError
from aws_lambda_powertools.utilities.typing import LambdaContext

from pipeline.observability import http_correlation_id, service_logger, service_tracer
from webhook import ingest

logger = service_logger()
tracer = service_tracer()
metrics = Metrics()
app = APIGatewayHttpResolver()

TELEGRAM_ROUTE = "/telegram/webhook"
CRM_ROUTE = "/crm/events"
# The CRM route for senders that cannot set a header: the static token is the last path segment.
CRM_TOKEN_ROUTE = f"{CRM_ROUTE}/<token>"
# CRMs that post their own webhooks: Bitrix24 (token in the body), amoCRM (token in the path).
BITRIX24_ROUTE = "/crm/bitrix24"
AMOCRM_PREFIX = "/crm/amocrm"
AMOCRM_ROUTE = f"{AMOCRM_PREFIX}/<token>"
ROUTE_SOURCES = {TELEGRAM_ROUTE: "telegram", CRM_ROUTE: "crm", BITRIX24_ROUTE: "bitrix24"}


def route_source(path: str) -> str:
    """The metric `source` of a request path (a token path is its CRM's; never logged)."""
    if path.startswith(f"{AMOCRM_PREFIX}/"):
        return "amocrm"
    if path.startswith(f"{CRM_ROUTE}/"):
        return "crm"
    return ROUTE_SOURCES.get(path, "none")


def _request() -> ingest.Request:
    event = app.current_event
    return ingest.Request(
        headers=event.headers,
        body=event.body,
        is_base64_encoded=bool(event.is_base64_encoded),
        correlation_id=logger.get_correlation_id() or http_correlation_id(event.raw_event),
        source_ip=event.request_context.http.source_ip,
    )


def _respond(outcome: ingest.Outcome) -> Response:
    return Response(
        status_code=outcome.status_code, content_type=content_types.APPLICATION_JSON, body=outcome.body
    )


@app.post(TELEGRAM_ROUTE)
def telegram_webhook() -> Response:
    return _respond(ingest.ingest_telegram(_request(), ingest.Settings.from_env()))


@app.post(CRM_ROUTE)
def crm_events() -> Response:
    return _respond(ingest.ingest_crm(_request(), ingest.Settings.from_env()))


@app.post(CRM_TOKEN_ROUTE)
def crm_events_with_token(token: str) -> Response:
    return _respond(ingest.ingest_crm(_request(), ingest.Settings.from_env(), path_token=token))


@app.post(BITRIX24_ROUTE)
def bitrix24_events() -> Response:
    return _respond(ingest.ingest_bitrix24(_request(), ingest.Settings.from_env()))


@app.post(AMOCRM_ROUTE)
def amocrm_events(token: str) -> Response:
    return _respond(ingest.ingest_amocrm(_request(), ingest.Settings.from_env(), path_token=token))


@app.not_found
def not_found(_: NotFoundError) -> Response:
    # Registered explicitly so the catch-all handler below does not turn 404s into 500s.
    ingest.record_rejection("none", "not_found")
    return _respond(ingest.Outcome(404, {"ok": False, "error": "not_found", "message": "Not found"}))


@app.exception_handler(Exception)
def unexpected_error(error: Exception) -> Response:
    logger.exception("Unhandled error")
    ingest.record_rejection(route_source(app.current_event.path), "error")
    return _respond(
        ingest.Outcome(500, {"ok": False, "error": "internal_error", "message": "Internal error"})
    )


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler
@metrics.log_metrics
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    correlation_id = http_correlation_id(event)
    logger.set_correlation_id(correlation_id)
    response = app.resolve(event, context)
    response.setdefault("headers", {})["X-Correlation-Id"] = correlation_id
    return response
