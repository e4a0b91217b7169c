"""Broadcast consumer Lambda: sends one page of a broadcast's chats (`pipeline.broadcast`)."""

from pipeline import coldstart

coldstart.begin()  # the collector paused while the init imports, until `coldstart.end()` below

from aws_lambda_powertools.utilities.typing import LambdaContext

# The worker runtime first (see functions/autoreply/app.py).
from pipeline.worker import ConsumerWorker

# isort: split
from broadcast.logic import send_page

worker = ConsumerWorker(send_page)
logger, metrics = worker.logger, worker.metrics


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    return worker.handle(event, context)


coldstart.end()  # the init is done (see `pipeline.coldstart`)
