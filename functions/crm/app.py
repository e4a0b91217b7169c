"""CRM consumer Lambda: a new contact (/start, a shared contact, a first message) becomes a CRM lead."""

from pipeline import coldstart

coldstart.begin()  # the collector paused while the init imports, until `coldstart.end()` below

from aws_lambda_powertools.utilities.typing import LambdaContext

# The worker runtime first: Powertools' batch utility builds its pydantic parser models at
# import when pydantic is already loaded (as a consumer's own pydantic models load it), else not.
from pipeline.worker import ConsumerWorker

# isort: split
from crm.logic import push_lead

worker = ConsumerWorker(push_lead)
logger, metrics = worker.logger, worker.metrics


@logger.inject_lambda_context
@metrics.log_metrics
def lambda_handler(event: dict, context: LambdaContext) -> dict:
    return worker.handle(event, context)


coldstart.end()  # the init is done (see `pipeline.coldstart`)
