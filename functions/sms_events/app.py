"""End User Messaging SMS delivery events (SNS) into the journal (see `pipeline.sms.delivery`)."""

from __future__ import annotations

from pipeline import coldstart

coldstart.begin()  # the collector paused while the init imports, until `coldstart.end()` below

from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext

from pipeline.observability import service_logger, service_tracer
from pipeline.sms.delivery import handle_sns_event
from pipeline.sms.service import runtime

logger = service_logger()
tracer = service_tracer()
metrics = Metrics()


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    return handle_sns_event(event, runtime().journal)


coldstart.end()  # the init is done (see `pipeline.coldstart`)
