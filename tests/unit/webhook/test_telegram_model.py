"""`pipeline.telegram`: the Update model and the routing attributes, checked against aiogram."""

from __future__ import annotations

import types
import typing
from pathlib import Path
from typing import Any

import pytest
from aiogram.types import Update
from pydantic import BaseModel, ValidationError

from pipeline import telegram
from pipeline.telegram import TelegramUpdate, chat_type, command, update_type
from tests.unit.webhook.support import TELEGRAM_FIXTURES, load_fixture


def _models(annotation: Any) -> list[type[BaseModel]]:
    """The pydantic models an annotation allows (unwrapping Optional, unions and Annotated)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _models(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [model for arg in typing.get_args(annotation) for model in _models(arg)]
    return []


def _aiogram_has_path(kind: str, path: tuple[str, ...]) -> bool:
    """Whether every variant of the kind's aiogram type has `path` (ending in a str field)."""
    models = _models(Update.model_fields[kind].annotation)
    for key in path[:-1]:
        if not models or not all(key in model.model_fields for model in models):
            return False
        models = [inner for model in models for inner in _models(model.model_fields[key].annotation)]
    return bool(models) and all(path[-1] in model.model_fields for model in models)


def test_update_kinds_are_exactly_aiograms() -> None:
    assert [name for name in Update.model_fields if name != "update_id"] == list(telegram.UPDATE_KINDS)
    assert set(telegram.UPDATE_KINDS) <= set(TelegramUpdate.model_fields)


@pytest.mark.parametrize("fixture", TELEGRAM_FIXTURES, ids=lambda path: path.stem)
def test_fixture_is_a_valid_bot_api_update(fixture: Path) -> None:
    data = load_fixture(fixture)
    Update.model_validate(data)
    assert TelegramUpdate.model_validate(data).update_id == data["update_id"]


@pytest.mark.parametrize(("kind", "path"), sorted(telegram.CHAT_TYPE_PATHS.items()))
def test_chat_type_paths_exist_in_the_bot_api(kind: str, path: tuple[str, ...]) -> None:
    assert _aiogram_has_path(kind, path)


def test_every_kind_with_a_chat_has_a_chat_type_path() -> None:
    with_chat = {kind for kind in telegram.UPDATE_KINDS if _aiogram_has_path(kind, ("chat", "type"))}
    assert with_chat <= set(telegram.CHAT_TYPE_PATHS)


def test_message_kinds_are_the_kinds_holding_a_message() -> None:
    from aiogram.types import Message

    holding_message = {
        kind for kind in telegram.UPDATE_KINDS if _models(Update.model_fields[kind].annotation) == [Message]
    }
    assert holding_message == set(telegram.MESSAGE_UPDATE_KINDS)


@pytest.mark.parametrize("kind", telegram.UPDATE_KINDS)
def test_update_type_is_the_kind_present(kind: str) -> None:
    assert update_type(TelegramUpdate.model_validate({"update_id": 1, kind: {}})) == kind


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
    assert update_type(TelegramUpdate.model_validate(data)) == expected


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
    with pytest.raises(ValidationError):
        TelegramUpdate.model_validate(data)


def _message(text: str | None, entities: Any = None, kind: str = "message") -> TelegramUpdate:
    message: dict[str, Any] = {"message_id": 1, "date": 0, "chat": {"id": 1, "type": "private"}}
    if text is not None:
        message["text"] = text
    if entities is not None:
        message["entities"] = entities
    return TelegramUpdate.model_validate({"update_id": 1, kind: message})


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
    callback = TelegramUpdate.model_validate(
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
    assert chat_type(TelegramUpdate.model_validate(data)) == expected
