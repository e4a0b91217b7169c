"""Scheduled SMS reconciler: `unknown` outcomes, and `pending` records no SQS message will send.

See `pipeline.sms.reconcile`.
"""

from __future__ import annotations

from pipeline import coldstart

coldstart.begin()  # the collector paused while the init imports, until `coldstart.end()` below

from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext

from pipeline.observability import service_logger, service_tracer
from pipeline.sms.reconcile import reconcile

logger = service_logger()
tracer = service_tracer()
metrics = Metrics()


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    # The EventBridge schedule's event carries nothing we need: each run looks at the journal.
    return reconcile().as_dict()


coldstart.end()  # the init is done (see `pipeline.coldstart`)
