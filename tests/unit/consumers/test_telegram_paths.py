"""pipeline.telegram_paths: where each update kind keeps its chat and user, checked against aiogram."""

from __future__ import annotations

import types
import typing
from typing import Any

import pytest
from aiogram.types import Chat, Update, User
from pydantic import BaseModel

from pipeline.telegram import CHAT_TYPE_PATHS, UPDATE_KINDS
from pipeline.telegram_paths import CHAT_PATHS, USER_PATHS, chat_of, dig, integer_id, user_of
from tests.unit.consumer_support import TELEGRAM_FIXTURE_NAMES, aiogram_context, telegram_update


def kind_model(kind: str) -> type[BaseModel]:
    [model] = [t for t in typing.get_args(Update.model_fields[kind].annotation) if t is not type(None)]
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


@pytest.mark.parametrize("kind", sorted(CHAT_PATHS))
def test_every_chat_path_leads_to_a_chat_in_the_bot_api(kind: str) -> None:
    assert kind in UPDATE_KINDS
    assert Chat in types_at(kind_model(kind), CHAT_PATHS[kind])


@pytest.mark.parametrize("kind", sorted(USER_PATHS))
def test_every_user_path_leads_to_a_user_in_the_bot_api(kind: str) -> None:
    assert kind in UPDATE_KINDS
    assert types_at(kind_model(kind), USER_PATHS[kind]) == {User}


@pytest.mark.parametrize("kind", UPDATE_KINDS)
def test_no_kind_with_a_direct_chat_or_user_is_missing(kind: str) -> None:
    model = kind_model(kind)
    if Chat in types_at(model, ("chat",)):
        assert CHAT_PATHS[kind] == ("chat",)
    for key in ("from", "user"):
        if types_at(model, (key,)) == {User}:
            assert USER_PATHS[kind] == (key,)


def test_chat_paths_agree_with_the_webhooks_chat_type_paths() -> None:
    for kind, path in CHAT_TYPE_PATHS.items():
        if path[-1] == "type" and len(path) > 1:
            assert CHAT_PATHS[kind] == path[:-1], kind


@pytest.mark.parametrize("name", TELEGRAM_FIXTURE_NAMES)
def test_chat_and_user_match_aiogram_for_every_fixture(name: str) -> None:
    update = telegram_update(name)
    [kind] = [key for key in update if key != "update_id"]
    context = aiogram_context(update)
    assert integer_id(chat_of(update, kind)) == (context.chat.id if context.chat else None)
    assert integer_id(user_of(update, kind)) == (context.user.id if context.user else None)


def test_missing_or_malformed_parts_give_none() -> None:
    assert dig({"a": {"b": 1}}, ("a", "b")) == 1
    assert dig({"a": "text"}, ("a", "b")) is None
    assert chat_of({"update_id": 1, "poll": {"id": "1"}}, "poll") is None
    assert chat_of({"update_id": 1, "callback_query": {"id": "1"}}, "callback_query") is None
    assert integer_id({"id": True}) is None
    assert integer_id({"id": "42"}) is None
    assert integer_id(None) is None
