"""The Telegram stand-in knows the Bot API the way aiogram models it: every method, its required
parameters, what it returns, and the webhook state `setWebhook`/`getWebhookInfo` share.

aiogram is the oracle: its method models say which methods exist and what they need, and every
answer the fake gives must validate as the method's declared result type.
"""

from __future__ import annotations

import json
import types
import typing
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from aiogram.methods import ForwardMessage, GetWebhookInfo
from aiogram.types import InputFile, Message, WebhookInfo
from pydantic import TypeAdapter

from local.fakes.telegram import API_METHODS, DEFAULT_BOT_TOKEN, TelegramFake
from local.fakes.telegram_api_gen import build_table, method_models, sample
from ops.telegram import BotApi as OpsBotApi
from ops.telegram import TelegramApiError

NOT_FOUND = {"ok": False, "error_code": 404, "description": "Not Found"}


@pytest.fixture
def telegram() -> Iterator[TelegramFake]:
    with TelegramFake(strict=True) as fake:
        yield fake  # type: ignore[misc]


def call(
    fake: TelegramFake, method: str, params: dict[str, Any] | None = None, encoding: str = "json"
) -> tuple[int, Any]:
    """POST a Bot API call as JSON, form-encoded, or as a GET query; (status, answer)."""
    url = f"{fake.url}/bot{DEFAULT_BOT_TOKEN}/{method}"
    params = params or {}
    form = {k: v if isinstance(v, str | bytes) else json.dumps(v) for k, v in params.items()}
    if encoding == "multipart":
        boundary = "local-fake-boundary"
        parts = []
        for name, value in params.items():
            if isinstance(value, bytes):  # a file
                head = f'Content-Disposition: form-data; name="{name}"; filename="{name}.bin"'
                parts.append(f"--{boundary}\r\n{head}\r\n\r\n".encode() + value + b"\r\n")
            else:
                text = value if isinstance(value, str) else json.dumps(value)
                head = f'Content-Disposition: form-data; name="{name}"'
                parts.append(f"--{boundary}\r\n{head}\r\n\r\n{text}\r\n".encode())
        req = urllib.request.Request(  # noqa: S310 - the fake's http URL
            url,
            data=b"".join(parts) + f"--{boundary}--\r\n".encode(),
            headers={"Content-Type": f"multipart/form-data; boundary={boundary}"},
        )
    elif encoding == "query":
        req = urllib.request.Request(f"{url}?{urllib.parse.urlencode(form)}", method="GET")  # noqa: S310
    elif encoding == "form":
        req = urllib.request.Request(  # noqa: S310 - the fake's http URL
            url,
            data=urllib.parse.urlencode(form).encode(),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
    else:
        req = urllib.request.Request(  # noqa: S310 - the fake's http URL
            url, data=json.dumps(params).encode(), headers={"Content-Type": "application/json"}
        )
    try:
        with urllib.request.urlopen(req, timeout=5) as response:  # noqa: S310 - the fake's http URL
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def _prefer_plain(annotation: Any) -> Any:
    """For a union parameter (InputFile | str, int | str), the plain type a JSON call can carry."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        options = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        for plain in (int, str):
            if plain in options:
                return plain
        return options[0]
    return annotation


def required_params(model: Any) -> dict[str, Any]:
    """A value for each required parameter; a file (bytes) where only an upload will do."""
    params = {}
    for name, field in model.model_fields.items():
        if field.is_required():
            plain = _prefer_plain(field.annotation)
            params[field.alias or name] = b"\x89PNG" if plain is InputFile else sample(plain)
    return params


def test_the_method_table_is_what_the_installed_aiogram_models() -> None:
    """Regenerate with `python -m local.fakes.telegram_api_gen` after bumping aiogram."""
    assert build_table() == API_METHODS
    assert len(API_METHODS) > 150


def test_every_bot_api_method_is_answered_with_a_result_of_its_declared_type(telegram: TelegramFake) -> None:
    refused = {}
    for api_name, model in sorted(method_models().items()):
        if api_name in ("setWebhook", "getUpdates"):  # stateful: covered below
            continue
        params = required_params(model)
        if API_METHODS[api_name.lower()]["result"] == "message_or_true":  # edit*: which message
            # One the stand-in never sent: it cannot know the edit changes nothing.
            params.update(chat_id=42, message_id=10**9)
        uploads = any(isinstance(value, bytes) for value in params.values())
        status, body = call(telegram, api_name, params, "multipart" if uploads else "json")
        if status != 200 or body.get("ok") is not True:
            refused[api_name] = body
            continue
        TypeAdapter(model.__returning__).validate_python(body["result"])
    assert json.dumps(refused, indent=0) == "{}"


def test_forward_message_returns_a_message_in_the_target_chat(telegram: TelegramFake) -> None:
    params = {"chat_id": -1001234567890, "from_chat_id": 42, "message_id": 7}
    ForwardMessage.model_validate(params)

    status, body = call(telegram, "forwardMessage", params)

    assert status == 200
    message = Message.model_validate(body["result"])
    assert (message.chat.id, message.chat.type) == (-1001234567890, "supergroup")


def test_method_names_are_matched_case_insensitively_like_telegram(telegram: TelegramFake) -> None:
    assert call(telegram, "GETME")[1]["result"]["is_bot"] is True


@pytest.mark.parametrize("method", ["sendMesage", "forwardMessages2", "getWebhook"])
def test_an_unknown_method_is_404_not_found(telegram: TelegramFake, method: str) -> None:
    assert call(telegram, method, {"chat_id": 1}) == (404, NOT_FOUND)


@pytest.mark.parametrize("encoding", ["json", "form", "query"])
@pytest.mark.parametrize(
    ("method", "params", "description"),
    [
        ("sendMessage", {"text": "hi"}, "Bad Request: chat_id is empty"),
        ("sendMessage", {"chat_id": 42}, "Bad Request: message text is empty"),
        ("sendMessage", {"chat_id": 42, "text": ""}, "Bad Request: message text is empty"),
        ("forwardMessage", {"chat_id": 42, "message_id": 1}, "Bad Request: from_chat_id is empty"),
        (
            "answerCallbackQuery",
            {},
            "Bad Request: query is too old and response timeout expired or query ID is invalid",
        ),
        ("answerInlineQuery", {"inline_query_id": "1"}, "Bad Request: results is empty"),
    ],
)
def test_a_missing_required_parameter_is_a_bad_request_in_telegrams_words(
    telegram: TelegramFake, method: str, params: dict[str, Any], description: str, encoding: str
) -> None:
    assert call(telegram, method, params, encoding) == (
        400,
        {"ok": False, "error_code": 400, "description": description},
    )


@pytest.mark.parametrize("encoding", ["json", "form", "query"])
def test_parameters_arrive_as_json_form_or_query(telegram: TelegramFake, encoding: str) -> None:
    markup = {"inline_keyboard": [[{"text": "Yes", "callback_data": "yes"}]]}
    status, body = call(
        telegram, "sendMessage", {"chat_id": 42, "text": "Hi", "reply_markup": markup}, encoding
    )

    assert status == 200
    message = Message.model_validate(body["result"])
    assert (message.chat.id, message.text, body["result"]["reply_markup"]) == (42, "Hi", markup)


def test_a_file_upload_in_multipart_form_data_is_accepted(telegram: TelegramFake) -> None:
    status, body = call(
        telegram, "sendDocument", {"chat_id": 42, "document": b"%PDF", "caption": "Offer"}, "multipart"
    )

    assert status == 200
    assert Message.model_validate(body["result"]).caption == "Offer"
    assert call(telegram, "sendDocument", {"chat_id": 42, "caption": "x"}, "multipart")[1]["description"] == (
        "Bad Request: document is empty"
    )


def test_a_json_text_that_looks_like_json_stays_text(telegram: TelegramFake) -> None:
    status, body = call(telegram, "sendMessage", {"chat_id": 42, "text": "[1, 2]"})

    assert (status, body["result"]["text"]) == (200, "[1, 2]")


def test_strict_mode_refuses_a_call_aiogram_would_not_make(telegram: TelegramFake) -> None:
    status, body = call(telegram, "sendMessage", {"chat_id": 42, "text": "Hi", "txet": "typo"})
    assert (status, body["description"]) == (400, "Bad Request: sendMessage has no parameter txet")

    status, body = call(telegram, "sendMessage", {"chat_id": 42, "text": "Hi", "reply_markup": [1]})
    assert status == 400 and body["description"].startswith("Bad Request: reply_markup")

    lenient = TelegramFake()  # Telegram itself ignores unknown parameters
    with lenient:
        assert call(lenient, "sendMessage", {"chat_id": 42, "text": "Hi", "txet": "typo"})[0] == 200


def test_set_webhook_shows_in_get_webhook_info_until_delete_webhook(telegram: TelegramFake) -> None:
    ops = OpsBotApi(DEFAULT_BOT_TOKEN, base=telegram.url)
    assert ops.get_webhook_info() == {"url": "", "has_custom_certificate": False, "pending_update_count": 0}

    ops.set_webhook(
        "https://abc.execute-api.eu-central-1.amazonaws.com/telegram/webhook",
        "s3cret_token-1",
        allowed_updates=["message", "callback_query"],
        max_connections=40,
        drop_pending_updates=True,
    )
    info = ops.get_webhook_info()
    WebhookInfo.model_validate(info)
    assert info == {
        "url": "https://abc.execute-api.eu-central-1.amazonaws.com/telegram/webhook",
        "has_custom_certificate": False,
        "pending_update_count": 0,
        "max_connections": 40,
        "allowed_updates": ["message", "callback_query"],
    }
    with pytest.raises(TelegramApiError, match="409 Conflict: can't use getUpdates"):
        ops.call("getUpdates")

    telegram.pending_update_count = 3
    assert ops.get_webhook_info()["pending_update_count"] == 3
    ops.delete_webhook(drop_pending_updates=True)

    info = ops.get_webhook_info()
    GetWebhookInfo.model_validate({})
    assert info == {"url": "", "has_custom_certificate": False, "pending_update_count": 0}
    assert ops.call("getUpdates") == []


def test_set_webhook_is_checked_like_telegram(telegram: TelegramFake) -> None:
    status, body = call(telegram, "setWebhook", {"url": "https://x.example/hook", "secret_token": "not ok!"})
    assert (status, body["description"]) == (400, "Bad Request: secret token contains unallowed characters")

    # allowed_updates form-encoded is a JSON array, as Telegram expects it.
    params = {"url": "https://x.example/hook", "allowed_updates": ["message"], "max_connections": 5}
    assert call(telegram, "setWebhook", params, "form") == (200, {"ok": True, "result": True})
    assert telegram.webhook_info["allowed_updates"] == ["message"]
    assert telegram.webhook_info["max_connections"] == 5

    # An empty url removes the webhook, as Telegram does.
    assert call(telegram, "setWebhook", {"url": ""}) == (200, {"ok": True, "result": True})
    assert telegram.webhook_info["url"] == ""


def _send_message_headers(fake: TelegramFake) -> dict[str, str]:
    req = urllib.request.Request(  # noqa: S310 - the fake's http URL
        f"{fake.url}/bot{DEFAULT_BOT_TOKEN}/sendMessage",
        data=json.dumps({"chat_id": 5, "text": "hi"}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=5) as response:  # noqa: S310 - the fake's http URL
        return {name.lower(): value for name, value in response.headers.items()}


def _control(fake: TelegramFake, method: str, body: Any = None) -> tuple[int, Any]:
    req = urllib.request.Request(  # noqa: S310 - the fake's http URL
        f"{fake.url}/_crash_after",
        data=json.dumps(body).encode() if body is not None else None,
        method=method,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=5) as response:  # noqa: S310 - the fake's http URL
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def test_crash_after_marks_exactly_the_nth_next_answer_of_that_method(telegram: TelegramFake) -> None:
    from pipeline.telegram_bot.reference import CRASH_HEADER

    assert _control(telegram, "POST", {"method": "sendMessage", "nth": 2})[0] == 200
    marked = [CRASH_HEADER in _send_message_headers(telegram) for _ in range(3)]
    assert marked == [False, True, False]
    assert _control(telegram, "POST", {"method": "sendMessage"})[0] == 200
    telegram.clear_faults()  # DELETE /_faults forgets pending crashes too
    assert CRASH_HEADER not in _send_message_headers(telegram)


@pytest.mark.parametrize("body", [{"method": "sendNothing"}, {"method": "sendMessage", "nth": 0}, {}])
def test_crash_after_refuses_an_unknown_method_or_count(telegram: TelegramFake, body: dict[str, Any]) -> None:
    status, answer = _control(telegram, "POST", body)
    assert status == 400 and answer["error"]
    assert telegram.pending_crashes() == {}
