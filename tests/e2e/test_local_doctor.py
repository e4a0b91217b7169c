"""`bin/ops doctor --local` against the local runtime, as docs/deploy.md's post-deploy checklist uses it:
a placeholder bot token and an unset webhook are found (exit 1), and are OK once fixed (the real
token put back, `set-webhook` against the Telegram stand-in)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from infra.secret_specs import consumer_secret_spec
from tests.e2e.support import Pipeline

pytestmark = pytest.mark.e2e


def doctor(pipeline: Pipeline) -> tuple[int, dict[tuple[str, str], dict[str, Any]]]:
    completed = pipeline.ops("doctor", "--json")
    assert completed.returncode in (0, 1), completed.stderr
    document = json.loads(completed.stdout)
    assert document["exit_code"] == completed.returncode
    return completed.returncode, {(f["check"], f["subject"]): f for f in document["findings"]}


def test_doctor_finds_a_placeholder_secret_and_an_unset_webhook_then_ok_once_fixed(
    pipeline: Pipeline,
) -> None:
    assert pipeline.runtime.resources is not None
    secrets = pipeline.runtime.client("secretsmanager")
    bot_token_secret = pipeline.runtime.resources.secrets["telegram_bot_token"]
    placeholder = consumer_secret_spec("telegram_bot_token").placeholder
    secrets.put_secret_value(SecretId=bot_token_secret, SecretString=placeholder)
    try:
        code, found = doctor(pipeline)
    finally:
        secrets.put_secret_value(SecretId=bot_token_secret, SecretString=pipeline.settings.telegram_bot_token)
    assert code == 1
    assert found["secrets", "telegram_bot_token"]["status"] == "FAIL"
    assert "put-secret-value" in found["secrets", "telegram_bot_token"]["fix"]
    # Without a bot token Telegram cannot be asked: a warning saying why, not a traceback.
    assert found["webhook", "getWebhookInfo"]["status"] == "WARN"

    code, found = doctor(pipeline)
    assert found["secrets", "telegram_bot_token"]["status"] == "OK"
    assert found["webhook", "url"]["status"] == "FAIL"
    assert found["webhook", "url"]["fix"] == "bin/ops --local set-webhook --yes"
    # What the stand-ins serve is checked; what they do not is a warning naming why.
    assert found["bedrock", pipeline.deployment.bedrock_model_id]["status"] == "OK"
    assert found["crm", "bitrix24"]["status"] == "OK"
    assert found["crm", "amocrm"]["status"] == "OK"
    assert found["sms", "sms"]["status"] == "WARN"
    assert "not served" in found["sms", "sms"]["detail"]

    assert pipeline.ops("set-webhook", "--yes").returncode == 0
    try:
        code, found = doctor(pipeline)
    finally:
        assert pipeline.ops("delete-webhook", "--yes").returncode == 0
    assert {key: f["status"] for key, f in found.items() if key[0] in ("secrets", "webhook")} == {
        key: "OK" for key in found if key[0] in ("secrets", "webhook")
    }
    assert ("webhook", "url") in found
    assert pipeline.settings.telegram_bot_token not in json.dumps(list(found.values()))
