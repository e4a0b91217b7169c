"""Autoreply consumer Lambda: answers commands and button presses through the Telegram Bot API."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from autoreply.logic import autoreply
from pipeline.worker import ConsumerWorker

worker = ConsumerWorker(autoreply)
logger, metrics = worker.logger, worker.metrics


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    return worker.handle(event, context)
