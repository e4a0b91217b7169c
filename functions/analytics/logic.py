"""Count Telegram updates as CloudWatch metrics (EMF) and log one analytics line per update.

Each update is one EMF line of its own (`single_metric`): a batch mixes update types and chat
types, and dimensions added to the handler's shared metric set would leak from one record to
the next. Counts are exact because the worker runs this at most once per `event_id`.

Commands become a dimension only when known (`ANALYTICS_COMMANDS`): users can type any
`/word`, and every new dimension value is a new billed custom metric. The log line keeps the
actual command; it never holds the message text, and the user id is a keyed hash.
"""

from __future__ import annotations

import hashlib
import hmac
import os

from aws_lambda_powertools import Logger
from aws_lambda_powertools.metrics import MetricUnit, single_metric

from pipeline.envelope import Envelope
from pipeline.errors import PermanentError
from pipeline.telegram import TelegramUpdate, chat_type, command, integer_id, own_username, user_of
from pipeline.validation import Invalid

logger = Logger(child=True)

METRIC_NAME = "TelegramUpdates"
# Dimension value when an update has no chat type or no command (EMF values cannot be empty).
ABSENT = "none"
# Dimension value for a command outside the known set.
OTHER_COMMAND = "other"
# The commands Telegram asks every bot to support; extend with ANALYTICS_COMMANDS="/start,/buy".
DEFAULT_COMMANDS = ("/start", "/help", "/settings")


def known_commands() -> frozenset[str]:
    configured = os.environ.get("ANALYTICS_COMMANDS", "")
    extra = (c.strip().lower() for c in configured.split(",") if c.strip())
    return frozenset((*DEFAULT_COMMANDS, *extra))


def command_dimension(found: str | None) -> str:
    if found is None:
        return ABSENT
    return found if found in known_commands() else OTHER_COMMAND


def pseudonymous_user(user_id: int | None) -> str | None:
    """A stable, non-reversible user key: HMAC-SHA256 under `ANALYTICS_USER_SALT`, 16 hex digits.

    Telegram user ids are small integers: without a secret salt a plain hash is reversed by
    trying them all, so deployments should set the salt.
    """
    if user_id is None:
        return None
    salt = os.environ.get("ANALYTICS_USER_SALT", "").encode()
    return hmac.new(salt, str(user_id).encode(), hashlib.sha256).hexdigest()[:16]


def record_update(envelope: Envelope) -> dict[str, str]:
    """Emit the update's metric and log line; returns the dimensions (kept in the journal)."""
    if envelope.source != "telegram":
        raise PermanentError(f"analytics takes Telegram updates, got a {envelope.source} event")
    try:
        update = TelegramUpdate.parse(envelope.payload)
    except Invalid as error:
        raise PermanentError(f"payload is not a Telegram update ({error.error_count()} errors)") from error
    found_command = command(update, own_username())  # another bot's command is not one of ours
    dimensions = {
        "update_type": envelope.type,
        "chat_type": chat_type(update) or ABSENT,
        "command": command_dimension(found_command),
    }
    with single_metric(name=METRIC_NAME, unit=MetricUnit.Count, value=1) as metric:
        for name, value in dimensions.items():
            metric.add_dimension(name=name, value=value)
    logger.info(
        "analytics",
        extra={
            **dimensions,
            "command": found_command,
            "user": pseudonymous_user(integer_id(user_of(envelope.payload, envelope.type))),
        },
    )
    return dimensions
