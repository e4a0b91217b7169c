"""The Bot API error table (`pipeline.bot_api_errors`): each row through the Telegram stand-in,
answered with Telegram's own error body, in the bot engine and (for the methods it calls) the
autoreply consumer, which must both do the row's one worker action; and properties of the table
over generated answers."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from local.fakes.telegram import TelegramFake
from pipeline import aws
from pipeline.bot_api_errors import (
    ACTIONS,
    ROWS,
    ChatUnreachable,
    Row,
    Scope,
    classify,
    fallback,
)
from pipeline.errors import AccountRefused, PermanentError, TransientError
from tests.unit.consumer_support import JOURNAL_TABLE, telegram_envelope, telegram_update
from tests.unit.consumers.calling_bot import AFTER, CALL_ENV
from tests.unit.consumers.conftest import BOT_TOKEN, DeployedConsumer

ANNA = 123456789
MIGRATED_TO = -1001234567890
# Calls the autoreply consumer makes.
AUTOREPLY_METHODS = {"sendMessage": "private_start", "answerCallbackQuery": "callback_query"}


@dataclass(frozen=True)
class Case:
    """One error answer: the call it answers, Telegram's body, and the class it must get."""

    method: str
    status: int
    description: str
    scope: Scope
    parameters: dict[str, Any] | None = None

    @property
    def id(self) -> str:
        return f"{self.scope}-{self.method}-{self.status}-{self.description[:40]}"


def row_case(row: Row) -> Case:
    parameters: dict[str, Any] | None = None
    if row.status == 429:
        parameters = {"retry_after": 7}
    elif "upgraded to a supergroup" in row.text:
        parameters = {"migrate_to_chat_id": MIGRATED_TO}
    method = sorted(row.methods)[0] if row.methods else "sendMessage"
    return Case(method, row.status, row.description, row.scope, parameters)


# Every row, then answers no row knows (each falls to its status's class, never to done).
CASES = [row_case(row) for row in ROWS] + [
    Case("sendMessage", 400, "Bad Request: TOPIC_DELETED", Scope.MESSAGE),
    Case("sendMessage", 400, "Bad Request: message is not modified", Scope.MESSAGE),  # not an edit
    Case("answerCallbackQuery", 400, "Bad Request: BUTTON_DATA_INVALID", Scope.MESSAGE),
    Case("sendMessage", 403, "Forbidden: a refusal Telegram adds later", Scope.CHAT),
    Case("sendMessage", 409, "Conflict: terminated by other getUpdates request", Scope.MESSAGE),
    Case("sendMessage", 503, "Service Unavailable", Scope.RETRY),
]


def refuse(telegram: TelegramFake, case: Case) -> None:
    options = {"parameters": case.parameters} if case.parameters else {}
    telegram.refuse(case.method, case.status, case.description, **options)


def reason(case: Case) -> str:
    moved = (
        f" (now chat {MIGRATED_TO})" if case.parameters and "migrate_to_chat_id" in case.parameters else ""
    )
    return f"telegram {case.method}: HTTP {case.status} {case.description}{moved}"


def blocked_item() -> dict[str, Any] | None:
    table = aws.resource("dynamodb").Table(JOURNAL_TABLE)
    item: dict[str, Any] | None = table.get_item(Key={"id": f"blocked#{ANNA}"}).get("Item")
    return item


def check_action(consumer: DeployedConsumer, case: Case, failed: list[str], went_on: bool) -> None:
    """The one worker action of the case's class (`ACTIONS`) and no other."""
    outcome = consumer.app.worker.last_outcome
    dead = consumer.dead_letter_reasons()
    if case.scope is Scope.DONE:
        assert (failed, dead, outcome.status, went_on) == ([], [], "processed", True)
        assert blocked_item() is None
    elif case.scope is Scope.MESSAGE:
        assert (failed, dead, went_on) == ([], [reason(case)], False)
    elif case.scope is Scope.CHAT:
        assert (failed, dead, outcome.status, went_on) == ([], [], "processed", False)
        item = blocked_item()
        assert item is not None and item["description"] == case.description
    elif case.scope is Scope.BOT:
        # Paused: kept in its queue (a FIFO queue holds it, a standard one takes a delayed copy).
        assert (dead, outcome.status, went_on) == ([], "paused", False)
    else:
        assert (len(failed), dead, outcome.status, went_on) == (1, [], "retry", False)
        retry_after = (case.parameters or {}).get("retry_after")
        if retry_after is not None:
            assert outcome.delay_seconds == retry_after


@pytest.fixture
def calling_bot(
    deploy_bot: Callable[[str], DeployedConsumer], telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch
) -> DeployedConsumer:
    consumer = deploy_bot("tests.unit.consumers.calling_bot:build")
    monkeypatch.setenv(CALL_ENV, json.dumps({"method": "getMe", "params": {}}))
    consumer.deliver(telegram_envelope(telegram_update("private_start")))  # initialized (getMe)
    telegram.clear_calls()
    return consumer


@pytest.mark.filterwarnings("ignore:Please use 'Bot")  # PTB's nudge towards its named methods
@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_every_error_answer_gets_its_class_s_one_action_in_the_bot_engine(
    calling_bot: DeployedConsumer, telegram: TelegramFake, monkeypatch: pytest.MonkeyPatch, case: Case
) -> None:
    params = {"chat_id": ANNA, "message_id": 3, "callback_query_id": "q1", "text": "x", "description": "x"}
    monkeypatch.setenv(CALL_ENV, json.dumps({"method": case.method, "params": params}))
    refuse(telegram, case)
    update = telegram_update("private_start")
    update["update_id"] += 1

    delivery = calling_bot.deliver(telegram_envelope(update))

    [answered] = [c for c in telegram.calls() if c["path"].endswith(f"/{case.method}")]
    assert answered["status"] == case.status  # the stand-in gave Telegram's refusal
    went_on = any((c["body"] or {}).get("text") == AFTER for c in telegram.calls())
    check_action(calling_bot, case, delivery.failed, went_on)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.method in AUTOREPLY_METHODS], ids=lambda case: case.id
)
def test_every_error_answer_gets_its_class_s_one_action_in_the_reply_consumer(
    autoreply: DeployedConsumer, telegram: TelegramFake, case: Case
) -> None:
    refuse(telegram, case)

    delivery = autoreply.deliver(telegram_envelope(telegram_update(AUTOREPLY_METHODS[case.method])))

    [answered] = telegram.calls()
    assert answered["status"] == case.status
    check_action(autoreply, case, delivery.failed, went_on=case.scope is Scope.DONE)


# -- the table's properties ---------------------------------------------------------------------

METHODS = st.sampled_from(
    sorted({m for row in ROWS for m in row.methods or ()} | {"sendMessage", "forwardMessage", "getMe"})
)
STATUSES = st.integers(min_value=300, max_value=599)
KNOWN_TEXTS = [row.text for row in ROWS]
UNKNOWN_DESCRIPTIONS = st.text(max_size=80).filter(lambda d: not any(t in d.casefold() for t in KNOWN_TEXTS))
ERROR_TYPES: dict[Scope, type[BaseException] | None] = {
    Scope.DONE: None,
    Scope.MESSAGE: PermanentError,
    Scope.CHAT: ChatUnreachable,
    Scope.BOT: AccountRefused,
    Scope.RETRY: TransientError,
}


def test_each_class_has_one_worker_action_and_each_row_a_sample_of_its_own() -> None:
    assert set(ACTIONS) == set(Scope) == set(ERROR_TYPES)
    assert len(set(ACTIONS.values())) == len(ACTIONS)
    for row in ROWS:
        assert row.text == row.text.casefold() and row.text in row.description.casefold()
        assert row.scope is not Scope.DONE or row.methods, "a done row names the methods it proves"
    assert len({(row.status, row.text) for row in ROWS}) == len(ROWS)


@given(method=METHODS, status=STATUSES, description=UNKNOWN_DESCRIPTIONS)
def test_an_answer_no_row_knows_falls_to_its_status_s_class_never_to_done(
    method: str, status: int, description: str
) -> None:
    found = classify(method, status, {"ok": False, "error_code": status, "description": description})
    assert found.row is None and found.scope is fallback(status) is not Scope.DONE


@given(body=st.recursive(st.none() | st.booleans() | st.integers() | st.text(), st.lists, max_leaves=8))
def test_a_body_that_is_not_telegram_s_is_classified_by_status_alone(body: Any) -> None:
    assert classify("sendMessage", 400, body).scope is Scope.MESSAGE
    assert classify("sendMessage", 502, body).scope is Scope.RETRY


@given(
    index=st.integers(min_value=0, max_value=len(ROWS) - 1),
    flips=st.lists(st.booleans(), min_size=200, max_size=200),
    before=st.sampled_from(["", "Bad Request: ", "Forbidden: ", "Error: "]),
    after=st.text(max_size=30).filter(lambda d: not any(t in d.casefold() for t in KNOWN_TEXTS)),
)
def test_a_row_matches_whatever_the_case_and_the_details_around_it_and_always_the_same(
    index: int, flips: list[bool], before: str, after: str
) -> None:
    row = ROWS[index]
    text = "".join(c.swapcase() if flip else c for c, flip in zip(row.text, flips, strict=False))
    method = sorted(row.methods)[0] if row.methods else "sendMessage"
    body = {"description": before + text + after}
    first, again = classify(method, row.status, body), classify(method, row.status, body)
    assert first == again and first.scope is row.scope


@given(
    method=METHODS, status=STATUSES, description=st.text(max_size=200), retry=st.none() | st.integers(0, 99)
)
def test_every_answer_maps_to_its_class_s_one_error_and_done_only_where_a_row_proves_it(
    method: str, status: int, description: str, retry: int | None
) -> None:
    body: dict[str, Any] = {"description": description}
    if retry is not None:
        body["parameters"] = {"retry_after": retry}
    found = classify(method, status, body)
    expected = ERROR_TYPES[found.scope]
    error = found.error(ANNA)
    assert (type(error) if error is not None else None) is expected
    if found.scope is Scope.DONE:
        assert found.row is not None and found.row.methods is not None and method in found.row.methods
    if retry is not None and found.scope is not Scope.DONE:
        assert isinstance(error, TransientError) and error.retry_after == retry
    assert BOT_TOKEN not in found.reason
