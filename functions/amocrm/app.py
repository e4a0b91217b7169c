"""amoCRM consumer Lambda: a lead's status change becomes the lead's order-status event."""

from aws_lambda_powertools.utilities.typing import LambdaContext

from amocrm.logic import sync_lead
from pipeline.worker import ConsumerWorker

worker = ConsumerWorker(sync_lead)
logger, metrics = worker.logger, worker.metrics


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    return worker.handle(event, context)
