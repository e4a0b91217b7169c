"""Keys live as long as any redelivery can arrive: the template's queue retention periods add up
to the redelivery bound (`pipeline.retention`), everything that deduplicates outlives it, and a
setting the functions would refuse fails the synth naming its context key."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from synthesized import Synthesized, run_app
from template_queries import function_env, of_type, props

from infra.config import PipelineSettings
from infra.environment import FunctionEnvironments, SettingsError
from pipeline.registry import CONSUMERS, RetryPolicy, by_name
from pipeline.retention import (
    IDEMPOTENCY_TTL_SECONDS,
    REDELIVERY_BOUND,
    REDELIVERY_MARGIN,
    redelivery_margin,
    retry_schedule,
)
from pipeline.sms.settings import ENVIRONMENT_VARIABLES, SmsSettings


def retention(synth: Synthesized, queue: Any) -> timedelta:
    return timedelta(seconds=props(synth.resources, synth.logical_id(queue))["MessageRetentionPeriod"])


def test_the_bound_is_the_synthesized_queue_and_dlq_retention_plus_the_margin(
    full_synth: Synthesized,
) -> None:
    for name, pipeline in full_synth.stack.pipelines.items():
        queue, dlq = retention(full_synth, pipeline.queue), retention(full_synth, pipeline.dlq)
        assert queue + dlq + REDELIVERY_MARGIN == REDELIVERY_BOUND, name


def test_the_margin_is_a_day_unless_a_retry_schedule_is_longer() -> None:
    assert redelivery_margin() == timedelta(days=1)
    assert all(retry_schedule(consumer) <= REDELIVERY_MARGIN for consumer in CONSUMERS)
    patient = replace(
        by_name("crm"), retry=RetryPolicy(max_receive_count=20, base_delay_seconds=60, max_delay_seconds=7200)
    )
    assert retry_schedule(patient) > timedelta(days=1)
    margin = redelivery_margin([*CONSUMERS, patient])
    assert retry_schedule(patient) <= margin < retry_schedule(patient) + timedelta(days=1)
    assert margin % timedelta(days=1) == timedelta(0)  # whole days, the SMS journal's unit


@pytest.mark.parametrize("synth_name", ["default_synth", "full_synth", "custom_synth"])
def test_every_worker_remembers_events_at_least_as_long_as_the_bound(
    synth_name: str, request: pytest.FixtureRequest
) -> None:
    synth: Synthesized = request.getfixturevalue(synth_name)
    assert synth.stack.pipelines
    for name, pipeline in synth.stack.pipelines.items():
        environment = function_env(synth.resources, synth.logical_id(pipeline.worker.function))
        assert timedelta(seconds=int(environment["IDEMPOTENCY_TTL_SECONDS"])) >= REDELIVERY_BOUND, name


def test_every_function_on_the_sms_journal_keeps_its_records_past_the_bound(full_synth: Synthesized) -> None:
    functions = of_type(full_synth.resources, "AWS::Lambda::Function")
    on_the_journal = [
        function_env(full_synth.resources, function_id)
        for function_id in functions
        if "SMS_GATEWAY" in function_env(full_synth.resources, function_id)
    ]
    assert len(on_the_journal) == 3  # the sms worker, the reconciler, sms_events
    for environment in on_the_journal:
        settings = SmsSettings.parse(
            {
                field: environment[name]
                for field, name in ENVIRONMENT_VARIABLES.items()
                if isinstance(environment.get(name), str)
            }
            | {"journal_table": "from-the-template"}
        )
        assert settings.retention >= REDELIVERY_BOUND, environment["POWERTOOLS_SERVICE_NAME"]


def _worker_environment(settings: PipelineSettings, consumer_name: str = "autoreply") -> dict[str, str]:
    consumer = by_name(consumer_name)
    return FunctionEnvironments(settings, stack_name="Test").worker(
        consumer,
        queue_url="queue-url",
        dlq_url="dlq-url",
        tables={name: f"{name}-table" for name in ("journal", *consumer.tables)},
        secrets={name: f"{name}-secret" for name in consumer.secrets},
    )


def test_a_worker_environment_the_worker_would_refuse_is_refused_naming_the_context_key() -> None:
    """The environment check stands on its own: settings that skipped their own validation
    (model_copy does not validate) still cannot build a worker that dead-letters everything."""
    unchecked = PipelineSettings().model_copy(update={"idempotency_ttl_seconds": IDEMPOTENCY_TTL_SECONDS - 1})
    with pytest.raises(
        SettingsError, match=rf"^idempotency_ttl_seconds: must be at least {IDEMPOTENCY_TTL_SECONDS}"
    ):
        _worker_environment(unchecked)
    assert _worker_environment(PipelineSettings())["IDEMPOTENCY_TTL_SECONDS"] == str(IDEMPOTENCY_TTL_SECONDS)


def test_a_registry_value_the_worker_would_refuse_is_named_by_its_variable() -> None:
    consumer = replace(by_name("analytics"), environment={"IDEMPOTENCY_TTL_SECONDS": "60"})
    with pytest.raises(SettingsError, match=r"^IDEMPOTENCY_TTL_SECONDS \(of the analytics worker\): must be"):
        FunctionEnvironments(PipelineSettings(), stack_name="Test").worker(
            consumer, queue_url="q", dlq_url="d", tables={"journal": "j"}, secrets={}
        )


def test_app_py_refuses_a_short_idempotency_ttl_naming_the_key_and_the_minimum(tmp_path: Path) -> None:
    result = run_app(tmp_path, {"idempotency_ttl_seconds": "3600"}, timeout=120)
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if "idempotency_ttl_seconds" in line]
    assert line.startswith(f"idempotency_ttl_seconds: must be at least {IDEMPOTENCY_TTL_SECONDS} ")
    assert "redrive" in line  # and why
