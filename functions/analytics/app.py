"""Analytics consumer: EMF metrics and one analytics log line per update (see `analytics.logic`)."""

from __future__ import annotations

from aws_lambda_powertools.utilities.typing import LambdaContext

from analytics.logic import record_update
from pipeline.worker import ConsumerWorker

worker = ConsumerWorker(record_update)
logger, metrics = worker.logger, worker.metrics


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    return worker.handle(event, context)
