"""Every consumer, discovered from its folder: what a consumer may declare, and how it is read.

The CDK stack (queues, DLQs, subscriptions, functions, layers), the local runtime (workers) and
the tests all read `CONSUMERS`. A consumer is a folder `functions/<name>/`: its declaration
`consumer.toml`, its handler package (`app.py` exposing `lambda_handler`), its own
`requirements.txt` (bundled into its own layer) and its `tests/`. The built-in consumers are
folders like any other; adding one (`make consumer NAME=x`) edits nothing outside its folder.
In Lambda the declarations are read from the asset's snapshot of them (`pipeline.declarations`).

A filter policy is an SNS filter policy on the message attributes the webhook sets:
`source`, `type`, and where they apply `chat_type`, `command`, `status`.

Sources: `telegram` (updates), `crm` (order-status events: the JSON contract, or what a CRM
source's consumer publishes), and the CRMs whose own webhooks the webhook accepts, `bitrix24` and
`amocrm`: their consumers look the deal up and publish a `crm` order-status event.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from pipeline.deadline import needed
from pipeline.declarations import DECLARATION as DECLARATION  # its folder's file (ops scaffold)
from pipeline.declarations import DeclarationError, parse_toml, read_declarations
from pipeline.errors import ACCOUNT_CAUSES
from pipeline.pacing import (
    BOT_API_TIMEOUT_SECONDS,
    BROADCAST_SHARE,
    PACING_SLACK_SECONDS,
    SEND_RATE_ENV,
    TELEGRAM_CHAT_INTERVAL_SECONDS,
    paced_environment,
)
from pipeline.team import team_file

# The fewest deliveries a consumer's queue allows before dead-lettering. AWS: "set the
# maxReceiveCount on the source queue's redrive policy to at least 5" for a queue that is a Lambda
# event source, since throttled or scaling-up polls may receive a message without the function
# ever running on it (https://docs.aws.amazon.com/lambda/latest/dg/services-sqs-configure.html).
MIN_MAX_RECEIVE_COUNT = 5
# SQS's bounds: a redrive policy's maxReceiveCount (1..1000); a Lambda event source on a FIFO
# queue takes at most 10 records a batch and no batching window (Lambda refuses both).
SQS_MAX_RECEIVE_COUNT = 1000
FIFO_MAX_BATCH_SIZE = 10
# The longest batching window an SQS event source takes (MaximumBatchingWindowInSeconds).
MAX_BATCHING_WINDOW_SECONDS = 300

# What one CRM order-status change is: a CRM may reuse an event id for another change of the
# same order, so the change's content names it. The sms consumer keys its idempotency on these
# envelope paths, and SNS dedupes a `crm` event on their hash (pipeline.envelope.deduplication_id).
CRM_CHANGE_KEY: tuple[str, ...] = (
    "event_id",
    "payload.order.id",
    "payload.order.status",
    "payload.occurred_at",
    "payload.order.transition_id",
    # A phone corrected in the CRM and the order re-read (same move, same stamp) is news: the
    # notification not yet sent goes to the corrected number (pipeline.sms.service).
    "payload.customer.phone",
)


def jmespath_list(paths: tuple[str, ...]) -> str:
    """The JMESPath multiselect list of dotted paths (Powertools' `event_key_jmespath`)."""
    return f"[{', '.join(paths)}]"


# DynamoDB item actions, as IAM names them, that a consumer's code calls on a table.
GET_ITEM = "dynamodb:GetItem"
PUT_ITEM = "dynamodb:PutItem"
UPDATE_ITEM = "dynamodb:UpdateItem"
DELETE_ITEM = "dynamodb:DeleteItem"
ITEM_ACTIONS = frozenset({GET_ITEM, PUT_ITEM, UPDATE_ITEM, DELETE_ITEM})
JOURNAL = "journal"
# What `pipeline.worker` does in the journal for every consumer: Powertools idempotency claims an
# event (a conditional PutItem), completes it (UpdateItem), releases it when the handler fails
# (DeleteItem) and reads a claim whose conditional put returned no old item (GetItem); an ordered
# consumer counts its attempts there (UpdateItem). What a consumer's own code does there (its
# contacts, its send journal, its Bot API call journal) is within these.
WORKER_JOURNAL_ACTIONS = (DELETE_ITEM, GET_ITEM, PUT_ITEM, UPDATE_ITEM)


# Telegram update kinds that carry a user's message (what a "new contact" or a reply starts from).
MESSAGE_KINDS = ("message", "business_message")


@dataclass(frozen=True)
class RetryPolicy:
    """How a consumer retries a failed record.

    Transient errors (timeouts, 5xx, 429, throttling) make the record visible again after an
    exponential backoff (equal jitter: between half and all of `base * 2**(attempt-1)`, capped at
    `max_delay_seconds`).
    At the `max_receive_count`-th delivery the worker sends it to the consumer's DLQ with the reason
    (the queue's redrive policy, same count, catches crashes and timeouts).
    Permanent errors (4xx, validation) go to the DLQ at once, without burning retries.
    """

    max_receive_count: int = MIN_MAX_RECEIVE_COUNT
    base_delay_seconds: int = 2
    max_delay_seconds: int = 300
    # How long a record paused by a refusal of the whole account stays away (`pipeline.pause`);
    # None: derived there (SQS's longest delay, or for an ordered consumer its retention's share).
    pause_seconds: int | None = None

    def __post_init__(self) -> None:
        if self.max_receive_count < MIN_MAX_RECEIVE_COUNT:
            raise ValueError(
                f"max_receive_count must be at least {MIN_MAX_RECEIVE_COUNT} (AWS's minimum for a Lambda "
                f"event source queue: throttled polls also count as receives), got {self.max_receive_count}"
            )
        if not 0 <= self.base_delay_seconds <= self.max_delay_seconds <= 43_200:
            raise ValueError("need 0 <= base_delay_seconds <= max_delay_seconds <= 43200 (SQS maximum)")
        if self.pause_seconds is not None and not 1 <= self.pause_seconds <= 900:
            raise ValueError("need 1 <= pause_seconds <= 900 (SQS's longest message delay)")


@dataclass(frozen=True)
class Consumer:
    """One consumer: its queue, DLQ, subscription and worker Lambda are all derived from this."""

    name: str
    description: str
    filter_policy: dict[str, Any]
    batch_size: int = 10
    batching_window_seconds: int = 0
    max_concurrency: int = 5
    timeout_seconds: int = 30
    memory_mb: int = 256
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    # Logical names of the secrets it reads (Secrets Manager), granted read in the stack; the
    # function gets each one's id in the environment variable `<NAME>_SECRET_ID`.
    secrets: tuple[str, ...] = ()
    # Secrets of `secrets` it reads only under one value of a deployment setting,
    # {secret: (setting, value)}: created and granted only then (`used_secrets`).
    secrets_when: dict[str, tuple[str, str]] = field(default_factory=dict)
    # The DynamoDB tables it uses, by logical name ("journal", "conversations", "bot_state"), each
    # with the item actions its code calls there: its role is granted exactly these, on the table
    # (`local.policy_check` fails on a grant no call of the end-to-end run used). The function
    # gets each table's name in `<NAME>_TABLE`. Every consumer has the journal, with at least
    # what the worker does there (WORKER_JOURNAL_ACTIONS).
    tables: dict[str, tuple[str, ...]] = field(default_factory=lambda: {JOURNAL: WORKER_JOURNAL_ACTIONS})
    # A CDK context key / local setting that must be non-empty for the consumer to exist at all
    # (e.g. the AI consumer is off unless a Bedrock model id is configured).
    requires_setting: str | None = None
    # Plain settings passed to the function as environment variables.
    environment: dict[str, str] = field(default_factory=dict)
    # JMESPath over the envelope naming one business event for Powertools idempotency: by default
    # its `event_id`. A consumer whose sender may reuse an id for another event keys on content.
    idempotency_key: str = "event_id"
    # Publishes events of its own to the events topic (a CRM source's consumer turns a vendor
    # event into an order-status event): granted sns:Publish there, topic ARN in EVENTS_TOPIC_ARN.
    publishes: bool = False
    # Asks the CRM sources' consumers to look at an order again (`pipeline.crm.look`: the `sms`
    # consumer, for an SMS refused for good that is redelivered): granted sns:Publish on the
    # events topic, its ARN in EVENTS_TOPIC_ARN; it publishes no order events (`publishes`).
    asks_crm_to_look: bool = False
    # Needs each chat's events in the order Telegram sent them (a conversation): its queue is an
    # SQS FIFO queue grouped by chat, fed by the FIFO events topic, and its worker stops a group at
    # its first failure. Others keep a standard queue (cheaper, and any order is fine for them).
    ordered: bool = False
    # A setting whose non-empty value switches this consumer off: the canned autoreply stands
    # down when the user's own bot (`bot_application`) answers, or callback queries would be
    # answered twice (Telegram refuses the second answer).
    unless_setting: str | None = None
    # Sends messages through the Bot API: each environment paces them to its share of Telegram's
    # limits (`pipeline.pacing`), Telegram's budget split over its `max_concurrency` environments;
    # the share is derived here into `environment`, so it follows a change of concurrency.
    sends_to_telegram: bool = False
    # Sends broadcasts (`pipeline.broadcast`): paced to the `broadcast_share` of the bot's rate
    # only, so interactive replies keep the rest.
    broadcasts: bool = False
    # The refusals of a whole account its remotes can answer (`pipeline.errors.ACCOUNT_CAUSES`):
    # the worker pauses its records on them, and each has an alarm of its own, naming the cause
    # (`infra.constructs.monitoring`).
    account_causes: tuple[str, ...] = ()
    # The time one record's calls that cannot be taken back need left (`pipeline.deadline`).
    # The timeout must give it to a batch's last record (`least_batch_timeout_seconds`), or
    # records late in a batch are refused in every invocation, retried until their DLQ.
    least_timeout_seconds: float = 0.0

    @property
    def telegram_share(self) -> float:
        """The share of the bot's rate its environments pace to by default (`infra.environment`
        gives it the deployment's `broadcast_share`)."""
        return BROADCAST_SHARE if self.broadcasts else 1.0

    @property
    def topic_publisher(self) -> bool:
        """Whether it publishes anything to the events topic (order events or look requests)."""
        return self.publishes or self.asks_crm_to_look

    @property
    def least_batch_timeout_seconds(self) -> float:
        """The least timeout that leaves a batch's last record its calls' time: the records
        before it may all be messages to one private chat, paced a second apart (`pipeline.pacing`;
        a seeded campaign, autoreply at 12 s and batches of 10: 18 of 3,000 messages
        dead-lettered after every retry was refused for time), and each paced send may start a
        little late (`PACING_SLACK_SECONDS`)."""
        if not self.least_timeout_seconds:
            return 0.0
        if not self.sends_to_telegram or self.batch_size == 1:
            return self.least_timeout_seconds
        paced = (self.batch_size - 1) * TELEGRAM_CHAT_INTERVAL_SECONDS
        return self.least_timeout_seconds + paced + PACING_SLACK_SECONDS

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or not self.name.islower():
            raise ValueError(f"consumer name {self.name!r} must be a lowercase Python identifier")
        if not set(WORKER_JOURNAL_ACTIONS) <= set(self.tables.get(JOURNAL, ())):
            raise ValueError(
                f"{self.name}: tables must give the journal WORKER_JOURNAL_ACTIONS (the worker's)"
            )
        if not set(self.account_causes) <= set(ACCOUNT_CAUSES):
            raise ValueError(f"{self.name}: account_causes must be among {list(ACCOUNT_CAUSES)}")
        if not set(self.secrets_when) <= set(self.secrets):
            raise ValueError(f"{self.name}: secrets_when names secrets not in secrets")
        unknown = sorted({a for actions in self.tables.values() for a in actions} - ITEM_ACTIONS)
        if unknown:
            raise ValueError(f"{self.name}: unknown table actions {unknown}; known: {sorted(ITEM_ACTIONS)}")
        if not 1 <= self.batch_size <= 10_000:
            raise ValueError(f"{self.name}: batch_size must be 1..10000")
        if not 0 <= self.batching_window_seconds <= MAX_BATCHING_WINDOW_SECONDS:
            raise ValueError(
                f"{self.name}: batching_window_seconds must be 0..{MAX_BATCHING_WINDOW_SECONDS}"
                " (Lambda's limit for an SQS event source)"
            )
        if self.batch_size > 10 and self.batching_window_seconds < 1:
            raise ValueError(f"{self.name}: a batch_size above 10 needs a batching window")
        if not 2 <= self.max_concurrency <= 1000:
            raise ValueError(f"{self.name}: max_concurrency must be 2..1000 (SQS event source limit)")
        if not 1 <= self.timeout_seconds <= 900:
            raise ValueError(f"{self.name}: timeout_seconds must be 1..900")
        if self.visibility_timeout_seconds > 43_200:
            raise ValueError(
                f"{self.name}: 6x timeout plus the batching window exceeds the SQS visibility maximum"
            )
        if self.ordered:
            if self.batch_size > FIFO_MAX_BATCH_SIZE:
                raise ValueError(
                    f"{self.name}: an ordered consumer reads a FIFO queue: batch_size at most "
                    f"{FIFO_MAX_BATCH_SIZE} (Lambda's limit for FIFO event sources)"
                )
            if self.batching_window_seconds:
                raise ValueError(
                    f"{self.name}: an ordered consumer reads a FIFO queue: no batching window "
                    "(Lambda refuses one for a FIFO event source)"
                )
        if self.timeout_seconds < self.least_batch_timeout_seconds:
            raise ValueError(
                f"{self.name}: timeout_seconds {self.timeout_seconds} leaves no call the time to be made"
                f" and recorded (pipeline.deadline) after a batch of {self.batch_size} in one chat:"
                f" at least {self.least_batch_timeout_seconds:g}"
            )
        if self.broadcasts and not self.sends_to_telegram:
            raise ValueError(f"{self.name}: broadcasts needs sends_to_telegram")
        if self.sends_to_telegram:
            # Derived (also over the value a `dataclasses.replace` carries from the original).
            object.__setattr__(
                self,
                "environment",
                {**self.environment, **paced_environment(self.max_concurrency, share=self.telegram_share)},
            )
        elif SEND_RATE_ENV in self.environment:
            raise ValueError(f"{self.name}: {SEND_RATE_ENV} is derived: set sends_to_telegram=True instead")
        if self.redrive_max_receive_count > SQS_MAX_RECEIVE_COUNT:
            raise ValueError(
                f"{self.name}: the queue's redrive maxReceiveCount would be {self.redrive_max_receive_count},"
                f" above SQS's {SQS_MAX_RECEIVE_COUNT}: lower retry.max_receive_count or batch_size"
            )

    def used_secrets(self, settings: Mapping[str, Any]) -> tuple[str, ...]:
        """The secrets it reads under these settings (CDK context or local settings)."""
        return tuple(
            name
            for name in self.secrets
            if name not in self.secrets_when
            or settings.get(self.secrets_when[name][0]) == self.secrets_when[name][1]
        )

    @property
    def handler(self) -> str:
        """Lambda handler string; the code asset root is `functions/`."""
        return f"{self.name}.app.lambda_handler"

    @property
    def visibility_timeout_seconds(self) -> int:
        """AWS guidance: at least 6x the function timeout, so a slow batch is never re-delivered
        mid-run; plus the batching window, through which the event source holds the records it has
        received before it invokes."""
        return 6 * self.timeout_seconds + self.batching_window_seconds

    @property
    def redrive_max_receive_count(self) -> int:
        """The queue's redrive policy count: the safety net behind the worker's own dead-lettering.

        An ordered consumer's record is also received, and not attempted, each time an earlier
        record of its group in the same batch fails (Powertools skips it to keep the order): up to
        `batch_size - 1` earlier records, each failing up to `max_receive_count` times. Its queue
        allows that many receives, and the worker counts real attempts itself
        (`pipeline.worker`), so a record held back is never dead-lettered for it.
        """
        factor = self.batch_size if self.ordered else 1
        return self.retry.max_receive_count * factor

    @property
    def source(self) -> str | None:
        sources = self.filter_policy.get("source")
        return sources[0] if isinstance(sources, list) and len(sources) == 1 else None


# What a declaration may name instead of spelling out a value the pipeline derives elsewhere.
NAMED_IDEMPOTENCY_KEYS: dict[str, str] = {
    "event_id": "event_id",
    # One CRM order-status change, whatever event id the CRM gave it (CRM_CHANGE_KEY).
    "crm_change": jmespath_list(CRM_CHANGE_KEY),
}
NAMED_LEAST_TIMEOUTS: dict[str, float] = {
    # One Bot API call, made and recorded (pipeline.deadline).
    "bot_api_call": needed(BOT_API_TIMEOUT_SECONDS),
}
# A consumer is a folder `functions/<name>/` holding this file (its declaration), its handler
# package (`app.py` exposing `lambda_handler`), optionally its `requirements.txt` (bundled into its
# own layer) and its `tests/`.
REQUIREMENTS = "requirements.txt"
# Where the folders are: this variable if set; in Lambda the code asset (`LAMBDA_TASK_ROOT`, the
# whole `functions/` folder); else the repository's `functions/`.
FUNCTIONS_DIR_ENV = "PIPELINE_FUNCTIONS_DIR"
# layers/shared/python/pipeline/ in the repository; in Lambda /opt/python/pipeline/, too shallow
# for `parents[4]` (an IndexError at import), and `.parent` stops at the root.
_REPOSITORY_FUNCTIONS = Path(__file__).resolve().parent.parent.parent.parent.parent / "functions"
# Declaration keys that are not Consumer fields of the same name.
_DECLARATION_ONLY = {"events", "retry", "tables"}
_NOT_DECLARED = {"filter_policy", "retry", "tables"}


def functions_dir() -> Path:
    """The folder holding one folder per function (see FUNCTIONS_DIR_ENV)."""
    configured = os.environ.get(FUNCTIONS_DIR_ENV) or os.environ.get("LAMBDA_TASK_ROOT")
    return Path(configured) if configured else _REPOSITORY_FUNCTIONS


def _retry(value: Any, where: str) -> RetryPolicy:
    if not isinstance(value, dict):
        raise DeclarationError(f"{where}: [retry] must be a table")
    known = {f.name for f in fields(RetryPolicy)}
    if set(value) - known:
        raise DeclarationError(
            f"{where}: unknown [retry] keys {sorted(set(value) - known)}; known: {sorted(known)}"
        )
    try:
        return RetryPolicy(**value)
    except (TypeError, ValueError) as error:
        raise DeclarationError(f"{where}: [retry] {error}") from error


def declared(declaration: Mapping[str, Any], where: str) -> Consumer:
    """The Consumer a declaration (a parsed consumer.toml) describes.

    Its keys are Consumer's fields, except `events` (the SNS filter policy), `retry` (a
    RetryPolicy's fields) and `tables` (the tables besides the journal, which every consumer has
    with WORKER_JOURNAL_ACTIONS). `idempotency_key` and `least_timeout_seconds` may also name a
    value of NAMED_IDEMPOTENCY_KEYS / NAMED_LEAST_TIMEOUTS.
    """
    known = ({f.name for f in fields(Consumer)} - _NOT_DECLARED) | _DECLARATION_ONLY
    unknown = sorted(set(declaration) - known)
    if unknown:
        raise DeclarationError(f"{where}: unknown keys {unknown}; known: {sorted(known)}")
    values = {key: value for key, value in declaration.items() if key not in _DECLARATION_ONLY}
    if "events" not in declaration or not isinstance(declaration["events"], dict):
        raise DeclarationError(
            f"{where}: needs an [events] table (the SNS filter policy, e.g. source = [...])"
        )
    for attribute, allowed in declaration["events"].items():
        if not isinstance(allowed, list) or not allowed:
            raise DeclarationError(f"{where}: [events] {attribute} must be a non-empty list of values")
    values["filter_policy"] = dict(declaration["events"])
    if "retry" in declaration:
        values["retry"] = _retry(declaration["retry"], where)
    tables = declaration.get("tables", {})
    if not isinstance(tables, dict):
        raise DeclarationError(f"{where}: [tables] must be a table of action lists")
    journal = sorted({*WORKER_JOURNAL_ACTIONS, *tables.get(JOURNAL, ())})
    values["tables"] = {JOURNAL: tuple(journal), **{t: tuple(a) for t, a in tables.items() if t != JOURNAL}}
    for listed in ("secrets", "account_causes"):
        if listed in values:
            values[listed] = tuple(values[listed])
    if "secrets_when" in values:
        values["secrets_when"] = {secret: tuple(when) for secret, when in values["secrets_when"].items()}
    key = values.get("idempotency_key")
    if isinstance(key, str) and key in NAMED_IDEMPOTENCY_KEYS:
        values["idempotency_key"] = NAMED_IDEMPOTENCY_KEYS[key]
    least = values.get("least_timeout_seconds")
    if isinstance(least, str):
        if least not in NAMED_LEAST_TIMEOUTS:
            raise DeclarationError(
                f"{where}: least_timeout_seconds is seconds or one of {sorted(NAMED_LEAST_TIMEOUTS)}"
            )
        values["least_timeout_seconds"] = NAMED_LEAST_TIMEOUTS[least]
    try:
        return Consumer(**values)
    except (TypeError, ValueError) as error:
        raise DeclarationError(f"{where}: {error}") from error


def discover(root: Path | None = None) -> tuple[Consumer, ...]:
    """Every consumer folder under `root` (default `functions_dir()`), by name: the folders
    holding a DECLARATION. A folder's declaration must name the folder."""
    root = root if root is not None else functions_dir()
    consumers = []
    for folder, where, declaration in read_declarations(root):
        consumer = declared(declaration, where)
        if consumer.name != folder:
            raise DeclarationError(f"{where}: name {consumer.name!r} must be its folder's, {folder!r}")
        consumers.append(consumer)
    return tuple(consumers)


# The team's tuning of any consumer (`team/consumers.toml`), without editing its declaration:
# `[<consumer>]` tables of these keys, and `[<consumer>.retry]` of RetryPolicy's. The stack and the
# local runtime read the file and give every function its content in TUNING_ENV (JSON), which a
# function reads instead (a Lambda code asset has no `team/`).
TUNING_FILE_NAME = "consumers.toml"
TUNING_ENV = "PIPELINE_CONSUMER_TUNING"
TUNABLE = ("batch_size", "batching_window_seconds", "max_concurrency", "memory_mb", "timeout_seconds")


def read_tuning() -> dict[str, Any]:
    """The team's tuning as written: TUNING_ENV if set, else the team's file, else none."""
    raw = os.environ.get(TUNING_ENV, "")
    if raw.strip():
        try:
            loaded = json.loads(raw)
        except ValueError as error:
            raise DeclarationError(f"{TUNING_ENV}: not JSON ({error})") from error
        if not isinstance(loaded, dict):
            raise DeclarationError(f"{TUNING_ENV}: must be a JSON object of consumer names")
        return loaded
    path = team_file(TUNING_FILE_NAME)
    if not path.is_file():
        return {}
    return parse_toml(path.read_text(encoding="utf-8"), str(path))


def _whole_number(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def tuned(consumers: tuple[Consumer, ...], tuning: Mapping[str, Any], where: str) -> tuple[Consumer, ...]:
    """`consumers` with the team's `tuning` applied, each checked as a declaration is; a tuning
    naming no consumer, a key that is not tunable or a value the consumer refuses fails naming
    `where` (the file) and the consumer."""
    known = {consumer.name: consumer for consumer in consumers}
    unknown = sorted(set(tuning) - set(known))
    if unknown:
        raise DeclarationError(f"{where}: {unknown} name no consumer; known: {sorted(known)}")
    for name, values in tuning.items():
        at = f"{where}: [{name}]"
        if not isinstance(values, dict):
            raise DeclarationError(f"{at} must be a table")
        keys = sorted(set(values) - {*TUNABLE, "retry"})
        if keys:
            raise DeclarationError(f"{at}: {keys} cannot be tuned here; tunable: {[*TUNABLE, 'retry']}")
        retry = values.get("retry", {})
        if not isinstance(retry, dict):
            raise DeclarationError(f"{at}: retry must be a table")
        numbers = {**{k: v for k, v in values.items() if k != "retry"}, **retry}
        wrong = sorted(key for key, value in numbers.items() if not _whole_number(value))
        if wrong:
            raise DeclarationError(f"{at}: {wrong} must be whole numbers")
        changes = {key: value for key, value in values.items() if key != "retry"}
        if retry:
            changes["retry"] = _retry({**dataclasses.asdict(known[name].retry), **retry}, at)
        try:
            known[name] = dataclasses.replace(known[name], **changes)
        except (TypeError, ValueError) as error:
            raise DeclarationError(f"{at}: {error}") from error
    return tuple(known[consumer.name] for consumer in consumers)


def team_tuning_source() -> str:
    """What names the tuning in force in errors: the variable or the file."""
    return TUNING_ENV if os.environ.get(TUNING_ENV, "").strip() else str(team_file(TUNING_FILE_NAME))


# The tuning in force, as written (what the stack passes on in TUNING_ENV), and every consumer.
TUNING: dict[str, Any] = read_tuning()
CONSUMERS: tuple[Consumer, ...] = tuned(discover(), TUNING, team_tuning_source())


def secret_env_var(secret: str) -> str:
    return f"{secret.upper()}_SECRET_ID"


def table_env_var(table: str) -> str:
    return f"{table.upper()}_TABLE"


def enabled(settings: dict[str, Any], consumers: Iterable[Consumer] = CONSUMERS) -> tuple[Consumer, ...]:
    """The consumers that exist under these settings (CDK context or local settings): those whose
    `requires_setting` is set and whose `unless_setting` is not."""
    return tuple(
        c
        for c in consumers
        if (c.requires_setting is None or settings.get(c.requires_setting))
        and not (c.unless_setting and settings.get(c.unless_setting))
    )


def by_name(name: str, consumers: Iterable[Consumer] = CONSUMERS) -> Consumer:
    for consumer in consumers:
        if consumer.name == name:
            return consumer
    raise KeyError(f"no consumer named {name!r}; known: {', '.join(c.name for c in consumers)}")


def matches(filter_policy: dict[str, Any], attributes: dict[str, str]) -> bool:
    """Whether SNS would deliver a message with these attributes under this filter policy.

    Supports the subset the registry uses: exact string lists and `{"exists": bool}`; every key
    of the policy must match (AND), any value in a key's list may (OR). The local runtime uses
    this only to explain routing; moto applies the real policies.
    """
    for key, allowed in filter_policy.items():
        value = attributes.get(key)
        ok = False
        for rule in allowed:
            if isinstance(rule, str):
                ok = value == rule
            elif isinstance(rule, dict) and "exists" in rule:
                ok = (value is not None) == bool(rule["exists"])
            else:
                raise ValueError(f"unsupported filter rule {rule!r}")
            if ok:
                break
        if not ok:
            return False
    return True


def telegram_allowed_updates(consumers: Iterable[Consumer] = CONSUMERS) -> list[str] | None:
    """`allowed_updates` for setWebhook: the union of kinds Telegram consumers subscribe to.

    None means "every kind" (a consumer takes all Telegram updates, e.g. `store`).
    """
    kinds: set[str] = set()
    for consumer in consumers:
        if consumer.filter_policy.get("source") != ["telegram"]:
            continue
        types = consumer.filter_policy.get("type")
        if types is None:
            return None
        kinds.update(types)
    return sorted(kinds)
