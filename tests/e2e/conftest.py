"""One local runtime for the whole end-to-end session, on free ports, with secrets of its own.

The secrets are random per session (not the documented local values) so the log scan at the end
looks for strings that can only have come from this run. The reconciler runs every 2 s instead of
30 s so unknown SMS outcomes settle within a scenario.

The session's pipeline runs the stack's default configuration (End User Messaging for SMS) but
for `crm_auth=signature_or_token`, so CRM events arrive both signed and with the static token,
and `crm_leads` (the `crm` consumer, off by default), whose leads the scenarios count. The
SMS scenarios also run on the HTTP gateway, in a second, smaller pipeline (webhook, `sms`,
reconciler), started only when one of them runs.

The stack of the same deployment is synthesized in the background while the scenarios run
(`deployed_stack`), for the policy check that runs after all of them (`after_scenarios`).
"""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from local.policy_check import StackSynthesis
from local.runtime import Ports, Runtime
from local.settings import LocalSettings
from pipeline.registry import by_name
from tests.e2e.support import (
    CRM_SWEEP_EVERY_SECONDS,
    OTHER_PIPELINES,
    SEVERAL_WORKERS,
    SHORT_BOT_TIMEOUT_SECONDS,
    Pipeline,
    is_refused,
    other_pipeline,
)

RECONCILE_EVERY_SECONDS = 2.0
DRAIN_TIMEOUT_SECONDS = 120.0


def session_settings() -> LocalSettings:
    return LocalSettings.from_cdk_json(
        # crm_leads: the scenarios count the crm consumer's leads (off in a default deployment).
        context={"crm_auth": "signature_or_token", "crm_leads": True},
        telegram_secret=f"tg-secret-{secrets.token_urlsafe(24)}",
        crm_signing_key=f"crm-key-{secrets.token_urlsafe(24)}",
        crm_token=f"crmToken{secrets.token_hex(24)}",
        telegram_bot_token=f"{secrets.randbelow(9_000_000) + 1_000_000}:{secrets.token_urlsafe(30)}",
        crm_auth_header=f"Bearer crm-{secrets.token_urlsafe(24)}",
        sms_gateway_token=f"sms-{secrets.token_urlsafe(24)}",
        sms_inbound_token=f"smsInbound{secrets.token_hex(24)}",
        bitrix24_application_token=f"b24App{secrets.token_hex(16)}",
        bitrix24_webhook_code=f"b24code{secrets.token_hex(8)}",
        amocrm_token=f"amoToken{secrets.token_hex(24)}",
        reconcile_every_seconds=RECONCILE_EVERY_SECONDS,
        crm_sweep_every_seconds=CRM_SWEEP_EVERY_SECONDS,
        # The session's scenarios count the canned autoreply's answers; the example bot runs in a
        # pipeline of its own (`bot_pipeline`), where the autoreply stands down for it.
        bot_consumer=False,
        # The scenarios wait for each consumer's effect: without the batching windows of store,
        # crm and analytics (20 to 60 s each) rather than waiting each window out
        # (tests/unit/local/test_local_batching_window.py runs a window as deployed).
        batching_windows=False,
    )


@pytest.fixture(scope="session")
def pipeline(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    state_dir: Path = tmp_path_factory.mktemp("local-runtime")
    runtime = Runtime(ports=Ports(), settings=session_settings(), state_dir=state_dir)
    runtime.start()
    try:
        yield Pipeline(runtime)
    finally:
        runtime.stop()


@pytest.fixture(scope="session")
def http_gateway_pipeline(pipeline: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """The same settings with `sms_gateway=http` (the SMS fake), only what SMS needs."""
    settings = dataclasses.replace(pipeline.settings, sms_gateway="http")
    with other_pipeline(tmp_path_factory, "http-gateway", settings, (by_name("sms"),)) as other:
        yield other


@pytest.fixture(scope="session")
def bot_pipeline(pipeline: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pipeline]:
    """The same settings with the example bot on (`bot_application`, as `make local` runs it):
    the webhook, the `bot` consumer and the `crm` consumer (`crm_leads`, on in the session's
    settings: it makes the lead at /start, which the bot's phone then goes onto), with several
    workers each."""
    settings = dataclasses.replace(pipeline.settings, bot_consumer=True, **SEVERAL_WORKERS)
    # A shorter timeout than the registry's 15 s: a crashed worker's record comes back after the
    # visibility timeout (6x), 72 s instead of 90 s, and the crash test waits for exactly that.
    bot = dataclasses.replace(by_name("bot"), timeout_seconds=SHORT_BOT_TIMEOUT_SECONDS)
    with other_pipeline(tmp_path_factory, "bot", settings, (bot, by_name("crm"))) as other:
        yield other


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "after_scenarios: runs after every other end-to-end test")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked `after_scenarios` go last (a stable sort: the others keep their order)."""
    items.sort(key=lambda item: item.get_closest_marker("after_scenarios") is not None)


@pytest.fixture(scope="session")
def deployed_stack(pipeline: Pipeline, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackSynthesis]:
    """The stack synthesized from the deployment the runtime runs (started with the first scenario)."""
    resources = pipeline.runtime.resources
    assert resources is not None
    synthesis = StackSynthesis(resources.deployment, tmp_path_factory.mktemp("cdk-e2e"))
    try:
        yield synthesis
    finally:
        synthesis.stop()


@pytest.fixture(autouse=True)
def isolated_scenario(pipeline: Pipeline, deployed_stack: StackSynthesis) -> Iterator[None]:
    """Each scenario starts with no pending fault and leaves every queue drained.

    The runtimes are waited for side by side: each wait lasts at least its settling second, and a
    worker holds every runtime the session has started by then.
    """
    yield
    pipelines = (pipeline, *OTHER_PIPELINES)
    for each in pipelines:
        for name, fake in each.runtime.fakes.items():
            if is_refused(f"{fake.url}/_faults"):
                # A fake that is down has no control endpoint: bring it back from Python.
                fake.clear_faults()
            else:
                each.fake(name).clear_faults()
        assert each.runtime.failure is None, each.runtime.failure

    def drained(each: Pipeline) -> bool:
        return each.runtime.wait_until_drained(timeout=DRAIN_TIMEOUT_SECONDS)

    with ThreadPoolExecutor(len(pipelines)) as waiting:
        done = list(waiting.map(drained, pipelines))
    stuck = [each.runtime.state_dir.name for each, ok in zip(pipelines, done, strict=True) if not ok]
    assert not stuck, f"queues not drained: {stuck}"
