"""SMS consumer: order-status SMS through the send journal (see `pipeline.sms.service`)."""

from __future__ import annotations

from pipeline import coldstart

coldstart.begin()  # the collector paused while the init imports, until `coldstart.end()` below

from aws_lambda_powertools.utilities.typing import LambdaContext

# The worker runtime first: Powertools' batch utility builds its pydantic parser models at
# import when pydantic is already loaded (as a consumer's own pydantic models load it), else not.
from pipeline.worker import ConsumerWorker

# isort: split
from pipeline.sms import service

worker = ConsumerWorker(service.send_notification)
service.prepare()  # what its first record would build (`pipeline.aws`)
logger, metrics = worker.logger, worker.metrics


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    return worker.handle(event, context)


coldstart.end()  # the init is done (see `pipeline.coldstart`)
