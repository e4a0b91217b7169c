"""What the stack's secrets start as, without the CDK: the stack (`infra.constructs.secrets`)
creates them from it, and `bin/ops doctor` tells a placeholder from a value the operator put in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# Telegram's secret_token allows 1-256 of A-Z a-z 0-9 _ -; without punctuation Secrets Manager
# draws from A-Z a-z 0-9 only, which fits.
GENERATED_SECRET_LENGTH = 64


@dataclass(frozen=True)
class ConsumerSecretSpec:
    """What the operator must put into a consumer secret, and the placeholder it starts with."""

    description: str
    placeholder: str


CONSUMER_SECRET_SPECS: dict[str, ConsumerSecretSpec] = {
    "crm_api": ConsumerSecretSpec(
        description=(
            'CRM API for the crm consumer. JSON: {"kind": "webhook" | "bitrix24", '
            '"url": "<https endpoint or Bitrix24 inbound webhook URL>", '
            '"auth_header": "<Authorization header value, empty if the URL carries the credential>"}'
        ),
        placeholder=json.dumps({"kind": "webhook", "url": "", "auth_header": ""}),
    ),
    "bitrix24_api": ConsumerSecretSpec(
        description=(
            'Bitrix24 portal REST access for the bitrix24 consumer. JSON: {"url": "https://<portal>/rest/'
            '<user>/<code>/"}: an inbound webhook with the crm scope (it reads deals and contacts).'
        ),
        placeholder=json.dumps({"url": ""}),
    ),
    "amocrm_api": ConsumerSecretSpec(
        description=(
            'amoCRM API access for the amocrm consumer. JSON: {"base_url": "https://<subdomain>.amocrm.ru", '
            '"token": "<long-lived access token of a private integration>"} (it reads leads and contacts).'
        ),
        placeholder=json.dumps({"base_url": "", "token": ""}),
    ),
    "telegram_bot_token": ConsumerSecretSpec(
        description="Telegram bot token from @BotFather (plain string, e.g. 123456:ABC-DEF...).",
        placeholder="REPLACE_WITH_BOT_TOKEN",
    ),
    "sms_gateway": ConsumerSecretSpec(
        description=(
            'Bearer token of the HTTP SMS gateway (SMS_GATEWAY=http): the token, or {"token": "..."}. '
            "Unused with AWS End User Messaging."
        ),
        # An empty token makes the http gateway fail loudly instead of sending a fake credential.
        placeholder=json.dumps({"token": ""}),
    ),
}


def consumer_secret_spec(name: str) -> ConsumerSecretSpec:
    """The spec for a registry secret name; a new name gets a generic one rather than failing."""
    return CONSUMER_SECRET_SPECS.get(
        name,
        ConsumerSecretSpec(
            description=f"Secret '{name}' read by the pipeline's consumers; replace the placeholder.",
            placeholder="REPLACE_ME",
        ),
    )


# The JSON keys a consumer secret needs non-empty (the rest may stay empty, e.g. `auth_header`).
REQUIRED_KEYS: dict[str, tuple[str, ...]] = {
    "crm_api": ("url",),
    "bitrix24_api": ("url",),
    "amocrm_api": ("base_url", "token"),
    "sms_gateway": ("token",),
}
# Secrets that may also hold their one value as a plain string ("the token, or {"token": ...}").
PLAIN_STRING_ALLOWED = frozenset({"sms_gateway"})


def unfilled(name: str, value: str) -> str | None:
    """Why consumer secret `name` holding `value` is not filled in yet, or None when it is.

    Only the shape is checked (the placeholder, empty required keys): whether the credential
    works is for the service it is for to say."""
    if not value.strip():
        return "empty"
    if value == consumer_secret_spec(name).placeholder:
        return "still the placeholder the stack created"
    required = REQUIRED_KEYS.get(name)
    if not required:
        return None
    try:
        document = json.loads(value)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        return None if name in PLAIN_STRING_ALLOWED else "not a JSON object"
    empty = [key for key in required if not isinstance(document.get(key), str) or not document[key].strip()]
    return f"{', '.join(empty)} empty" if empty else None
