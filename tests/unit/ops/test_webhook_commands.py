"""set-webhook, rotate-secret, webhook-info and delete-webhook against moto and a fake Bot API."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import boto3
import pytest
from moto import mock_aws

from infra.outputs import OutputKey
from ops.context import HIDDEN
from pipeline.registry import telegram_allowed_updates
from pipeline.telegram import UPDATE_KINDS
from tests.unit.ops.support import (
    BOT_TOKEN,
    CRM_TOKEN,
    TELEGRAM_SECRET,
    WEBHOOK_URL,
    Deployed,
    FakeTelegram,
    create_resources,
    create_stack,
)


def secret_value(secret_id: str, stage: str = "AWSCURRENT") -> str:
    return str(
        boto3.client("secretsmanager").get_secret_value(SecretId=secret_id, VersionStage=stage)[
            "SecretString"
        ]
    )


def test_set_webhook_sends_stack_url_secret_and_registry_kinds(
    deployed: Deployed, telegram: FakeTelegram, run
):
    result = run("set-webhook", "--yes")

    assert result.code == 0, result.err
    [params] = telegram.params("setWebhook")
    assert params["url"] == WEBHOOK_URL
    assert params["secret_token"] == TELEGRAM_SECRET
    assert params["max_connections"] == 40
    assert "drop_pending_updates" not in params
    # `store` takes every kind, so the registry says "all" and the full list is spelled out
    # (an absent list would leave out chat_member and the reaction kinds).
    assert telegram_allowed_updates() is None
    assert params["allowed_updates"] == list(UPDATE_KINDS)
    assert f"url: {WEBHOOK_URL}" in result.out


def test_set_webhook_options_reach_telegram(deployed: Deployed, telegram: FakeTelegram, run):
    result = run("set-webhook", "--yes", "--max-connections", "100", "--drop-pending-updates")

    assert result.code == 0, result.err
    [params] = telegram.params("setWebhook")
    assert params["max_connections"] == 100
    assert params["drop_pending_updates"] is True


def test_allowed_updates_follow_the_registry_when_consumers_are_selective(
    deployed: Deployed, telegram: FakeTelegram, run, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr("ops.webhook.telegram_allowed_updates", lambda: ["callback_query", "message"])

    assert run("set-webhook", "--yes").code == 0
    assert telegram.params("setWebhook")[0]["allowed_updates"] == ["callback_query", "message"]


def test_set_webhook_hides_the_secret_unless_asked(deployed: Deployed, telegram: FakeTelegram, run):
    hidden = run("set-webhook", "--yes")
    shown = run("set-webhook", "--yes", "--show-secrets")

    assert TELEGRAM_SECRET not in hidden.out + hidden.err
    assert BOT_TOKEN not in hidden.out + hidden.err
    assert f"secret_token: {HIDDEN}" in hidden.out
    assert f"secret_token: {TELEGRAM_SECRET}" in shown.out


def test_bot_token_from_environment_wins_over_the_stack_secret(
    deployed: Deployed, telegram: FakeTelegram, run, monkeypatch: pytest.MonkeyPatch
):
    other_token = "987654:other-bot-token"
    telegram.token = other_token
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", other_token)

    assert run("set-webhook", "--yes").code == 0
    assert telegram.methods() == ["setWebhook"]


def test_bot_token_secret_option_is_read_from_secrets_manager(
    deployed: Deployed, telegram: FakeTelegram, run
):
    other_token = "555:token-in-another-secret"
    boto3.client("secretsmanager").create_secret(Name="other/bot", SecretString=other_token)
    telegram.token = other_token

    assert run("set-webhook", "--yes", "--bot-token-secret", "other/bot").code == 0
    assert telegram.methods() == ["setWebhook"]


def test_placeholder_bot_token_is_refused_before_calling_telegram(
    deployed: Deployed, telegram: FakeTelegram, run
):
    boto3.client("secretsmanager").put_secret_value(
        SecretId=deployed.bot_token_secret_id, SecretString="REPLACE_WITH_BOT_TOKEN"
    )

    result = run("set-webhook", "--yes")

    assert result.code == 2
    assert "does not hold a bot token" in result.err
    assert telegram.calls == []


def test_rotate_secret_makes_old_previous_and_registers_the_new_one(
    deployed: Deployed, telegram: FakeTelegram, run
):
    result = run("rotate-secret", "--yes")

    assert result.code == 0, result.err
    new_secret = secret_value(deployed.telegram_secret_id)
    assert new_secret != TELEGRAM_SECRET
    assert re.fullmatch(r"[A-Za-z0-9_-]{64}", new_secret)
    assert secret_value(deployed.telegram_secret_id, "AWSPREVIOUS") == TELEGRAM_SECRET
    [params] = telegram.params("setWebhook")
    assert params["secret_token"] == new_secret
    assert params["url"] == WEBHOOK_URL
    assert new_secret not in result.out + result.err


@pytest.mark.parametrize(("flags", "expected"), [((), 80), (("--max-connections", "10"), 10)])
def test_rotate_secret_keeps_telegrams_max_connections_unless_told(
    deployed: Deployed, telegram: FakeTelegram, run, flags: tuple[str, ...], expected: int
):
    telegram.webhook_info = {
        "url": WEBHOOK_URL,
        "has_custom_certificate": False,
        "pending_update_count": 0,
        "max_connections": 80,
    }

    assert run("rotate-secret", "--yes", *flags).code == 0
    assert telegram.params("setWebhook")[0]["max_connections"] == expected


def test_rotate_secret_prints_the_new_secret_only_when_asked(deployed: Deployed, telegram: FakeTelegram, run):
    result = run("rotate-secret", "--yes", "--show-secrets")

    assert result.code == 0, result.err
    assert f"secret_token: {secret_value(deployed.telegram_secret_id)}" in result.out


def test_rotate_secret_with_a_bad_bot_token_changes_nothing(
    deployed: Deployed, telegram: FakeTelegram, run, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "111:revoked-token")

    result = run("rotate-secret", "--yes")

    assert result.code == 2
    assert "rejected the bot token" in result.err
    assert secret_value(deployed.telegram_secret_id) == TELEGRAM_SECRET
    assert telegram.params("setWebhook") == []


def test_rotate_secret_tells_what_to_do_when_set_webhook_fails(
    deployed: Deployed, telegram: FakeTelegram, run
):
    telegram.webhook_info = {"url": WEBHOOK_URL, "has_custom_certificate": False, "pending_update_count": 0}
    original_answer = telegram.answer

    def fail_set_webhook(path: str, params: dict):
        if path.endswith("/setWebhook"):
            telegram.fail_with = (400, "Bad Request: bad webhook: Failed to resolve host")
        return original_answer(path, params)

    telegram.answer = fail_set_webhook  # type: ignore[method-assign]

    result = run("rotate-secret", "--yes")

    assert result.code == 2
    assert result.err.count("\n") == 1
    assert "bad webhook" in result.err
    assert "python -m ops set-webhook" in result.err
    # The new value is current (the webhook accepts both while Telegram catches up).
    assert secret_value(deployed.telegram_secret_id, "AWSPREVIOUS") == TELEGRAM_SECRET


def test_webhook_info_prints_telegram_state(deployed: Deployed, telegram: FakeTelegram, run):
    error_time = 1_767_225_600  # 2026-01-01T00:00:00Z
    telegram.webhook_info = {
        "url": WEBHOOK_URL,
        "has_custom_certificate": False,
        "pending_update_count": 7,
        "last_error_date": error_time,
        "last_error_message": "Wrong response from the webhook: 502 Bad Gateway",
        "max_connections": 40,
        "allowed_updates": ["message", "callback_query"],
    }

    result = run("webhook-info")

    assert result.code == 0, result.err
    assert telegram.methods() == ["getWebhookInfo"]
    lines = set(result.out.splitlines())
    assert f"url: {WEBHOOK_URL}" in lines
    assert "pending_update_count: 7" in lines
    assert f"last_error_date: {datetime.fromtimestamp(error_time, UTC).isoformat()}" in lines
    assert "last_error_date: 2026-01-01T00:00:00+00:00" in lines
    assert "last_error_message: Wrong response from the webhook: 502 Bad Gateway" in lines
    assert "max_connections: 40" in lines
    assert "allowed_updates: message, callback_query" in lines


def test_webhook_info_without_errors_shows_dashes(deployed: Deployed, telegram: FakeTelegram, run):
    result = run("webhook-info")

    assert result.code == 0, result.err
    assert "last_error_date: -" in result.out.splitlines()
    assert "url: -" in result.out.splitlines()


@pytest.mark.parametrize(("flag", "expected"), [((), False), (("--drop-pending-updates",), True)])
def test_delete_webhook(
    deployed: Deployed, telegram: FakeTelegram, run, flag: tuple[str, ...], expected: bool
):
    result = run("delete-webhook", "--yes", *flag)

    assert result.code == 0, result.err
    assert telegram.params("deleteWebhook") == [{"drop_pending_updates": expected}]


def test_rotate_crm_token_makes_the_old_one_previous_and_hides_the_new_one_unless_asked(
    deployed: Deployed, run
) -> None:
    secret_id = deployed.outputs[OutputKey.CRM_TOKEN_SECRET_ID]

    result = run("rotate-crm-token", "--yes")

    assert result.code == 0, result.err
    new_token = secret_value(secret_id)
    assert new_token != CRM_TOKEN and re.fullmatch(r"[A-Za-z0-9]{64}", new_token)  # fits a URL path
    assert secret_value(secret_id, "AWSPREVIOUS") == CRM_TOKEN  # still accepted for the grace period
    assert new_token not in result.out + result.err
    assert f"crm_token: {HIDDEN}" in result.out

    shown = run("rotate-crm-token", "--yes", "--show-secrets")
    assert shown.code == 0, shown.err
    assert f"crm_token: {secret_value(secret_id)}" in shown.out


def test_rotate_crm_token_on_a_stack_without_one_says_why_and_changes_nothing(run) -> None:
    """The default stack makes no CRM token (crm_auth=signature, no amoCRM): a clear refusal, not
    "no output" as if the stack were from another version."""
    with mock_aws():
        deployed = create_resources()
        del deployed.outputs[OutputKey.CRM_TOKEN_SECRET_ID]
        create_stack(deployed)

        result = run("rotate-crm-token", "--yes")

        assert result.code == 2
        assert "has no CRM token" in result.err
        assert "crm_auth=token or signature_or_token, or amoCRM connected" in result.err
        assert secret_value("pipeline/crm-token") == CRM_TOKEN
