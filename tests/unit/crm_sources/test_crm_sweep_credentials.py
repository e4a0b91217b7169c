"""The catch-up sweep after its CRM's credential was rotated: the scheduled function (functions/
crm_sweep) against the Bitrix24 and amoCRM stand-ins over HTTP, its secrets in moto, rotated as an
operator would (the vendor first, then `put-secret-value`). A 401 re-reads the secret once past
its cache, as the consumers do (`pipeline.secrets.with_refreshed_secret`): the next run catches
up at once, not after the cache's 300 s (the chaos campaign's `token_rotated`, seed 2095, found
the sweep failing every run until then)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from local.fakes.amocrm import AmoCrmFake
from local.fakes.bitrix24 import Bitrix24PortalFake
from local.overlay import LOCAL_AMOCRM_PIPELINE, LOCAL_AMOCRM_STATUSES, LOCAL_BITRIX24_STAGES
from pipeline import aws
from pipeline import secrets as secret_reads
from pipeline.crm.sweep import SOURCES_ENV
from pipeline.registry import secret_env_var
from tests.unit.consumer_support import JOURNAL_TABLE, FakeLambdaContext
from tests.unit.crm_sources.test_crm_sweep import topic  # noqa: F401 - the fixture, re-used

OLD, NEW = "sweepOldCredential0123456789", "sweepRotatedCredential9876543210"
PHONE = "+491701234567"


@pytest.fixture
def secrets(moto_aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], None]]:
    """`put(name, value)`: the secret created, or a new value put, as the operator does."""
    secret_reads.clear_cache()
    client = aws.client("secretsmanager")

    def put(name: str, value: str) -> None:
        monkeypatch.setenv(secret_env_var(name), f"{name}-secret")
        try:
            client.put_secret_value(SecretId=f"{name}-secret", SecretString=value)
        except client.exceptions.ResourceNotFoundException:
            client.create_secret(Name=f"{name}-secret", SecretString=value)

    yield put
    secret_reads.clear_cache()


def run_sweep() -> dict[str, int]:
    from crm_sweep import app

    result: dict[str, int] = app.lambda_handler({}, FakeLambdaContext())
    return result


@pytest.mark.parametrize("crm", ["bitrix24", "amocrm"])
def test_a_rotated_crm_credential_is_re_read_by_the_next_sweep_run(
    crm: str,
    secrets: Callable[[str, str], None],
    topic: Callable[[], list[dict[str, Any]]],  # noqa: F811 - the fixture
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SOURCES_ENV, crm)
    monkeypatch.setenv("JOURNAL_TABLE", JOURNAL_TABLE)
    monkeypatch.setenv("BITRIX24_STAGES", json.dumps(LOCAL_BITRIX24_STAGES))
    monkeypatch.setenv("AMOCRM_STATUSES", json.dumps(LOCAL_AMOCRM_STATUSES))
    if crm == "bitrix24":
        fake: Any = Bitrix24PortalFake(webhook_code=OLD, handler_url="http://127.0.0.1:9/")
    else:
        fake = AmoCrmFake(token=OLD, handler_url="http://127.0.0.1:9/")
    with fake:

        def secret() -> str:
            if crm == "bitrix24":
                return json.dumps({"url": fake.rest_url()})
            return json.dumps({"base_url": fake.base_url, "token": fake.token})

        def move() -> None:
            if crm == "bitrix24":
                contact = fake.create_contact("Ann", PHONE)
                fake.move_deal(
                    fake.create_deal("Order", contact_id=contact, emit=False).deal_id, "PREPARATION"
                )
            else:
                lead = fake.create_lead(
                    "Order", LOCAL_AMOCRM_PIPELINE, 70011, fake.create_contact("Ann", PHONE)
                )
                fake.change_statuses([(lead, 70012)])

        secrets(f"{crm}_api", secret())
        move()
        run_sweep()  # read with the old credential, now cached
        fake.account.rotate(NEW)
        secrets(f"{crm}_api", secret())
        move()

        run_sweep()  # refused (401) with the cached one, re-read, read: no SweepFailed
        run_sweep()

    if crm == "bitrix24":  # both deals' moves looked at, the second with the new webhook code
        assert len({json.dumps(look["envelope"]["payload"], sort_keys=True) for look in topic()}) == 2
