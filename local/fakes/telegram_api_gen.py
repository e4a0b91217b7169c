"""Builds `telegram_api.json`, the Bot API methods the Telegram stand-in accepts, from aiogram.

aiogram (a test dependency) models every Bot API method: its name (`__api_method__`), its
parameters (pydantic fields, required or not) and what it returns (`__returning__`). Importing it
takes seconds, so the fake reads the table this writes instead; a unit test checks the table
still equals what the installed aiogram says. Regenerate after bumping aiogram:

    .venv/bin/python -m local.fakes.telegram_api_gen
"""

from __future__ import annotations

import datetime
import enum
import inspect
import json
import types
import typing
from pathlib import Path
from typing import Any

from pydantic import BaseModel, TypeAdapter

TABLE_PATH = Path(__file__).with_name("telegram_api.json")
# What the fake builds itself (from the request and its state) rather than a sample.
BUILT_RESULTS = {
    "Message": "message",
    "Message | bool": "message_or_true",
    "list[Message]": "messages",
    "MessageId": "message_id",
    "list[MessageId]": "message_ids",
    "bool": "true",
    "User": "bot_user",
    "ChatFullInfo": "chat",
    "WebhookInfo": "webhook_info",
}


def method_models() -> dict[str, Any]:
    """aiogram's model of every Bot API method, by its API name."""
    from aiogram import methods
    from aiogram.methods.base import TelegramMethod

    return {
        cls.__api_method__: cls
        for cls in vars(methods).values()
        if inspect.isclass(cls) and issubclass(cls, TelegramMethod) and cls is not TelegramMethod
    }


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in typing.get_args(annotation))
    origin = typing.get_origin(annotation)
    if origin is list:
        return f"list[{_type_name(typing.get_args(annotation)[0])}]"
    return str(annotation)


def sample(annotation: Any) -> Any:
    """The smallest JSON value of a type: every required field filled, nothing optional."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return sample(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return sample(options[0])
    if origin is typing.Literal:
        value = typing.get_args(annotation)[0]
        return value.value if isinstance(value, enum.Enum) else value
    if origin is list:
        return []
    if origin is dict:
        return {}
    if annotation is bool:
        return True
    if annotation is int:
        return 1
    if annotation is float:
        return 1.0
    if annotation is str:
        return "local"
    if annotation is datetime.datetime:
        return 1767225600
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return next(iter(annotation)).value
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        document = {}
        for name, field in annotation.model_fields.items():
            if field.is_required() or typing.get_origin(field.annotation) is typing.Literal:
                document[field.alias or name] = sample(field.annotation)
        return document
    raise TypeError(f"no sample for {annotation!r}")


def build_table() -> dict[str, Any]:
    table: dict[str, Any] = {}
    for api_name, model in sorted(method_models().items()):
        returning = model.__returning__
        result_type = _type_name(returning)
        entry: dict[str, Any] = {
            "name": api_name,
            "required": [f.alias or n for n, f in model.model_fields.items() if f.is_required()],
            "optional": [f.alias or n for n, f in model.model_fields.items() if not f.is_required()],
            "result": BUILT_RESULTS.get(result_type, "sample"),
            "result_type": result_type,
        }
        if entry["result"] != "true":
            value = sample(returning)
            TypeAdapter(returning).validate_python(value)  # the sample is a valid result
            entry["sample"] = value
        table[api_name.lower()] = entry
    return table


def main() -> None:
    TABLE_PATH.write_text(json.dumps(build_table(), indent=1, sort_keys=True) + "\n")
    print(f"wrote {TABLE_PATH}")


if __name__ == "__main__":
    main()
