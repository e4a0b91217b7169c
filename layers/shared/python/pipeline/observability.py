"""Logging and tracing helpers shared by the Lambdas."""

from __future__ import annotations

import logging
import os
import re
import uuid
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar, overload

from aws_lambda_powertools import Logger
from aws_lambda_powertools.logging.formatter import LambdaPowertoolsFormatter
from aws_lambda_powertools.shared.functions import resolve_truthy_env_var_choice

if TYPE_CHECKING:
    from aws_lambda_powertools import Tracer

# The level the deployment's `log_level` setting reaches every function in.
LOG_LEVEL_ENV = "POWERTOOLS_LOG_LEVEL"
# Powertools' switch for its Tracer; the stack sets it "true" unless the `tracing` setting is on.
TRACE_DISABLED_ENV = "POWERTOOLS_TRACE_DISABLED"

Decorated = TypeVar("Decorated", bound=Callable[..., Any])

CORRELATION_ID_HEADER = "x-correlation-id"
# An incoming correlation id ends up in every log line, the envelope and a response header:
# accept only short, plain values; anything else is replaced by the request id.
_SAFE_CORRELATION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/=+-]{0,127}")


# Keys Powertools' `inject_lambda_context` adds to every line that CloudWatch already knows from
# the log group (one per function) and the function's configuration: ~170 bytes a line, which
# CloudWatch Logs bills per GB ingested (issue 44). The request id stays.
REDUNDANT_KEYS = ("function_name", "function_arn", "function_memory_size")
# Below WARNING a line's message names what happened, so its source `location` (~30 bytes) is
# left out; a warning or an error keeps it, for whoever debugs it.
LOCATION_FROM = logging.WARNING
_LEVELS = logging.getLevelNamesMapping()

# An invocation that records no metric is normal (a processed record has none of its own), and
# Powertools warns of it on stderr, a plain line in the function's log. Not a fault: silenced.
warnings.filterwarnings(
    "ignore",
    message="No application metrics to publish",
    category=UserWarning,
    module=r"aws_lambda_powertools\.",
)


class CompactFormatter(LambdaPowertoolsFormatter):
    """Powertools' JSON lines without `REDUNDANT_KEYS`; `cold_start` only on the cold start's
    lines (true), `location` only from LOCATION_FROM up."""

    def serialize(self, log: dict[str, Any]) -> str:  # type: ignore[override]
        for key in REDUNDANT_KEYS:
            log.pop(key, None)
        if log.get("cold_start") is False:
            del log["cold_start"]
        if _LEVELS.get(str(log.get("level")), LOCATION_FROM) < LOCATION_FROM:
            log.pop("location", None)
        return super().serialize(log)


def service_logger() -> Logger:
    """The function's Powertools logger (service from POWERTOOLS_SERVICE_NAME), writing only
    records at or above POWERTOOLS_LOG_LEVEL, its child loggers' included.

    Lambda's own application log level is never above INFO (`infra.settings.cdk_log_level`: a
    higher one would drop the metric lines, which carry no level) and Powertools lets that level,
    AWS_LAMBDA_LOG_LEVEL, win over POWERTOOLS_LOG_LEVEL. So the deployment's level is applied here,
    on the handler every record of the service reaches, where neither the Lambda level nor a
    child logger's own level can override it.
    """
    logger = Logger(logger_formatter=CompactFormatter())
    logger.logger_handler.setLevel(os.environ.get(LOG_LEVEL_ENV, "INFO").upper())
    return logger


def tracing_enabled() -> bool:
    """Whether this function traces: unless POWERTOOLS_TRACE_DISABLED is truthy (Powertools' rule)."""
    return not resolve_truthy_env_var_choice(env=os.environ.get(TRACE_DISABLED_ENV, "false"))


class UntracedFunction:
    """The decorators of Powertools' `Tracer` a function uses, for a function that does not trace.

    They return what they decorate unchanged: no X-Ray SDK (Powertools' `Tracer()` imports it even
    when disabled, ~1/4 of the webhook's cold imports), no subsegment, no call overhead.
    """

    @overload
    def capture_lambda_handler(self, lambda_handler: Decorated, **options: Any) -> Decorated: ...

    @overload
    def capture_lambda_handler(
        self, lambda_handler: None = None, **options: Any
    ) -> Callable[[Decorated], Decorated]: ...

    def capture_lambda_handler(
        self, lambda_handler: Decorated | None = None, **options: Any
    ) -> Decorated | Callable[[Decorated], Decorated]:
        return lambda_handler if lambda_handler is not None else _unchanged

    @overload
    def capture_method(self, method: Decorated, **options: Any) -> Decorated: ...

    @overload
    def capture_method(self, method: None = None, **options: Any) -> Callable[[Decorated], Decorated]: ...

    def capture_method(
        self, method: Decorated | None = None, **options: Any
    ) -> Decorated | Callable[[Decorated], Decorated]:
        return method if method is not None else _unchanged


def _unchanged(function: Decorated) -> Decorated:
    return function


def service_tracer() -> Tracer | UntracedFunction:
    """The function's tracer: Powertools' `Tracer` where tracing is on (`tracing_enabled`), else
    `UntracedFunction`, whose decorators change nothing, so the X-Ray SDK is never imported."""
    if not tracing_enabled():
        return UntracedFunction()
    from aws_lambda_powertools import Tracer

    return Tracer()


def _safe(value: Any) -> str | None:
    return value if isinstance(value, str) and _SAFE_CORRELATION_ID.fullmatch(value) else None


def http_correlation_id(event: Mapping[str, Any]) -> str:
    """Correlation id of an API Gateway HTTP API (v2) request.

    The caller's `X-Correlation-Id` when it sent a safe one (so a trace can start outside AWS),
    else API Gateway's request id, else a fresh UUID (a test or local event without either).
    """
    headers = event.get("headers")
    if isinstance(headers, Mapping):
        for name, value in headers.items():
            if isinstance(name, str) and name.lower() == CORRELATION_ID_HEADER and _safe(value):
                return str(value)
    context = event.get("requestContext")
    request_id = _safe(context.get("requestId")) if isinstance(context, Mapping) else None
    return request_id or str(uuid.uuid4())


# Keep the country and operator code and the last two digits: enough to tell numbers apart and
# route a complaint, not enough to call anyone. Counted in significant characters ("+" and
# digits); separators ("+49 170 123-45-67") stay as they are and reveal nothing.
_PHONE_KEEP_HEAD = 6
_PHONE_KEEP_TAIL = 2
# A phone-looking run in free text (a gateway's or CRM's error message may quote the number): an
# optional "+", then 8 to 15 digits, possibly split by spaces, dots, dashes or brackets
# ("8 (999) 123-45-67"), not inside a longer run. ISO dates ("2026-01-15") are not phones.
_PHONE_IN_TEXT = re.compile(r"(?<![\d+])(?!\d{4}-\d{2}-\d{2}(?!\d))\+?\d(?:[\s().-]{0,2}\d){7,14}(?!\d)")


def mask_phone(phone: str) -> str:
    """'+375291234567' -> '+37529*****67'. A short number keeps only its last two digits."""
    significant = [index for index, char in enumerate(phone) if char.isdigit() or char == "+"]
    head = _PHONE_KEEP_HEAD if len(significant) > _PHONE_KEEP_HEAD + _PHONE_KEEP_TAIL + 1 else 0
    hidden = set(significant[head:-_PHONE_KEEP_TAIL])
    return "".join("*" if index in hidden else char for index, char in enumerate(phone))


def mask_phones(text: str) -> str:
    """Mask every phone-looking number in free text."""
    return _PHONE_IN_TEXT.sub(lambda match: mask_phone(match.group(0)), text)
