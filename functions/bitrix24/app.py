"""Bitrix24 consumer Lambda: a deal event from the portal becomes the deal's order-status event."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from bitrix24.logic import sync_deal
from pipeline.worker import ConsumerWorker

worker = ConsumerWorker(sync_deal)
logger, metrics = worker.logger, worker.metrics


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    return worker.handle(event, context)
