"""Store consumer: every Telegram update into the conversations table (see `store.logic`)."""

from __future__ import annotations

from aws_lambda_powertools.utilities.typing import LambdaContext

from pipeline.worker import ConsumerWorker
from store.logic import save_update

worker = ConsumerWorker(save_update)
logger, metrics = worker.logger, worker.metrics


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    return worker.handle(event, context)
