"""`pipeline.telegram`: the kinds table, Update model and routing attributes, checked against aiogram.

The kinds table says where each kind keeps its chat and user; every path is checked against
aiogram's models, and `chat_of`/`user_of` against aiogram's own reading of each fixture.
"""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import pytest
from aiogram.types import Chat, Message, Update, User
from pydantic import BaseModel

from pipeline import telegram
from pipeline.telegram import (
    KINDS,
    BotCommand,
    TelegramUpdate,
    bot_command,
    chat_of,
    chat_type,
    command,
    dig,
    integer_id,
    update_type,
    user_of,
)
from pipeline.validation import Invalid
from tests.unit.consumer_support import aiogram_context
from tests.unit.webhook.support import TELEGRAM_FIXTURES, load_fixture

KINDS_WITH_CHAT = sorted(kind for kind, layout in KINDS.items() if layout.chat is not None)
KINDS_WITH_USER = sorted(kind for kind, layout in KINDS.items() if layout.user is not None)
KINDS_WITH_CHAT_TYPE = sorted(kind for kind, layout in KINDS.items() if layout.chat_type is not None)


def kind_model(kind: str) -> type[BaseModel]:
    """aiogram's model of the kind's object (each `Update` field is `Model | None`)."""
    [model] = models_of(Update.model_fields[kind].annotation)
    return typing.cast(type[BaseModel], model)


def models_of(annotation: Any) -> list[Any]:
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return [t for t in typing.get_args(annotation) if t is not type(None)]
    return [annotation]


def types_at(model: type[BaseModel], path: tuple[str, ...]) -> set[Any]:
    """The types aiogram allows at `path` (Bot API JSON names) from `model`; empty if absent."""
    current: list[Any] = [model]
    for key in path:
        following: list[Any] = []
        for candidate in current:
            fields = getattr(candidate, "model_fields", {})
            for name, info in fields.items():
                if (info.alias or name) == key:
                    following.extend(models_of(info.annotation))
        current = following
    return set(current)


def test_update_kinds_are_exactly_aiograms() -> None:
    assert [name for name in Update.model_fields if name != "update_id"] == list(telegram.UPDATE_KINDS)
    for kind in telegram.UPDATE_KINDS:  # each known kind is read, and must be an object
        with pytest.raises(Invalid) as refused:
            TelegramUpdate.parse({"update_id": 1, kind: 5})
        assert [error["loc"] for error in refused.value.errors()] == [(kind,)]


@pytest.mark.parametrize("fixture", TELEGRAM_FIXTURES, ids=lambda path: path.stem)
def test_fixture_is_a_valid_bot_api_update(fixture: Path) -> None:
    data = load_fixture(fixture)
    Update.model_validate(data)
    assert TelegramUpdate.parse(data).update_id == data["update_id"]


@pytest.mark.parametrize("kind", KINDS_WITH_CHAT)
def test_every_chat_path_leads_to_a_chat_in_the_bot_api(kind: str) -> None:
    assert Chat in types_at(kind_model(kind), typing.cast(tuple[str, ...], KINDS[kind].chat))


@pytest.mark.parametrize("kind", KINDS_WITH_USER)
def test_every_user_path_leads_to_a_user_in_the_bot_api(kind: str) -> None:
    assert types_at(kind_model(kind), typing.cast(tuple[str, ...], KINDS[kind].user)) == {User}


@pytest.mark.parametrize("kind", KINDS_WITH_CHAT_TYPE)
def test_every_chat_type_path_leads_to_a_string_in_the_bot_api(kind: str) -> None:
    assert types_at(kind_model(kind), typing.cast(tuple[str, ...], KINDS[kind].chat_type)) == {str}


@pytest.mark.parametrize("kind", telegram.UPDATE_KINDS)
def test_no_kind_with_a_direct_chat_or_user_is_missing(kind: str) -> None:
    model, layout = kind_model(kind), KINDS[kind]
    if Chat in types_at(model, ("chat",)):
        assert layout.chat == ("chat",)
    for key in ("from", "user"):
        if types_at(model, (key,)) == {User}:
            assert layout.user == (key,)


def test_message_kinds_are_the_kinds_holding_a_message() -> None:
    holding_message = {kind for kind in telegram.UPDATE_KINDS if kind_model(kind) is Message}
    assert holding_message == set(telegram.MESSAGE_UPDATE_KINDS)


@pytest.mark.parametrize("fixture", TELEGRAM_FIXTURES, ids=lambda path: path.stem)
def test_chat_user_and_chat_type_match_aiogram_for_every_fixture(fixture: Path) -> None:
    update = load_fixture(fixture)
    kind = update_type(TelegramUpdate.parse(update))
    context = aiogram_context(update)
    assert integer_id(chat_of(update, kind)) == (context.chat.id if context.chat else None)
    assert integer_id(user_of(update, kind)) == (context.user.id if context.user else None)
    if context.chat:
        assert chat_type(TelegramUpdate.parse(update)) == context.chat.type


def test_an_anonymous_chats_poll_answer_is_in_that_chat() -> None:
    voter = {"id": -1001234567890, "type": "channel", "title": "News"}
    answer = {"poll_id": "5", "voter_chat": voter, "option_ids": [0], "option_persistent_ids": ["a"]}
    update = {"update_id": 1, "poll_answer": answer}
    context = aiogram_context(update)
    assert context.chat is not None and context.user is None
    assert chat_of(update, "poll_answer") == voter
    assert user_of(update, "poll_answer") is None
    assert chat_type(TelegramUpdate.parse(update)) == "channel"


def test_missing_or_malformed_parts_give_none() -> None:
    assert dig({"a": {"b": 1}}, ("a", "b")) == 1
    assert dig({"a": "text"}, ("a", "b")) is None
    assert chat_of({"update_id": 1, "poll": {"id": "1"}}, "poll") is None
    assert chat_of({"update_id": 1, "callback_query": {"id": "1"}}, "callback_query") is None
    assert chat_of({"update_id": 1, "message": {"chat": "private"}}, "message") is None
    assert user_of({"update_id": 1, "future_kind": {"from": {"id": 1}}}, "future_kind") is None
    assert integer_id({"id": True}) is None
    assert integer_id({"id": "42"}) is None
    assert integer_id(None) is None


@pytest.mark.parametrize("kind", telegram.UPDATE_KINDS)
def test_update_type_is_the_kind_present(kind: str) -> None:
    assert update_type(TelegramUpdate.parse({"update_id": 1, kind: {}})) == kind


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"update_id": 1}, "unknown"),
        ({"update_id": 1, "message": None}, "unknown"),
        ({"update_id": 1, "future_kind_2030": {"x": 1}}, "future_kind_2030"),
        ({"update_id": 1, "CamelCase": {}}, "unknown"),
        ({"update_id": 1, "": {}}, "unknown"),
        ({"update_id": 1, "x" * 65: {}}, "unknown"),
        ({"update_id": 1, "future_kind": {}, "poll": {}}, "poll"),
    ],
    ids=["none", "null-kind", "future", "not-snake-case", "empty-key", "too-long", "known-wins"],
)
def test_update_type_of_unusual_updates(data: dict[str, Any], expected: str) -> None:
    assert update_type(TelegramUpdate.parse(data)) == expected


@pytest.mark.parametrize(
    "data",
    [
        {},
        {"update_id": True},
        {"update_id": "1"},
        {"update_id": 1.0},
        {"update_id": None},
        {"update_id": 1, "poll": []},
    ],
    ids=["missing", "bool", "string", "float", "null", "kind-not-object"],
)
def test_update_id_is_a_strict_integer(data: dict[str, Any]) -> None:
    with pytest.raises(Invalid):
        TelegramUpdate.parse(data)


def _message(text: str | None, entities: Any = None, kind: str = "message") -> TelegramUpdate:
    message: dict[str, Any] = {"message_id": 1, "date": 0, "chat": {"id": 1, "type": "private"}}
    if text is not None:
        message["text"] = text
    if entities is not None:
        message["entities"] = entities
    return TelegramUpdate.parse({"update_id": 1, kind: message})


def _command_entity(length: int, offset: int = 0) -> list[dict[str, Any]]:
    return [{"type": "bot_command", "offset": offset, "length": length}]


@pytest.mark.parametrize(
    ("text", "entities", "expected"),
    [
        ("/start", _command_entity(6), "/start"),
        ("/start@MyBot arg", _command_entity(12), "/start"),
        ("/Start@MyBot", _command_entity(12), "/start"),
        ("/help me", _command_entity(5), "/help"),
        ("/order_status 42", _command_entity(13), "/order_status"),
        ("hello /start", _command_entity(6, offset=6), None),
        ("/start /help", _command_entity(5, offset=7), None),
        ("/start", None, None),
        ("/start", [{"type": "bold", "offset": 0, "length": 6}], None),
        ("/start", [{"type": "bot_command", "offset": False, "length": 6}], None),
        ("/start", [{"type": "bot_command", "offset": 0, "length": 0}], None),
        ("/start", [{"type": "bot_command", "offset": 0, "length": "6"}], None),
        ("/start", "not a list", None),
        (None, _command_entity(6), None),
        ("👋/start", _command_entity(6), None),
        ("/start👋", _command_entity(6), "/start"),
        ("/", _command_entity(1), None),
    ],
)
def test_command(text: str | None, entities: Any, expected: str | None) -> None:
    assert command(_message(text, entities)) == expected


def test_command_only_for_message_kinds() -> None:
    callback = TelegramUpdate.parse(
        {
            "update_id": 1,
            "callback_query": {
                "id": "1",
                "data": "/start",
                "message": {"text": "/start", "entities": _command_entity(6)},
            },
        }
    )
    assert command(callback) is None
    assert command(_message("/start", _command_entity(6), kind="business_message")) == "/start"


@pytest.mark.parametrize(
    ("text", "length", "expected"),
    [
        ("/start", 6, BotCommand("/start", None, bare=True)),
        ("/start  ", 6, BotCommand("/start", None, bare=True)),
        ("/Help@MyShopBot", 15, BotCommand("/help", "myshopbot", bare=True)),
        ("/help@MyShopBot where is my order", 15, BotCommand("/help", "myshopbot", bare=False)),
        ("/start👋", 6, BotCommand("/start", None, bare=False)),
    ],
)
def test_bot_command_names_its_bot_and_whether_it_is_alone(
    text: str, length: int, expected: BotCommand
) -> None:
    assert bot_command(_message(text, _command_entity(length))) == expected


@pytest.mark.parametrize(
    ("bot", "username", "addressed"),
    [
        (None, "MyShopBot", True),
        ("myshopbot", "MyShopBot", True),
        ("myshopbot", "@myshopbot", True),
        ("other_bot", "MyShopBot", False),
        ("other_bot", None, True),
    ],
)
def test_a_command_is_addressed_to_this_bot_unless_it_names_another(
    bot: str | None, username: str | None, addressed: bool
) -> None:
    assert BotCommand("/start", bot, bare=True).addressed_to(username) is addressed


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        ({"update_id": 1, "message": {"chat": {"type": "supergroup"}}}, "supergroup"),
        ({"update_id": 1, "callback_query": {"message": {"chat": {"type": "group"}}}}, "group"),
        ({"update_id": 1, "callback_query": {"inline_message_id": "x"}}, None),
        ({"update_id": 1, "inline_query": {"chat_type": "sender"}}, "sender"),
        ({"update_id": 1, "inline_query": {}}, None),
        ({"update_id": 1, "message": {"chat": {"type": 5}}}, None),
        ({"update_id": 1, "message": {"chat": {"type": "Private Chat!"}}}, None),
        ({"update_id": 1, "message": {"chat": "private"}}, None),
        ({"update_id": 1, "poll": {"chat": {"type": "private"}}}, None),
        ({"update_id": 1, "future_kind": {"chat": {"type": "private"}}}, None),
    ],
    ids=[
        "message",
        "callback",
        "inline-callback",
        "inline-query",
        "inline-query-unknown",
        "not-a-string",
        "not-a-type",
        "chat-not-object",
        "kind-without-chat",
        "future-kind",
    ],
)
def test_chat_type(data: dict[str, Any], expected: str | None) -> None:
    assert chat_type(TelegramUpdate.parse(data)) == expected
