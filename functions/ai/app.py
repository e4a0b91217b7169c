"""AI consumer Lambda: classifies a message's intent and extracts lead fields with Bedrock."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from ai.logic import analyze
from pipeline.worker import ConsumerWorker

worker = ConsumerWorker(analyze)
logger, metrics = worker.logger, worker.metrics


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    return worker.handle(event, context)
