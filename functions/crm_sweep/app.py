"""Scheduled CRM history sweep: a transition whose webhook never came still gets its SMS.

See `pipeline.crm.sweep`. The CRMs swept are the connected ones (`CRM_SWEEP_SOURCES`, set by the
stack from the status-map settings); each adapter is its consumer's own.
"""

from __future__ import annotations

from pipeline import coldstart

coldstart.begin()  # the collector paused while the init imports, until `coldstart.end()` below

import os
from collections.abc import Callable
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.utilities.typing import LambdaContext

from pipeline import aws, http
from pipeline.crm.sweep import SOURCES_ENV, SweepCursor, SweepSource, sweep
from pipeline.envelope import utc_now
from pipeline.observability import service_logger, service_tracer
from pipeline.registry import by_name

logger = service_logger()
tracer = service_tracer()
metrics = Metrics()


def bitrix24_source() -> SweepSource:
    from bitrix24.logic import Bitrix24Source, portal

    return Bitrix24Source(portal())


def amocrm_source() -> SweepSource:
    from amocrm.logic import AmoCrmSource, account

    return AmoCrmSource(account())


ADAPTERS: dict[str, Callable[[], SweepSource]] = {"bitrix24": bitrix24_source, "amocrm": amocrm_source}
# The secret each CRM's credential is in: its consumer's (the one it reads), re-read after a 401.
SECRETS: dict[str, str] = {name: by_name(name).secrets[0] for name in ADAPTERS}

# What the first run calls, built at the init's full vCPU (`pipeline.aws`): the cursors' table, the
# CRMs' secrets, the topic the transitions found go to, and the HTTPS opener the CRMs are read with.
# botocore's clients alone: nothing here loads boto3 (`bench imports` charges botocore).
aws.prepare(clients=("dynamodb", "secretsmanager", "sns"))
if aws.in_execution_environment() and os.environ.get(SOURCES_ENV, "").strip():
    http.prepare()


def connected() -> dict[str, Callable[[], SweepSource]]:
    """How to build the adapter of each connected CRM (with its own secret, when swept)."""
    names = [name.strip() for name in os.environ.get(SOURCES_ENV, "").split(",") if name.strip()]
    unknown = sorted(set(names) - set(ADAPTERS))
    if unknown:
        raise ValueError(f"{SOURCES_ENV} names {unknown}: only {sorted(ADAPTERS)} can be swept")
    return {name: ADAPTERS[name] for name in names}


@logger.inject_lambda_context
@metrics.log_metrics
@tracer.capture_lambda_handler
def lambda_handler(event: dict[str, Any], context: LambdaContext) -> dict[str, int]:
    # The EventBridge schedule's event carries nothing we need: each run reads from its cursors,
    # for as long as the function's remaining time allows (the next run goes on from there).
    swept = sweep(
        connected(),
        SweepCursor(os.environ["JOURNAL_TABLE"]),
        utc_now(),
        lambda: context.get_remaining_time_in_millis() / 1000,
        secrets=SECRETS,
    )
    return {name: result.looked for name, result in swept.items()}


coldstart.end()  # the init is done (see `pipeline.coldstart`)
