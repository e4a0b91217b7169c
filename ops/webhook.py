"""Telegram webhook commands: set-webhook, webhook-info, delete-webhook, rotate-secret."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from infra.outputs import OutputKey
from ops.context import Context
from ops.errors import OpsError
from ops.telegram import CRM_TOKEN_ALPHABET, DEFAULT_MAX_CONNECTIONS, BotApi, generate_secret_token
from pipeline import aws
from pipeline.registry import telegram_allowed_updates
from pipeline.telegram import UPDATE_KINDS


def allowed_updates() -> list[str]:
    """The kinds the consumers subscribe to; "every kind" is spelled out in full, because an
    empty or absent list makes Telegram leave out chat_member and the reaction kinds."""
    kinds = telegram_allowed_updates()
    return list(UPDATE_KINDS) if kinds is None else kinds


def _register(ctx: Context, api: BotApi, secret_token: str, max_connections: int) -> None:
    url = ctx.stack().require(OutputKey.WEBHOOK_URL)
    kinds = allowed_updates()
    api.set_webhook(
        url,
        secret_token,
        allowed_updates=kinds,
        max_connections=max_connections,
        drop_pending_updates=bool(ctx.option("drop_pending_updates")),
    )
    ctx.line("setWebhook: ok")
    ctx.field("url", url)
    ctx.field("secret_token", ctx.secret(secret_token))
    ctx.field("allowed_updates", ", ".join(kinds))
    ctx.field("max_connections", max_connections)
    ctx.field("drop_pending_updates", "yes" if ctx.option("drop_pending_updates") else "no")


def set_webhook(ctx: Context) -> None:
    api = ctx.bot_api()
    secret_token = ctx.secret_string(ctx.stack().require(OutputKey.TELEGRAM_SECRET_ID))
    url = ctx.stack().require(OutputKey.WEBHOOK_URL)
    if not ctx.confirm(f"point Telegram's webhook at {url} (setWebhook)"):
        return
    _register(ctx, api, secret_token, ctx.option("max_connections"))


def rotate_secret(ctx: Context) -> None:
    """Store a new secret as AWSCURRENT (the old one becomes AWSPREVIOUS), then tell Telegram.

    Until Telegram has the new value it keeps sending the old one, which the webhook accepts
    as AWSPREVIOUS for its grace window. The bot token is checked first, so a bad token
    changes nothing. Telegram's current max_connections is kept unless --max-connections says otherwise.
    """
    api = ctx.bot_api()
    current = api.get_webhook_info()
    max_connections = (
        ctx.option("max_connections") or current.get("max_connections") or DEFAULT_MAX_CONNECTIONS
    )
    secret_id = ctx.stack().require(OutputKey.TELEGRAM_SECRET_ID)
    ctx.stack().require(OutputKey.WEBHOOK_URL)
    if not ctx.confirm(
        f"store a new Telegram secret_token in {secret_id} and setWebhook with it "
        f"(max_connections {max_connections})"
    ):
        return
    new_token = generate_secret_token()
    version = aws.client("secretsmanager").put_secret_value(SecretId=secret_id, SecretString=new_token)
    ctx.line(f"secret {secret_id}: new AWSCURRENT version {version['VersionId']} (old one is AWSPREVIOUS)")
    try:
        _register(ctx, api, new_token, max_connections)
    except OpsError as error:
        raise OpsError(
            f"{error} -- the new secret is stored but Telegram still sends the previous one, which the "
            "webhook accepts only for SECRET_ROTATION_GRACE_SECONDS: run `python -m ops set-webhook` now"
        ) from error


def _iso(unix_time: Any) -> str | None:
    if not isinstance(unix_time, int) or unix_time <= 0:
        return None
    return datetime.fromtimestamp(unix_time, UTC).isoformat()


def webhook_info(ctx: Context) -> None:
    info = ctx.bot_api().get_webhook_info()
    if ctx.wants_json():
        ctx.json(info)
        return
    ctx.field("url", info.get("url"))
    ctx.field("pending_update_count", info.get("pending_update_count", 0))
    ctx.field("last_error_date", _iso(info.get("last_error_date")))
    ctx.field("last_error_message", info.get("last_error_message"))
    ctx.field("last_synchronization_error_date", _iso(info.get("last_synchronization_error_date")))
    ctx.field("max_connections", info.get("max_connections"))
    kinds = info.get("allowed_updates")
    ctx.field("allowed_updates", ", ".join(kinds) if kinds else "(Telegram's default kinds)")
    ctx.field("ip_address", info.get("ip_address"))


def delete_webhook(ctx: Context) -> None:
    drop = bool(ctx.option("drop_pending_updates"))
    api = ctx.bot_api()
    pending = "dropped" if drop else "kept"
    if not ctx.confirm(f"delete the webhook (Telegram stops delivering updates; pending ones {pending})"):
        return
    api.delete_webhook(drop_pending_updates=drop)
    ctx.line(f"deleteWebhook: ok (pending updates {'dropped' if drop else 'kept'})")


def rotate_crm_token(ctx: Context) -> None:
    """Store a new CRM token (`crm_auth` token mode) as AWSCURRENT; the old one becomes AWSPREVIOUS
    and is still accepted for the grace period, within which the CRM's templates get the new one.
    Printed only with --show-secrets (the operator pastes it into the templates)."""
    secret_id = ctx.stack().get(OutputKey.CRM_TOKEN_SECRET_ID)
    if secret_id is None:
        raise OpsError(
            f"{ctx.stack().origin} has no CRM token: it is created only where the webhook accepts one "
            "(crm_auth=token or signature_or_token, or amoCRM connected); nothing to rotate"
        )
    if not ctx.confirm(f"store a new CRM token in {secret_id} (the CRM's templates must then be updated)"):
        return
    new_token = generate_secret_token(CRM_TOKEN_ALPHABET)
    version = aws.client("secretsmanager").put_secret_value(SecretId=secret_id, SecretString=new_token)
    ctx.line(
        f"secret {secret_id}: new AWSCURRENT version {version['VersionId']} (the old token is AWSPREVIOUS,"
        " accepted for secret_rotation_grace_seconds: update the CRM's templates now)"
    )
    ctx.field("crm_token", ctx.secret(new_token))
